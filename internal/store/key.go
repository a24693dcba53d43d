package store

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/google/uuid"
)

// Key returns the idempotency key of the effect of the given kind caused by
// event eventID: lowercase hex(SHA-256(event_id + ":" + kind)), where
// event_id is the canonical lowercase UUID text. It is 64 characters long and
// equal to the SQL function outboxd_idempotency_key(event_id, kind).
func Key(eventID uuid.UUID, kind string) string {
	sum := sha256.Sum256([]byte(eventID.String() + ":" + kind))
	return hex.EncodeToString(sum[:])
}

// EffectID returns the side_effects row id of the effect of the given kind
// caused by event eventID: the first 16 bytes of its idempotency key as a
// version 8 UUID (RFC 9562), equal to the SQL function
// outboxd_effect_id(event_id, kind). Deterministic, so a replayed enqueue
// names the same row, and an effect is found by its key through its id.
func EffectID(eventID uuid.UUID, kind string) uuid.UUID {
	sum := sha256.Sum256([]byte(eventID.String() + ":" + kind))
	return idOf(sum[:16])
}

// EffectIDAndKey returns EffectID and Key from one hash.
func EffectIDAndKey(eventID uuid.UUID, kind string) (uuid.UUID, string) {
	sum := sha256.Sum256([]byte(eventID.String() + ":" + kind))
	return idOf(sum[:16]), hex.EncodeToString(sum[:])
}

// KeyEffectID returns the id of the effect whose idempotency key is key, or
// false when key is not a key (64 lowercase hex digits). Effects written
// before ids were derived from keys, or by hand with another id, have other
// ids; GetByKey finds those too.
func KeyEffectID(key string) (uuid.UUID, bool) {
	if len(key) != 64 || strings.ToLower(key) != key {
		return uuid.Nil, false
	}
	b, err := hex.DecodeString(key[:32])
	if err != nil {
		return uuid.Nil, false
	}
	if _, err := hex.DecodeString(key[32:]); err != nil {
		return uuid.Nil, false
	}
	return idOf(b), true
}

func idOf(b []byte) uuid.UUID {
	var id uuid.UUID
	copy(id[:], b)
	id[6] = id[6]&0x0f | 0x80 // version 8
	id[8] = id[8]&0x3f | 0x80 // RFC 9562 variant
	return id
}
