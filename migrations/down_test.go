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
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT pg_get_functiondef(p.oid) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
			WHERE n.nspname = $1 AND p.proname = 'outboxd_enqueue'`, db.Schema).Scan(&d))
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

// TestTheCarriedEffectsMigrationKeepsEveryEffect: 00040 adds the column
// events carry their effects in and the event intake beside effects in
// every state, which it leaves as they were; its Down refuses to run while
// an event still carries effects (they would be lost with the column),
// and runs once none does.
func TestTheCarriedEffectsMigrationKeepsEveryEffect(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	s := db.Schema
	_, err := gooseFor(t, db).DownTo(ctx, 39)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `
WITH ev AS (INSERT INTO `+s+`.outbox_events (id, event_type, payload) VALUES (gen_random_uuid(), 'order.paid', '{}') RETURNING id)
INSERT INTO `+s+`.side_effects (id, source_id, kind, provider, payload, state, attempts)
SELECT `+s+`.outboxd_effect_id(ev.id, st), ev.id, st, 'webhook', '{}', st, CASE WHEN st = 'pending' THEN 0 ELSE 1 END
FROM ev, unnest(ARRAY['pending', 'fired', 'confirmed', 'failed', 'cancelled']) AS st`)
	require.NoError(t, err)
	rows := func() string {
		var r string
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT string_agg(id || ' ' || state || ' ' || attempts || ' ' || updated_at, '; ' ORDER BY id)
			FROM `+s+`.side_effects`).Scan(&r))
		return r
	}
	before := rows()
	_, err = migrations.Up(ctx, db.Pool, db.Schema)
	require.NoError(t, err)
	require.Equal(t, before, rows(), "every effect as it was")

	_, err = db.Pool.Exec(ctx, `
WITH ev AS (INSERT INTO `+s+`.outbox_events (id, event_type, payload, effects)
	VALUES (gen_random_uuid(), 'order.paid', '{}', '[{"kind": "webhook.a", "provider": "webhook", "payload": {}}]') RETURNING id)
INSERT INTO `+s+`.outbox_event_intake (event_id) SELECT id FROM ev`)
	require.NoError(t, err)
	_, err = gooseFor(t, db).DownTo(ctx, 39)
	require.ErrorContains(t, err, "run outboxd until none do")
	var carried int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM `+s+`.outbox_events WHERE effects IS NOT NULL`).Scan(&carried))
	require.Equal(t, 1, carried, "the refused Down changed nothing")

	_, err = db.Pool.Exec(ctx, `UPDATE `+s+`.outbox_events SET effects = NULL`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `DELETE FROM `+s+`.outbox_event_intake`)
	require.NoError(t, err)
	_, err = gooseFor(t, db).DownTo(ctx, 39)
	require.NoError(t, err)
	require.Equal(t, before, rows())
	_, err = migrations.Up(ctx, db.Pool, db.Schema)
	require.NoError(t, err)
}
