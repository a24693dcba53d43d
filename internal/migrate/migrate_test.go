package migrate_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/migrate"
	"github.com/outboxd/outboxd/internal/testdb"
)

func TestUpIsIdempotent(t *testing.T) {
	t.Parallel()
	db := testdb.NewEmpty(t)
	ctx := context.Background()

	require.ErrorIs(t, migrate.Check(ctx, db.Pool, db.Schema), migrate.ErrNotMigrated)

	first, err := migrate.Up(ctx, db.Pool, db.Schema)
	require.NoError(t, err)
	require.Positive(t, first.RiverApplied)
	require.Positive(t, first.OutboxApplied)
	require.NoError(t, migrate.Check(ctx, db.Pool, db.Schema))

	second, err := migrate.Up(ctx, db.Pool, db.Schema)
	require.NoError(t, err)
	require.Equal(t, migrate.Result{}, second, "second run must apply nothing")

	// Both River's and outboxd's tables landed in the configured schema.
	var n int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM information_schema.tables
		WHERE table_schema = $1 AND table_name IN ('river_job', 'outbox_events', 'side_effects', $2)`,
		db.Schema, migrate.VersionTable).Scan(&n))
	require.Equal(t, 4, n)
}

func TestConcurrentUp(t *testing.T) {
	t.Parallel()
	db := testdb.NewEmpty(t)
	ctx := context.Background()
	errs := make(chan error, 3)
	for range 3 {
		go func() { _, err := migrate.Up(ctx, db.Pool, db.Schema); errs <- err }()
	}
	for range 3 {
		require.NoError(t, <-errs)
	}
	require.NoError(t, migrate.Check(ctx, db.Pool, db.Schema))
}
