package oncall_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/sideeffects/oncall"
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
	sit := oncall.Situation{Now: now, Dispatchers: 1, Destinations: map[string]string{"hooks.partner.example": "not answering (breaker open)"}}
	got := oncall.Explain(s, sit)
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
	limitedInDoubt := effect("webhook", outboxtype.StateFired, "in_doubt: HTTP 500")
	limitedInDoubt.WaitingFor, limitedInDoubt.InDoubt, limitedInDoubt.Attempts = ptr("replay:3"), true, 1
	tenant := effect("webhook", outboxtype.StatePending, "")
	tenant.WaitingFor = ptr("turn:acme")
	blocked := effect("webhook", outboxtype.StatePending, "")
	blocked.OrderingKey = ptr("order:1")
	cases := map[string]struct {
		s   outboxtype.StuckEffect
		sit oncall.Situation
	}{
		"unqueueable":     {s: outboxtype.StuckEffect{Effect: effect("twilio", outboxtype.StateFailed, outboxtype.ReasonUnqueueable+": no provider")}},
		"in doubt":        {s: outboxtype.StuckEffect{Effect: inDoubt}},
		"key window":      {s: outboxtype.StuckEffect{Effect: effect("stripe", outboxtype.StateFailed, outboxtype.ReasonKeyWindow)}},
		"exhausted":       {s: outboxtype.StuckEffect{Effect: effect("webhook", outboxtype.StateFailed, "retries exhausted after 2 attempts")}},
		"permanent":       {s: outboxtype.StuckEffect{Effect: effect("webhook", outboxtype.StateFailed, "permanent: HTTP 410")}},
		"no job":          {s: outboxtype.StuckEffect{Effect: effect("webhook", outboxtype.StatePending, "")}},
		"limit":           {s: outboxtype.StuckEffect{Effect: limited, JobID: &job, JobState: &available}},
		"limit, in doubt": {s: outboxtype.StuckEffect{Effect: limitedInDoubt, JobID: &job, JobState: &available}},
		"tenant":          {s: outboxtype.StuckEffect{Effect: tenant}},
		"blocked":         {s: outboxtype.StuckEffect{Effect: blocked, BlockedBehind: &head, JobID: &job, JobState: &available}},
		"held back": {s: outboxtype.StuckEffect{Effect: effect("webhook", outboxtype.StatePending, ""), JobID: &job, JobState: &available},
			sit: oncall.Situation{Destinations: map[string]string{"hooks.partner.example": "breaker open"}}},
		"dead worker, no outboxd": {s: outboxtype.StuckEffect{Effect: fired, JobID: &job, JobState: &running}, sit: oncall.Situation{Dispatchers: 0}},
		"dead worker, unknown":    {s: outboxtype.StuckEffect{Effect: fired, JobID: &job, JobState: &running}, sit: oncall.Situation{Dispatchers: -1}},
	}
	for name, c := range cases {
		c.sit.Now, c.sit.FiredBound = now, 10*time.Minute
		cli := oncall.Explain(c.s, c.sit)
		require.Contains(t, cli, "`outboxctl ", name)
		c.sit.Say = oncall.Web
		web := oncall.Explain(c.s, c.sit)
		require.NotContains(t, web, "outboxctl", name)
		require.NotContains(t, web, "`", name)
		require.NotEqual(t, cli, web, name)
	}
}

// TestStatesSayWhatIsTrue: a fired effect whose process is gone, or fired
// longer ago than any call of its provider lasts, is not "in flight"; a
// --rescue-after far above its default is flagged; an operator's
// confirmation is not the provider's answer; a refusal by outboxd's own
// checks is not a provider's; an acknowledged failure needs nothing.
func TestStatesSayWhatIsTrue(t *testing.T) {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { t := now.Add(d); return &t }
	ptr := func(s string) *string { return &s }
	job, running, holder := int64(7), "running", "outboxd-a"
	fired := &outboxtype.Effect{ID: uuid.New(), Kind: "stripe.capture", Provider: "stripe", State: outboxtype.StateFired,
		Attempts: 1, FiredAt: at(-30 * time.Minute), IdempotencyKey: "4bccfbccfcac8e1f", CreatedAt: now.Add(-time.Hour), UpdatedAt: now.Add(-30 * time.Minute)}
	s := outboxtype.StuckEffect{Effect: fired, JobID: &job, JobState: &running, JobHeldBy: &holder}
	settings := json.RawMessage(`{"rescue_after": "6h0m0s", "retry_base_delay": "1s", "stripe": {"timeout": "10s"}}`)
	alive := outboxtype.DispatcherRecord{ID: holder, StartedAt: now.Add(-2 * time.Hour), SeenAt: now.Add(-10 * time.Second), Settings: settings}

	sit := oncall.SituationOf(now, 3*time.Minute, []outboxtype.DispatcherRecord{alive})
	require.Equal(t, 10*time.Second, sit.CallTimeouts["stripe"])
	got := oncall.Explain(s, sit)
	require.Contains(t, got, "not in flight: attempt 1 fired 30m0s ago under job 7, but stripe calls time out after 10s, so no call lasts this long")
	require.Contains(t, got, "WARNING: --rescue-after 6h0m0s is far above its default 2m")

	dead, other := alive, alive
	dead.SeenAt, other.ID = now.Add(-25*time.Minute), "outboxd-b"
	got = oncall.Explain(s, oncall.SituationOf(now, 3*time.Minute, []outboxtype.DispatcherRecord{dead, other}))
	require.Contains(t, got, "not in flight: attempt 1 fired 30m0s ago under job 7 by outboxd-a, which is silent since 25m0s ago: killed?: the call ended with its process")
	require.False(t, strings.HasPrefix(got, "in flight"))

	fresh := *fired
	fresh.FiredAt = at(-2 * time.Second)
	got = oncall.Explain(outboxtype.StuckEffect{Effect: &fresh, JobID: &job, JobState: &running, JobHeldBy: &holder}, sit)
	require.Contains(t, got, "in flight: attempt 1 fired 2s ago")

	confirmed := *fired
	confirmed.State, confirmed.ConfirmedAt, confirmed.ProviderRef = outboxtype.StateConfirmed, at(-time.Minute), ptr("pi_1")
	byOperator := []outboxtype.AuditEntry{{Action: outboxtype.ActionConfirm, Actor: "web:ada", Reason: "seen in the dashboard",
		FromState: "fired", ToState: "confirmed", CreatedAt: now.Add(-time.Minute)}}
	got = oncall.WhatNow(&confirmed, nil, byOperator, nil, sit)
	require.Contains(t, got, "Confirmed by web:ada 1m0s ago, not by the provider's answer")
	require.NotContains(t, got, "the provider acknowledged it")
	tl := oncall.Timeline(&confirmed, nil, byOperator, nil, nil)
	require.NotContains(t, tl[1].Detail, "the provider acknowledged it")
	require.Contains(t, oncall.WhatNow(&confirmed, nil, nil, nil, sit), "the provider acknowledged it")

	refused := &outboxtype.Effect{ID: uuid.New(), Kind: "stripe.refund", Provider: "stripe", State: outboxtype.StateFailed, Attempts: 1,
		LastError: ptr("refused before sending (no request made): params.reason: \"oops\" is not one of duplicate, fraudulent, requested_by_customer"),
		CreatedAt: now.Add(-time.Hour), UpdatedAt: now.Add(-time.Hour)}
	got = oncall.Explain(outboxtype.StuckEffect{Effect: refused}, sit)
	require.Contains(t, got, "outboxd refused it before making any request: no provider saw it")
	require.NotContains(t, got, "The provider refused it")

	acked := *refused
	acked.AcknowledgedAt = at(-time.Minute)
	require.Contains(t, oncall.Explain(outboxtype.StuckEffect{Effect: &acked}, sit), "Acknowledged 1m0s ago: an operator reviewed it and keeps it failed; nothing to do")
}

func TestPayloadDiffNamesEachChangedField(t *testing.T) {
	got := oncall.PayloadDiff(json.RawMessage(`{"operation": "refund.create", "params": {"reason": "oops", "amount": 100, "metadata": {"a": "1"}}}`),
		json.RawMessage(`{"operation": "refund.create", "params": {"reason": "requested_by_customer", "amount": 100, "items": [1]}}`))
	require.Equal(t, []string{`params.items[0]: (added) 1`, `params.metadata.a: "1" -> (removed)`, `params.reason: "oops" -> "requested_by_customer"`}, got)
}

// TestAHeldEffectInDoubtSaysWhatItWaitsFor: an effect turned away by a
// limit key after a request that ended in doubt waits in fired; it is
// explained as waiting for its key, with nothing in flight, not as a
// retry or a call under way.
func TestAHeldEffectInDoubtSaysWhatItWaitsFor(t *testing.T) {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	key, errText, job, state := "replay:3", "in_doubt: HTTP 500", int64(7), "scheduled"
	since, next := now.Add(-time.Minute), now.Add(20*time.Minute)
	e := &outboxtype.Effect{ID: uuid.New(), Kind: "webhook.order_paid", Provider: "webhook", State: outboxtype.StateFired,
		Attempts: 1, InDoubt: true, LastError: &errText, WaitingFor: &key, WaitingSince: &since, FiredAt: &since}
	why := oncall.Explain(outboxtype.StuckEffect{Effect: e, JobID: &job, JobState: &state, JobScheduledAt: &next},
		oncall.Situation{Now: now, FiredBound: 10 * time.Minute, Dispatchers: 1})
	require.Contains(t, why, "waiting for limit replay:3 since 1m0s ago")
	require.Contains(t, why, "nothing is in flight")
	require.Contains(t, why, "it asks again in 20m0s")
	require.NotContains(t, why, "retrying:")
}
