// Package engine owns the side_effects state machine and the River worker
// that drives it, behind the two public faces: package outbox (enqueue)
// and package sideeffects (dispatch and operate).
//
//	pending --claim (committed before the provider is called)--> fired
//	fired   --acknowledged (same tx completes the River job)--> confirmed
//	fired   --retryable (provider did not act)--> pending, retried later
//	fired   --in doubt (timeout, crash)--> fired, re-fired with the same key
//	pending|fired --permanent, retries exhausted, key window passed--> failed
//
// Every transition is one guarded UPDATE ... WHERE state IN (...) in
// queries.go; a transition that no longer applies changes nothing. The
// worker, the enqueue side (package outbox) and the operator all go through
// Store, so the rules are written once. Each statement is a Go constant in
// queries.go, declared once and used by name (Store.sql fills in the
// schema): store_enqueue.go holds what Enqueue writes, store_dispatch.go
// what workers write, inspect.go, overview.go and stats.go the reads,
// operator.go the operator's actions, events.go provider events, and
// maintenance.go and purge.go the leader's periodic work.
//
// An effect's idempotency key is Key(event id, kind); Postgres computes the
// same value as outboxd_idempotency_key(source_id, kind). The effect's id is
// derived from the key (EffectID, SQL outboxd_effect_id), so an effect is
// found by its key through its primary key; rows written by plain SQL with
// another id are found through a partial index instead.
package engine
