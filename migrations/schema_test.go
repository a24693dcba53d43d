package migrations_test

import (
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/testdb"
)

// schemaFile is the schema as the migrations leave it, for people to read:
// every table, index, function and trigger in one file. Migrations are
// history; this is the present.
const schemaFile = "schema.sql"

// TestSchemaFileIsCurrent: schema.sql is what pg_dump prints for a freshly
// migrated schema (normalised: the schema is called outboxd, no session
// settings or per-dump lines). A migration that changes the schema comes
// with the file it produces: `make schema` writes it.
func TestSchemaFileIsCurrent(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	pgDump, err := exec.LookPath("pg_dump")
	require.NoError(t, err, "pg_dump (PostgreSQL's client, the server's major version or newer) is needed to read the migrated schema")
	cmd := exec.Command(pgDump, "--schema-only", "--no-owner", "--no-privileges", "--schema", db.Schema, testdb.URL())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "pg_dump: %s", stderr.String())
	got := normaliseDump(string(out), db.Schema)

	if os.Getenv("OUTBOXD_WRITE_SCHEMA") != "" {
		require.NoError(t, os.WriteFile(schemaFile, []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile(schemaFile)
	require.NoError(t, err)
	if string(want) != got {
		require.Equal(t, string(want), got, "migrations/schema.sql is not what the migrations make: run `make schema` and commit it")
	}
}

var blankRuns = regexp.MustCompile(`\n{3,}`)

// normaliseDump keeps pg_dump's definitions and drops what changes from one
// dump to the next: the dump's versions, its session settings and its
// \restrict key. The test's random schema name becomes outboxd.
func normaliseDump(dump, schema string) string {
	var keep []string
	for _, line := range strings.Split(dump, "\n") {
		switch {
		case strings.HasPrefix(line, `\restrict`), strings.HasPrefix(line, `\unrestrict`),
			strings.HasPrefix(line, "-- Dumped "), strings.HasPrefix(line, "SET "),
			strings.HasPrefix(line, "SELECT pg_catalog.set_config("):
			continue
		}
		keep = append(keep, strings.ReplaceAll(line, schema, "outboxd"))
	}
	s := blankRuns.ReplaceAllString(strings.Join(keep, "\n"), "\n\n")
	return "-- The schema as outboxd's and River's migrations leave it (outboxd migrate\n" +
		"-- --schema outboxd). Written by `make schema`; a test keeps it current.\n" +
		"-- Read it, never apply it: migrations/*.sql are what change a database.\n" +
		strings.TrimSpace(s) + "\n"
}
