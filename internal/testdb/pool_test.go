package testdb_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/testdb"
)

// These tests are not parallel: each asks for a schema right after a
// subtest gave one back, and must get that one.

// TestAReusedSchemaIsLikeAFreshOne: rows, sequences and the seeded minute
// mark a test left behind are gone when the next test gets the schema.
func TestAReusedSchemaIsLikeAFreshOne(t *testing.T) {
	ctx := context.Background()
	fresh := testdb.New(t)
	want := contents(t, fresh)

	var used string
	t.Run("a test that writes", func(t *testing.T) {
		db := testdb.New(t)
		used = db.Schema
		_, err := db.Pool.Exec(ctx, `SET search_path TO `+db.Schema+`;
			INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload)
				VALUES (gen_random_uuid(), 'order', '1', 'order.placed', '{}');
			SELECT nextval('side_effects_ordering_seq');
			UPDATE outboxd_minutes_summarized SET since = since - interval '1 hour'`)
		require.NoError(t, err)
		require.NotEqual(t, want, contents(t, db))
	})

	db := testdb.New(t)
	require.Equal(t, used, db.Schema, "the schema given back is reused")
	require.Equal(t, want, contents(t, db), "and is as fresh as a new one")
}

// TestASchemaATestChangedIsNotReused: a test that alters the schema's
// shape gives it up.
func TestASchemaATestChangedIsNotReused(t *testing.T) {
	ctx := context.Background()
	var changed string
	t.Run("a test that drops an index", func(t *testing.T) {
		db := testdb.New(t)
		changed = db.Schema
		_, err := db.Pool.Exec(ctx, "DROP INDEX "+db.Schema+".side_effects_live_idx")
		require.NoError(t, err)
	})
	db := testdb.New(t)
	require.NotEqual(t, changed, db.Schema)
	var gone bool
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT to_regnamespace($1) IS NULL", changed).Scan(&gone))
	require.True(t, gone, "the changed schema is dropped")
}

// contents is what a test could see in a schema: rows per table (the
// seeded minute mark compared with now), and the next ordering number.
func contents(t *testing.T, db *testdb.DB) map[string]any {
	t.Helper()
	ctx := context.Background()
	out := map[string]any{}
	rows, err := db.Pool.Query(ctx, `SELECT relname FROM pg_class WHERE relnamespace = $1::regnamespace AND relkind = 'r' ORDER BY 1`, db.Schema)
	require.NoError(t, err)
	var tables []string
	for rows.Next() {
		var n string
		require.NoError(t, rows.Scan(&n))
		tables = append(tables, n)
	}
	require.NoError(t, rows.Err())
	for _, tb := range tables {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM "+db.Schema+"."+tb).Scan(&n))
		out[tb] = n
	}
	var current bool
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT since = date_trunc('minute', now()) OR since > now() - interval '2 minutes' FROM "+db.Schema+".outboxd_minutes_summarized").Scan(&current))
	out["minute mark is now"] = current
	var seq, called any
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT last_value, is_called FROM "+db.Schema+".side_effects_ordering_seq").Scan(&seq, &called))
	out["ordering seq"] = []any{seq, called}
	return out
}
