// Package migrations embeds outboxd's SQL migrations. They are applied by
// "outboxd migrate" (see outbox/outboxmigrate) together with River's own.
package migrations

import "embed"

// FS holds the goose migration files.
//
//go:embed *.sql
var FS embed.FS
