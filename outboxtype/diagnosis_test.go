package outboxtype_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/outboxtype"
)

// TestAdviceForAHangingPartnerCannotOverConfirm: a webhook waiting behind
// a destination that stopped answering is advised to confirm only what the
// receiver's log shows, by the webhook-id it logged (its key), never every
// effect of its kind: a partner that processed 6 of 20 and then hung
// would have the other 14 confirmed unsent.
func TestAdviceForAHangingPartnerCannotOverConfirm(t *testing.T) {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	e := &outboxtype.Effect{
		ID: uuid.New(), Kind: "webhook.order_paid", Provider: "webhook", State: outboxtype.StatePending,
		Payload:        json.RawMessage(`{"url": "https://hooks.partner.example/in", "body": {}}`),
		IdempotencyKey: "0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e", CreatedAt: now.Add(-time.Hour), UpdatedAt: now.Add(-time.Hour),
	}
	jobID, state := int64(7), "available"
	s := outboxtype.StuckEffect{Effect: e, JobID: &jobID, JobState: &state}
	sit := outboxtype.Situation{Now: now, Dispatchers: 1, Destinations: map[string]string{"hooks.partner.example": "not answering (breaker open)"}}
	got := s.Explain(sit)
	require.Contains(t, got, "hooks.partner.example: not answering")
	require.Contains(t, got, "only those the receiver's own log shows processed")
	require.Contains(t, got, "outboxctl confirm <webhook-id>")
	require.Contains(t, got, e.IdempotencyKey, "names this effect's webhook-id")
	require.NotContains(t, got, "--kind", "never every effect of the kind")
}
