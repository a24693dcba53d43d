package store_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/store"
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
		got := store.Key(uuid.MustParse(v.eventID), v.kind)
		require.Equal(t, v.key, got, "Key(%s, %s)", v.eventID, v.kind)
		require.Len(t, got, 64)
	}
	// Upper-case input parses to the same UUID, so the key is canonical.
	require.Equal(t, keyVectors[0].key, store.Key(uuid.MustParse("0190C3A0-7B1E-7C3D-9F00-000000000001"), "email.welcome"))
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
	// A row written by plain SQL, with an id of its own choosing, is found
	// by its key (through side_effects_other_id_key_idx); so is one with the
	// derived id (through its primary key).
	st := store.NewStore(db.Schema)
	_, err := db.Pool.Exec(ctx, `INSERT INTO `+db.Schema+`.outbox_events (id, event_type, payload) VALUES ($1, 't', '{}')`, keyVectors[2].eventID)
	require.NoError(t, err)
	var handID uuid.UUID
	err = db.Pool.QueryRow(ctx, `INSERT INTO `+db.Schema+`.side_effects (id, source_id, kind, provider, payload)
		VALUES (gen_random_uuid(), $1, $2, 'webhook', '{}') RETURNING id`, keyVectors[2].eventID, keyVectors[2].kind).Scan(&handID)
	require.NoError(t, err)
	e, err := st.GetByKey(ctx, db.Pool, keyVectors[2].key)
	require.NoError(t, err)
	require.Equal(t, handID, e.ID)
	require.Equal(t, keyVectors[2].key, e.IdempotencyKey)

	derived := store.EffectID(uuid.MustParse(keyVectors[2].eventID), "other.kind")
	_, err = db.Pool.Exec(ctx, `INSERT INTO `+db.Schema+`.side_effects (id, source_id, kind, provider, payload)
		VALUES (`+db.Schema+`.outboxd_effect_id($1, 'other.kind'), $1, 'other.kind', 'webhook', '{}')`, keyVectors[2].eventID)
	require.NoError(t, err)
	e, err = st.GetByKey(ctx, db.Pool, store.Key(uuid.MustParse(keyVectors[2].eventID), "other.kind"))
	require.NoError(t, err)
	require.Equal(t, derived, e.ID)

	// Not a key, or no such effect: not found, never an error from SQL.
	for _, bad := range []string{"", "abc", strings.ToUpper(keyVectors[2].key), strings.Repeat("g", 64), store.Key(uuid.New(), "x")} {
		_, err := st.GetByKey(ctx, db.Pool, bad)
		require.ErrorIs(t, err, store.ErrNotFound, "%q", bad)
	}
	// Only the hand-written row is in the index of other ids.
	var others int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM `+db.Schema+`.side_effects
		WHERE substr(id::text, 15, 1) <> '8'`).Scan(&others))
	require.Equal(t, 1, others)
}

// TestEffectIDFromKey: an effect's id is the first 16 bytes of its key as a
// version 8 UUID, the same in Go and in SQL, so an effect is found by key
// through its primary key.
func TestEffectIDFromKey(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	kinds := []string{"email.welcome", "stripe.refund", "ünïcode.kind", "a"}
	for _, v := range keyVectors {
		for _, kind := range append(kinds, v.kind) {
			ev := uuid.MustParse(v.eventID)
			id := store.EffectID(ev, kind)
			require.Equal(t, uuid.Version(8), id.Version())
			require.Equal(t, uuid.RFC4122, id.Variant())
			key := store.Key(ev, kind)
			require.Equal(t, strings.ReplaceAll(id.String(), "-", "")[:12], key[:12], "the id is the key's first bytes")
			fromKey, ok := store.KeyEffectID(key)
			require.True(t, ok)
			require.Equal(t, id, fromKey)
			var sqlID, sqlFromKey uuid.UUID
			require.NoError(t, db.Pool.QueryRow(ctx, "SELECT "+db.Schema+".outboxd_effect_id($1::uuid, $2), "+db.Schema+".outboxd_key_effect_id($3)",
				v.eventID, kind, key).Scan(&sqlID, &sqlFromKey))
			require.Equal(t, id, sqlID, "outboxd_effect_id(%s, %s)", v.eventID, kind)
			require.Equal(t, id, sqlFromKey)
		}
	}
	for _, bad := range []string{"", "abc", strings.ToUpper(keyVectors[0].key), keyVectors[0].key[:63] + "z", keyVectors[0].key + "0"} {
		_, ok := store.KeyEffectID(bad)
		require.False(t, ok, "%q", bad)
	}
}

func TestEffectIDDeterministic(t *testing.T) {
	t.Parallel()
	ev := uuid.MustParse(keyVectors[0].eventID)
	require.Equal(t, store.EffectID(ev, "a"), store.EffectID(ev, "a"))
	require.NotEqual(t, store.EffectID(ev, "a"), store.EffectID(ev, "b"))
}
