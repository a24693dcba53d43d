package migrations_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/store"
	"github.com/outboxd/outboxd/internal/testdb"
	"github.com/outboxd/outboxd/migrations"
)

// TestEffectsBeforeDerivedIDsAreFoundByKey: effects written while the key
// was a stored column (ids of their own) are still found by key once
// migration 00012 has dropped the column, and enqueueing their event again
// reports them, under their own ids, as duplicates.
func TestEffectsBeforeDerivedIDsAreFoundByKey(t *testing.T) {
	t.Parallel()
	db := testdb.NewEmpty(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, "CREATE SCHEMA "+db.Schema)
	require.NoError(t, err)

	// Up to 00011, as a deployment before this change.
	_, err = gooseFor(t, db).UpTo(ctx, 11)
	require.NoError(t, err)

	event := uuid.New()
	oldID := uuid.NewSHA1(uuid.MustParse("6d1f3c8e-2a47-5b0e-9c3d-0f8a1b2c3d4e"), []byte(event.String()+":email.receipt"))
	s := db.Schema
	_, err = db.Pool.Exec(ctx, `INSERT INTO `+s+`.outbox_events (id, event_type, payload) VALUES ($1, 'order.paid', '{}')`, event)
	require.NoError(t, err)
	var storedKey string
	require.NoError(t, db.Pool.QueryRow(ctx, `INSERT INTO `+s+`.side_effects (id, source_id, kind, provider, payload)
		VALUES ($1, $2, 'email.receipt', 'sendgrid', '{}') RETURNING idempotency_key`, oldID, event).Scan(&storedKey))
	require.Equal(t, store.Key(event, "email.receipt"), storedKey)

	_, err = migrations.Up(ctx, db.Pool, db.Schema)
	require.NoError(t, err)
	var column int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM information_schema.columns
		WHERE table_schema = $1 AND table_name = 'side_effects' AND column_name = 'idempotency_key'`, s).Scan(&column))
	require.Zero(t, column, "the key is no longer stored")

	e, err := store.NewStore(s).GetByKey(ctx, db.Pool, storedKey)
	require.NoError(t, err)
	require.Equal(t, oldID, e.ID)
	require.Equal(t, storedKey, e.IdempotencyKey)
	require.NotEqual(t, store.EffectID(event, "email.receipt"), oldID)

	// (source_id, kind) is still unique across old and new ids.
	_, err = db.Pool.Exec(ctx, `INSERT INTO `+s+`.side_effects (id, source_id, kind, provider, payload)
		VALUES (`+s+`.outboxd_effect_id($1, 'email.receipt'), $1, 'email.receipt', 'sendgrid', '{}')`, event)
	require.ErrorContains(t, err, "side_effects_source_id_kind_key")
}
