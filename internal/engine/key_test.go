package engine_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/engine"
	"github.com/outboxd/outboxd/internal/testdb"
)

// The test vectors of the design contract.
var keyVectors = []struct {
	eventID, kind, key string
}{
	{"0190c3a0-7b1e-7c3d-9f00-000000000001", "email.welcome", "886d1f49b1d24c00276ec4dc924a142b00dba0ea69f7e845a30711e9714929fb"},
	{"0190c3a0-7b1e-7c3d-9f00-000000000001", "stripe.refund", "902594f92ce5e6b4941d38d60c0700a2a33fef1d96936490e6dd135dd01497d8"},
	{"3f2c1e9a-55b4-4b8e-9a51-0c7d2e1f4a10", "webhook.payment_captured", "5c96150ae10100a82a508e4697e4efc7b3bbe1afbb9a526cf0b924bd0c44657e"},
}

func TestKey(t *testing.T) {
	t.Parallel()
	for _, v := range keyVectors {
		got := engine.Key(uuid.MustParse(v.eventID), v.kind)
		require.Equal(t, v.key, got, "Key(%s, %s)", v.eventID, v.kind)
		require.Len(t, got, 64)
	}
	// Upper-case input parses to the same UUID, so the key is canonical.
	require.Equal(t, keyVectors[0].key, engine.Key(uuid.MustParse("0190C3A0-7B1E-7C3D-9F00-000000000001"), "email.welcome"))
}

func TestKeyInSQL(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	for _, v := range keyVectors {
		var got string
		err := db.Pool.QueryRow(ctx, "SELECT "+db.Schema+".outboxd_idempotency_key($1::uuid, $2)", v.eventID, v.kind).Scan(&got)
		require.NoError(t, err)
		require.Equal(t, v.key, got)
	}
	// The generated column agrees with Key for rows written by plain SQL.
	_, err := db.Pool.Exec(ctx, `INSERT INTO `+db.Schema+`.outbox_events (id, event_type, payload) VALUES ($1, 't', '{}')`, keyVectors[2].eventID)
	require.NoError(t, err)
	var got string
	err = db.Pool.QueryRow(ctx, `INSERT INTO `+db.Schema+`.side_effects (id, source_id, kind, provider, payload)
		VALUES (gen_random_uuid(), $1, $2, 'webhook', '{}') RETURNING idempotency_key`, keyVectors[2].eventID, keyVectors[2].kind).Scan(&got)
	require.NoError(t, err)
	require.Equal(t, keyVectors[2].key, got)
}

func TestEffectIDDeterministic(t *testing.T) {
	t.Parallel()
	ev := uuid.MustParse(keyVectors[0].eventID)
	require.Equal(t, engine.EffectID(ev, "a"), engine.EffectID(ev, "a"))
	require.NotEqual(t, engine.EffectID(ev, "a"), engine.EffectID(ev, "b"))
}
