// Package migrations holds outboxd's SQL migrations (the .sql files beside
// this one, embedded) and applies them, with River's own, to one Postgres
// schema, from Go, idempotently: what "outboxd migrate" does, for
// applications that migrate at start-up or set up their tests, in the
// manner of rivermigrate. It is also what outboxd's binaries, demo and tests
// use, so there is exactly one way a schema comes to be.
//
//	res, err := migrations.Up(ctx, pool, "outboxd")
package migrations

import "embed"

// FS holds the goose migration files (schema.sql beside them is for
// reading and is not embedded).
//
//go:embed 0*.sql
var FS embed.FS
