// Package pgschema is outboxd's one rule for the Postgres schema its tables
// live in, and the one way its SQL names a table there. Every package that
// takes a schema (outbox, sideeffects, inbox, idempotency, migrations)
// checks it here, so a name refused by one is refused by all, with the
// same words.
package pgschema

import (
	"fmt"
	"regexp"

	"github.com/jackc/pgx/v5"
)

var nameRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// Check accepts "" (the connection's search_path) or a plain lowercase
// Postgres identifier: one schema that needs no quoting, so the same name
// works unquoted in search_path, in River's settings and in hand-written
// SQL.
func Check(schema string) error {
	if schema != "" && !nameRE.MatchString(schema) {
		return fmt.Errorf("schema %q: use one lowercase name of letters, digits and _ (at most 63, not starting with a digit), e.g. outboxd", schema)
	}
	return nil
}

// Table is table in schema, as SQL names it: the schema quoted, a dot and
// the table, or the bare table for the search_path. Quoting makes a name
// that skipped Check harmless, though Check is still where it is refused.
func Table(schema, table string) string {
	if schema == "" {
		return table
	}
	return pgx.Identifier{schema}.Sanitize() + "." + table
}
