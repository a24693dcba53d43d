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

// TestAdviceSpeaksTheSurfacesLanguage: the same advice names outboxctl's
// commands in the CLI and the web view's buttons and pages in the web
// view, in every situation that names an action.
func TestAdviceSpeaksTheSurfacesLanguage(t *testing.T) {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	ptr := func(s string) *string { return &s }
	at := func(d time.Duration) *time.Time { t := now.Add(d); return &t }
	effect := func(provider string, state outboxtype.State, lastErr string) *outboxtype.Effect {
		e := &outboxtype.Effect{ID: uuid.New(), Kind: provider + ".x", Provider: provider, State: state, IdempotencyKey: "4bccfbccfcac8e1f",
			Payload: json.RawMessage(`{"url": "https://hooks.partner.example/in"}`), CreatedAt: now.Add(-time.Hour), UpdatedAt: now.Add(-time.Hour)}
		if lastErr != "" {
			e.LastError = ptr(lastErr)
		}
		return e
	}
	job, running, available := int64(7), "running", "available"
	head := uuid.New()
	inDoubt := effect("stripe", outboxtype.StateFailed, outboxtype.ReasonInDoubt)
	inDoubt.InDoubt = true
	fired := effect("stripe", outboxtype.StateFired, "")
	fired.FiredAt, fired.Attempts = at(-30*time.Minute), 1
	limited := effect("stripe", outboxtype.StatePending, "")
	limited.WaitingFor = ptr("stripe:live-a1b2")
	tenant := effect("webhook", outboxtype.StatePending, "")
	tenant.WaitingFor = ptr("turn:acme")
	blocked := effect("webhook", outboxtype.StatePending, "")
	blocked.OrderingKey = ptr("order:1")
	cases := map[string]struct {
		s   outboxtype.StuckEffect
		sit outboxtype.Situation
	}{
		"unqueueable": {s: outboxtype.StuckEffect{Effect: effect("twilio", outboxtype.StateFailed, outboxtype.ReasonUnqueueable+": no provider")}},
		"in doubt":    {s: outboxtype.StuckEffect{Effect: inDoubt}},
		"key window":  {s: outboxtype.StuckEffect{Effect: effect("stripe", outboxtype.StateFailed, outboxtype.ReasonKeyWindow)}},
		"exhausted":   {s: outboxtype.StuckEffect{Effect: effect("webhook", outboxtype.StateFailed, "retries exhausted after 2 attempts")}},
		"permanent":   {s: outboxtype.StuckEffect{Effect: effect("webhook", outboxtype.StateFailed, "permanent: HTTP 410")}},
		"no job":      {s: outboxtype.StuckEffect{Effect: effect("webhook", outboxtype.StatePending, "")}},
		"limit":       {s: outboxtype.StuckEffect{Effect: limited, JobID: &job, JobState: &available}},
		"tenant":      {s: outboxtype.StuckEffect{Effect: tenant}},
		"blocked":     {s: outboxtype.StuckEffect{Effect: blocked, BlockedBehind: &head, JobID: &job, JobState: &available}},
		"held back": {s: outboxtype.StuckEffect{Effect: effect("webhook", outboxtype.StatePending, ""), JobID: &job, JobState: &available},
			sit: outboxtype.Situation{Destinations: map[string]string{"hooks.partner.example": "breaker open"}}},
		"dead worker, no outboxd": {s: outboxtype.StuckEffect{Effect: fired, JobID: &job, JobState: &running}, sit: outboxtype.Situation{Dispatchers: 0}},
		"dead worker, unknown":    {s: outboxtype.StuckEffect{Effect: fired, JobID: &job, JobState: &running}, sit: outboxtype.Situation{Dispatchers: -1}},
	}
	for name, c := range cases {
		c.sit.Now, c.sit.FiredBound = now, 10*time.Minute
		cli := c.s.Explain(c.sit)
		require.Contains(t, cli, "`outboxctl ", name)
		c.sit.Say = outboxtype.Web
		web := c.s.Explain(c.sit)
		require.NotContains(t, web, "outboxctl", name)
		require.NotContains(t, web, "`", name)
		require.NotEqual(t, cli, web, name)
	}
}
