package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/engine"
	"github.com/outboxd/outboxd/internal/fakes"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/sendgrid"
	"github.com/outboxd/outboxd/providers/webhook"
	"github.com/outboxd/outboxd/sideeffects"
	"github.com/outboxd/outboxd/sideeffects/dispatchmetrics"
)

func (b *workerBundle) operator(t *testing.T) *sideeffects.Operator {
	t.Helper()
	op, err := sideeffects.NewOperator(b.db.Pool, sideeffects.OperatorConfig{Schema: b.db.Schema, Guarantees: map[string]providers.Guarantees{
		webhook.Name: webhook.Config{}.Guarantees(), sendgrid.Name: sendgrid.Guarantees,
	}})
	require.NoError(t, err)
	return op
}

const (
	testWait  = 30 * time.Second
	pollEvery = 20 * time.Millisecond
)

func (b *workerBundle) effect(t *testing.T, id uuid.UUID) *outboxtype.Effect {
	t.Helper()
	e, err := b.store.Get(context.Background(), b.db.Pool, id)
	require.NoError(t, err)
	return e
}

func (b *workerBundle) audit(t *testing.T, id uuid.UUID) []outboxtype.AuditEntry {
	t.Helper()
	entries, err := b.store.Audit(context.Background(), b.db.Pool, id)
	require.NoError(t, err)
	return entries
}

// inFlight starts a dispatcher whose worker, once SendGrid has accepted an
// effect's mail, waits before confirming until the returned func is called;
// it returns after the acknowledgement arrived.
func (b *workerBundle) inFlight(t *testing.T, reg prometheus.Registerer) (*fakes.FakeSendGrid, outbox.EffectResult, func()) {
	t.Helper()
	f := b.useFakeSendGrid(t)
	var err error
	b.cfg.Metrics, err = dispatchmetrics.New(reg)
	require.NoError(t, err)
	d := b.start(t)
	acked, release := make(chan struct{}), make(chan struct{})
	engine.SetBeforeConfirm(d, func(ctx context.Context) error {
		close(acked)
		<-release
		return nil
	})
	e := b.enqueueEffect(t, emailEffect("email.receipt"))
	<-acked
	return f, e, func() { close(release) }
}

func TestAcknowledgementAfterOperatorActionIsNeverLost(t *testing.T) {
	t.Parallel()
	opts := outboxtype.ActionOpts{Actor: "oncall", Reason: "test"}

	t.Run("retry --force is refused while the call is in flight", func(t *testing.T) {
		t.Parallel()
		b := setupWorker(t, workerOpts{})
		reg := prometheus.NewRegistry()
		f, e, release := b.inFlight(t, reg)
		op := b.operator(t)
		force := opts
		force.Force = true
		chs, err := op.Retry(context.Background(), []uuid.UUID{e.ID}, force)
		require.NoError(t, err)
		require.False(t, chs[0].Applied)
		require.Contains(t, chs[0].Skipped, "is running for it")
		release()
		got := b.waitFor(t, e.ID, outboxtype.StateConfirmed)
		require.Equal(t, "msg_1", deref(got.ProviderRef))
		require.Len(t, f.Requests(), 1)
	})

	t.Run("cancel while in flight: the acknowledgement is recorded, not dropped", func(t *testing.T) {
		t.Parallel()
		b := setupWorker(t, workerOpts{})
		reg := prometheus.NewRegistry()
		f, e, release := b.inFlight(t, reg)
		chs, err := b.operator(t).Cancel(context.Background(), []uuid.UUID{e.ID}, opts)
		require.NoError(t, err)
		require.True(t, chs[0].Applied)
		release()
		var late outboxtype.AuditEntry
		require.Eventually(t, func() bool {
			for _, a := range b.audit(t, e.ID) {
				if a.Action == outboxtype.ActionLateAck {
					late = a
					return true
				}
			}
			return false
		}, testWait, pollEvery)
		require.Equal(t, "outboxd", late.Actor)
		require.Equal(t, "cancelled", late.FromState)
		require.Equal(t, "cancelled", late.ToState, "the operator's decision stands")
		var d map[string]any
		require.NoError(t, json.Unmarshal(late.Details, &d))
		require.Equal(t, "msg_1", d["provider_ref"])
		got := b.effect(t, e.ID)
		require.Equal(t, outboxtype.StateCancelled, got.State)
		require.Equal(t, "msg_1", deref(got.ProviderRef), "the ref is kept on the effect")
		require.Len(t, f.Requests(), 1)
		b.waitForJob(t, e.ID, "completed")
		require.Zero(t, testutil.ToFloat64(transitionsTo(t, reg, "confirmed")), "no transition to confirmed happened")
	})

	t.Run("moved to pending while in flight: confirmed all the same, audited", func(t *testing.T) {
		t.Parallel()
		b := setupWorker(t, workerOpts{})
		reg := prometheus.NewRegistry()
		f, e, release := b.inFlight(t, reg)
		// What an operator's redrive racing the call does to the row.
		_, err := b.db.Pool.Exec(context.Background(), `UPDATE `+b.db.Schema+`.side_effects SET state = 'pending', attempts = 0 WHERE id = $1`, e.ID)
		require.NoError(t, err)
		release()
		got := b.waitFor(t, e.ID, outboxtype.StateConfirmed)
		require.Equal(t, "msg_1", deref(got.ProviderRef))
		entries := b.audit(t, e.ID)
		require.Len(t, entries, 1)
		require.Equal(t, outboxtype.ActionLateAck, entries[0].Action)
		require.Equal(t, "pending", entries[0].FromState)
		require.Equal(t, "confirmed", entries[0].ToState)
		b.waitForJob(t, e.ID, "completed")
		require.Len(t, f.Requests(), 1, "never fired a second time")
		require.Equal(t, 1.0, testutil.ToFloat64(transitionsTo(t, reg, "confirmed")))
	})
}

// An effect whose earlier request is in doubt, moved back to pending by any
// path (here plain SQL as an old redrive did it, with first_fired_at
// cleared), is parked again under at_most_once, not re-sent.
func TestEveryRefireOfAnEffectInDoubtAppliesThePolicy(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	f := b.useFakeSendGrid(t, fakes.Status(500))
	b.start(t)
	e := b.enqueueEffect(t, emailEffect("email.receipt"))
	b.waitFor(t, e.ID, outboxtype.StateFailed)
	b.waitForJob(t, e.ID, "cancelled")
	_, err := b.db.Pool.Exec(context.Background(), `UPDATE `+b.db.Schema+`.side_effects
		SET state = 'pending', attempts = 0, first_fired_at = NULL, updated_at = now() - interval '1 hour' WHERE id = $1`, e.ID)
	require.NoError(t, err)
	n, err := engine.Sweep(context.Background(), b.store, b.db.Pool, insertClient(t, b.db.Pool, b.db.Schema), time.Now())
	require.NoError(t, err)
	require.Equal(t, 1, n)
	b.waitForJob(t, e.ID, "cancelled")
	got := b.waitFor(t, e.ID, outboxtype.StateFailed)
	require.True(t, strings.HasPrefix(deref(got.LastError), outboxtype.ReasonInDoubt), deref(got.LastError))
	require.Len(t, f.Requests(), 1, "not sent a second time")
}

func transitionsTo(t *testing.T, reg *prometheus.Registry, to string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "sum"})
	for _, mf := range mfs {
		if mf.GetName() != "outboxd_transitions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "to" && l.GetValue() == to {
					g.Add(m.GetCounter().GetValue())
				}
			}
		}
	}
	return g
}

// An acknowledged failed effect leaves the failed gauge the alert reads.
func TestAcknowledgedFailuresLeaveTheFailedGauge(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	ctx := context.Background()
	e := b.enqueue(t, "/orders")
	_, err := b.db.Pool.Exec(ctx, `UPDATE `+b.db.Schema+`.side_effects SET state = 'failed', last_error = 'HTTP 410 (endpoint gone)' WHERE id = $1`, e.ID)
	require.NoError(t, err)
	failed := func() int64 {
		gauges, err := b.store.StateGauges(ctx, b.db.Pool)
		require.NoError(t, err)
		for _, g := range gauges {
			if g.State == outboxtype.StateFailed {
				return g.Count
			}
		}
		return 0
	}
	require.Equal(t, int64(1), failed())
	chs, err := b.operator(t).Acknowledge(ctx, []uuid.UUID{e.ID}, outboxtype.ActionOpts{Actor: "oncall", Reason: "endpoint retired"})
	require.NoError(t, err)
	require.True(t, chs[0].Applied)
	require.Zero(t, failed())
}

// Confirm without a reference: a webhook is recorded with the webhook-id
// its receiver logged; any other effect is skipped, unchanged, saying why.
func TestConfirmWithoutAReference(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	ctx := context.Background()
	hook, mail := b.enqueue(t, "/orders"), b.enqueue(t, "/receipts")
	_, err := b.db.Pool.Exec(ctx, `UPDATE `+b.db.Schema+`.side_effects SET state = 'failed', last_error = 'no response',
		provider = CASE WHEN id = $2 THEN 'sendgrid' ELSE provider END WHERE id IN ($1, $2)`, hook.ID, mail.ID)
	require.NoError(t, err)
	op := b.operator(t)
	opts := outboxtype.ActionOpts{Actor: "oncall", Reason: "in the receiver's log"}
	ch, err := op.Confirm(ctx, hook.ID, opts)
	require.NoError(t, err)
	require.True(t, ch.Applied)
	got, err := b.store.Get(ctx, b.db.Pool, hook.ID)
	require.NoError(t, err)
	require.Equal(t, outboxtype.StateConfirmed, got.State)
	require.Equal(t, "webhook-id "+got.IdempotencyKey, *got.ProviderRef)

	ch, err = op.Confirm(ctx, mail.ID, opts)
	require.NoError(t, err)
	require.False(t, ch.Applied)
	require.Contains(t, ch.Skipped, "a sendgrid effect is confirmed with its provider's reference")
	got, err = b.store.Get(ctx, b.db.Pool, mail.ID)
	require.NoError(t, err)
	require.Equal(t, outboxtype.StateFailed, got.State)
}

// smsProvider is a provider an application builds into its own dispatcher:
// outboxctl's and the web view's settings do not name it.
type smsProvider struct{}

func (smsProvider) Name() string                                  { return "sms" }
func (smsProvider) ValidatePayload(string, json.RawMessage) error { return nil }
func (smsProvider) Guarantees() providers.Guarantees {
	return providers.Guarantees{KeyWindow: time.Hour, KeyWindowMargin: 5 * time.Minute, InDoubt: providers.AtLeastOnce}
}
func (smsProvider) Send(context.Context, providers.Request) (providers.Result, error) {
	return providers.Result{}, providers.Permanent(errors.New("HTTP 400"))
}

// TestARetryOfAProviderTheOperatorDoesNotKnow: an operator whose settings
// do not name an effect's provider applies the key window a dispatcher
// running the provider reported; with no report it refuses a retry unless
// forced, instead of retrying as if the provider had no key window.
func TestARetryOfAProviderTheOperatorDoesNotKnow(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	ctx := context.Background()
	op := b.operator(t) // webhook and SendGrid only
	opts := outboxtype.ActionOpts{Actor: "oncall", Reason: "receiver fixed"}
	failedSMS := func(firstFired time.Duration) uuid.UUID {
		e := b.enqueue(t, "/sms")
		_, err := b.db.Pool.Exec(ctx, `UPDATE `+b.db.Schema+`.side_effects SET provider = 'sms', state = 'failed',
			last_error = 'permanent: HTTP 400', attempts = 1, total_attempts = 1, first_fired_at = now() - $2::interval,
			key_window_from = now() - $2::interval WHERE id = $1`, e.ID, firstFired.String())
		require.NoError(t, err)
		// Its webhook job is gone, as a failed effect's is.
		_, err = b.db.Pool.Exec(ctx, `DELETE FROM `+b.db.Schema+`.river_job WHERE args @> $1`, fmt.Sprintf(`{"effect_id": %q}`, e.ID))
		require.NoError(t, err)
		return e.ID
	}

	unknown := failedSMS(10 * time.Minute)
	chs, err := op.Retry(ctx, []uuid.UUID{unknown}, opts)
	require.NoError(t, err)
	require.False(t, chs[0].Applied)
	require.Contains(t, chs[0].Skipped, "outboxd does not know how long sms remembers an idempotency key")
	require.Equal(t, outboxtype.StateFailed, b.effect(t, unknown).State)

	// Made before any dispatcher runs: one running could fire it between
	// its enqueue and the update that fails it.
	late := failedSMS(58 * time.Minute)

	// A dispatcher running the provider reports its guarantees at start.
	b.cfg.Providers = append(b.cfg.Providers, smsProvider{})
	b.start(t)
	chs, err = op.Retry(ctx, []uuid.UUID{unknown}, opts)
	require.NoError(t, err)
	require.True(t, chs[0].Applied, chs[0].Skipped)

	// Its window applies: 1h minus 5m, the first request 58 minutes ago.
	chs, err = op.Retry(ctx, []uuid.UUID{late}, opts)
	require.NoError(t, err)
	require.False(t, chs[0].Applied)
	require.Contains(t, chs[0].Skipped, "key window closed")
	forced := opts
	forced.Force = true
	chs, err = op.Retry(ctx, []uuid.UUID{late}, forced)
	require.NoError(t, err)
	require.True(t, chs[0].Applied, chs[0].Skipped)
	require.Contains(t, chs[0].Warning, "forced, the next request starts a new key window")
}
