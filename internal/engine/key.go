package engine

import (
	"crypto/sha256"
	"encoding/hex"

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

// effectNamespace roots the deterministic effect ids.
var effectNamespace = uuid.MustParse("6d1f3c8e-2a47-5b0e-9c3d-0f8a1b2c3d4e")

// EffectID returns the side_effects row id of the effect of the given kind
// caused by event eventID. Deterministic, so a replayed enqueue names the
// same row.
func EffectID(eventID uuid.UUID, kind string) uuid.UUID {
	return uuid.NewSHA1(effectNamespace, []byte(eventID.String()+":"+kind))
}
