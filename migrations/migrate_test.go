package migrations_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/testdb"
	"github.com/outboxd/outboxd/migrations"
)

func TestUpIsIdempotent(t *testing.T) {
	t.Parallel()
	db := testdb.NewEmpty(t)
	ctx := context.Background()

	require.ErrorIs(t, migrations.Check(ctx, db.Pool, db.Schema), migrations.ErrNotMigrated)

	first, err := migrations.Up(ctx, db.Pool, db.Schema)
	require.NoError(t, err)
	require.Positive(t, first.RiverApplied)
	require.Positive(t, first.OutboxApplied)
	require.NoError(t, migrations.Check(ctx, db.Pool, db.Schema))

	second, err := migrations.Up(ctx, db.Pool, db.Schema)
	require.NoError(t, err)
	require.Equal(t, migrations.Result{}, second, "second run must apply nothing")

	// Both River's and outboxd's tables landed in the configured schema.
	var n int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM information_schema.tables
		WHERE table_schema = $1 AND table_name IN ('river_job', 'outbox_events', 'side_effects', $2)`,
		db.Schema, migrations.VersionTable).Scan(&n))
	require.Equal(t, 4, n)
}

func TestConcurrentUp(t *testing.T) {
	t.Parallel()
	db := testdb.NewEmpty(t)
	ctx := context.Background()
	errs := make(chan error, 3)
	for range 3 {
		go func() { _, err := migrations.Up(ctx, db.Pool, db.Schema); errs <- err }()
	}
	for range 3 {
		require.NoError(t, <-errs)
	}
	require.NoError(t, migrations.Check(ctx, db.Pool, db.Schema))
}

func TestTemporarySchemaIsMigratedAndDropped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, testdb.URL())
	require.NoError(t, err)
	defer pool.Close()
	schema, drop, err := migrations.Temporary(ctx, pool, "outboxd_tmp")
	require.NoError(t, err)
	require.Regexp(t, `^outboxd_tmp_[0-9a-f]{8}$`, schema)
	require.NoError(t, migrations.Check(ctx, pool, schema))
	drop()
	var n int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM information_schema.schemata WHERE schema_name = $1", schema).Scan(&n))
	require.Zero(t, n, "dropped")
	_, _, err = migrations.Temporary(ctx, pool, "Bad Prefix")
	require.ErrorContains(t, err, "schema")
}

// TestTheEnqueueFunctionKeepsItsSettings: outboxd_enqueue resolves names
// in its own schema only (00023) and plans its statements once per
// session (00039). Both are settings of the function, which a later
// CREATE OR REPLACE of it would drop without a word.
func TestTheEnqueueFunctionKeepsItsSettings(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	var settings []string
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT coalesce(proconfig, '{}') FROM pg_proc
		WHERE proname = 'outboxd_enqueue' AND pronamespace = $1::regnamespace`, db.Schema).Scan(&settings))
	require.ElementsMatch(t, []string{
		"search_path=" + db.Schema + ", pg_temp",
		"plan_cache_mode=force_generic_plan",
	}, settings)
}
