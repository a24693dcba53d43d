// Package store runs outboxd's SQL: every statement, the row types and the
// scanners that read them, for the tables of one schema. It holds no rule
// of the product; package engine decides what to do and calls a Store
// method to do it (River's client over its driver).
//
// Every transition of side_effects is one guarded UPDATE ... WHERE state
// IN (...); a transition that no longer applies changes nothing. Each
// statement is a Go constant, declared once and used by name (Store.sql
// fills in the schema): queries.go holds the effects' statements, the
// other files those of one table or feature beside the methods that run
// them (limits.go, replay.go, tenants.go, maintenance.go). The tables,
// indexes and SQL functions they run against are in
// migrations/schema.sql.
//
// An effect's idempotency key is Key(event id, kind); Postgres computes
// the same value as outboxd_idempotency_key(source_id, kind). The
// effect's id is derived from the key (EffectID, SQL outboxd_effect_id),
// so an effect is found by its key through its primary key; rows written
// by plain SQL with another id are found through a partial index instead.
package store
