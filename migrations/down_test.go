package migrations_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/testdb"
	"github.com/outboxd/outboxd/migrations"
)

// TestTheEndpointMigrationsGoDownAndUpAgain: 00029 and 00028 undo
// themselves, outboxd_enqueue back as 00025 left it, and apply again.
func TestTheEndpointMigrationsGoDownAndUpAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	def := func() string {
		var d string
		require.NoError(t, db.Pool.QueryRow(ctx, "SELECT pg_get_functiondef(($1 || '.outboxd_enqueue(jsonb, jsonb, boolean)')::regprocedure)", db.Schema).Scan(&d))
		return d
	}
	withEndpoints := def()
	require.Contains(t, withEndpoints, "subscribers")
	_, err := gooseFor(t, db).DownTo(ctx, 27)
	require.NoError(t, err)
	require.NotContains(t, def(), "subscribers", "outboxd_enqueue as 00025 left it")
	var n int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM information_schema.tables WHERE table_schema = $1 AND table_name LIKE 'outboxd_endpoint%'", db.Schema).Scan(&n))
	require.Zero(t, n)
	_, err = migrations.Up(ctx, db.Pool, db.Schema)
	require.NoError(t, err)
	require.Equal(t, withEndpoints, def())
}

// gooseFor is goose over db's schema, as migrations.Up runs it, for tests
// that step through versions.
func gooseFor(t *testing.T, db *testdb.DB) *goose.Provider {
	t.Helper()
	cc := db.Pool.Config().ConnConfig.Copy()
	cc.RuntimeParams["search_path"] = db.Schema
	sqlDB := stdlib.OpenDB(*cc)
	t.Cleanup(func() { _ = sqlDB.Close() })
	p, err := goose.NewProvider(goose.DialectPostgres, sqlDB, migrations.FS,
		goose.WithTableName(migrations.VersionTable), goose.WithDisableGlobalRegistry(true))
	require.NoError(t, err)
	return p
}
