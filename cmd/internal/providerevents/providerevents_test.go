package providerevents_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/cmd/internal/providerevents"
	"github.com/outboxd/outboxd/internal/fakes"
	"github.com/outboxd/outboxd/internal/testdb"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/sendgrid"
	"github.com/outboxd/outboxd/providers/stripe/stripeschema"
	"github.com/outboxd/outboxd/sideeffects"
	"github.com/outboxd/outboxd/sideeffects/sideeffectstest"
)

const stripeSecret = "whsec_test_events_secret"

type env struct {
	db  *testdb.DB
	srv *httptest.Server
	op  *sideeffects.Operator
	ob  *outbox.Outbox
	sg  *fakes.SendGridEventSigner
	obs *observer
}

type observer struct{ events []outboxtype.EventResult }

func (o *observer) Observe(x outboxtype.Observation) {
	if ev, ok := x.(outboxtype.ProviderEventApplied); ok {
		o.events = append(o.events, ev.Result)
	}
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{db: testdb.New(t), obs: &observer{}}
	var err error
	e.sg, err = fakes.NewSendGridEventSigner()
	require.NoError(t, err)
	h, err := providerevents.New(e.db.Pool, providerevents.Config{
		Schema: e.db.Schema, StripeSecret: stripeSecret, SendGridPublicKey: e.sg.PublicKey(),
		Observer: e.obs, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	require.NoError(t, err)
	e.srv = httptest.NewServer(h)
	t.Cleanup(e.srv.Close)
	e.op, err = sideeffects.NewOperator(e.db.Pool, sideeffects.OperatorConfig{Schema: e.db.Schema})
	require.NoError(t, err)
	e.ob, err = outbox.New(outbox.Config{Jobs: outbox.JobsInTransaction, Schema: e.db.Schema})
	require.NoError(t, err)
	return e
}

func (e *env) enqueue(t *testing.T, eff outbox.Effect) *outboxtype.Effect {
	t.Helper()
	ctx := context.Background()
	var id uuid.UUID
	require.NoError(t, pgx.BeginFunc(ctx, e.db.Pool, func(tx pgx.Tx) error {
		res, err := e.ob.Enqueue(ctx, tx, outbox.Event{ID: uuid.New(), Type: "order.paid"}, eff)
		if err == nil {
			id = res.Effects[0].ID
		}
		return err
	}))
	return e.get(t, id)
}

func (e *env) get(t *testing.T, id uuid.UUID) *outboxtype.Effect {
	t.Helper()
	got, err := e.op.Get(context.Background(), id)
	require.NoError(t, err)
	return got
}

// set puts an effect in a state as a dispatcher would have left it.
func (e *env) set(t *testing.T, id uuid.UUID, sql string, args ...any) {
	t.Helper()
	_, err := e.db.Pool.Exec(context.Background(), "UPDATE "+e.db.Schema+".side_effects SET "+sql+" WHERE id = $1", append([]any{id}, args...)...)
	require.NoError(t, err)
}

func (e *env) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, e.db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM "+e.db.Schema+"."+sql, args...).Scan(&n))
	return n
}

func (e *env) post(t *testing.T, path string, body []byte, header http.Header) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.srv.URL+path, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header = header
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// stripeEvent sends a Stripe event signed as Stripe signs it.
func (e *env) stripeEvent(t *testing.T, id, typ string, object map[string]any) (int, string) {
	t.Helper()
	body, err := json.Marshal(map[string]any{"id": id, "object": "event", "type": typ, "created": time.Now().Unix(),
		"api_version": "2024-06-20", "data": map[string]any{"object": object}})
	require.NoError(t, err)
	return e.post(t, providerevents.StripePath, body, fakes.StripeSignatureHeaders(stripeSecret, body))
}

// sendgridEvents sends a batch of SendGrid events signed with the test key.
func (e *env) sendgridEvents(t *testing.T, events ...map[string]any) (int, string) {
	t.Helper()
	body, err := json.Marshal(events)
	require.NoError(t, err)
	return e.post(t, providerevents.SendGridPath, body, e.sg.Headers(body))
}

func sgEvent(id, event, key, msgID string, at time.Time) map[string]any {
	return fakes.SendGridEvent(id, event, key, msgID, at)
}

func mail() outbox.Effect {
	return outbox.Effect{Kind: "email.receipt", Provider: "sendgrid", Payload: json.RawMessage(
		`{"from": {"email": "shop@example.com"}, "to": [{"email": "ada@example.com"}], "subject": "Receipt", "text": "Thanks"}`)}
}

func customer() outbox.Effect {
	return outbox.Effect{Kind: "stripe.customer", Provider: "stripe", Payload: json.RawMessage(
		`{"operation": "customer.create", "params": {"email": "ada@example.com"}}`)}
}

// An email parked as "in doubt: not re-sent" by a real dispatcher (SendGrid
// answered 500 after accepting it) resolves itself when SendGrid's
// processed event arrives: confirmed with the message id, audited, and the
// event delivered five times is applied once.
func TestInDoubtEmailIsConfirmedByItsEvent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sg := fakes.NewFakeSendGrid()
	t.Cleanup(sg.Close)
	sg.Respond(fakes.Status(500))
	sgp, err := sendgrid.New(sendgrid.Config{APIKey: "SG.events", APIHost: sg.URL, Timeout: 2 * time.Second})
	require.NoError(t, err)
	sideeffectstest.Start(t, e.db.Pool, sideeffects.Config{Schema: e.db.Schema, Providers: []providers.Provider{sgp}, Retry: outboxtype.RetryPolicy{MaxAttempts: 3}})
	eff := e.enqueue(t, mail())
	require.Eventually(t, func() bool { return e.get(t, eff.ID).State == outboxtype.StateFailed }, 30*time.Second, 10*time.Millisecond)
	require.Contains(t, *e.get(t, eff.ID).LastError, "in doubt: not re-sent")

	processed := sgEvent("sg_evt_processed_1", "processed", eff.IdempotencyKey, "14c5d75ce93", time.Now().Add(-time.Minute))
	for range 5 {
		status, body := e.sendgridEvents(t, processed)
		require.Equal(t, http.StatusOK, status, body)
	}
	got := e.get(t, eff.ID)
	require.Equal(t, outboxtype.StateConfirmed, got.State)
	require.Equal(t, "14c5d75ce93", *got.ProviderRef)
	require.Nil(t, got.LastError)
	require.Equal(t, 1, e.count(t, "side_effect_audit WHERE effect_id = $1 AND action = 'event_confirm'", eff.ID), "five deliveries, applied once")
	audit, err := e.op.Audit(context.Background(), eff.ID)
	require.NoError(t, err)
	require.Equal(t, "provider:sendgrid", audit[len(audit)-1].Actor)
	require.Equal(t, "confirmed by provider event sg_evt_processed_1 (processed)", audit[len(audit)-1].Reason)
	require.Len(t, sg.Requests(), 1, "never re-sent")
	require.Len(t, e.obs.events, 1, "observed once")
}

// Delivered arrives before processed; then the mail bounces. The delivery
// status never goes back to an earlier one, and a confirmed email that
// bounced shows as bounced.
func TestDeliveryStatusHandlesOutOfOrderEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	eff := e.enqueue(t, mail())
	e.set(t, eff.ID, "state = 'fired', in_doubt = true, attempts = 1, fired_at = now()")
	now := time.Now()
	status, body := e.sendgridEvents(t,
		sgEvent("sg_2", "delivered", eff.IdempotencyKey, "m1", now.Add(-time.Minute)),
		sgEvent("sg_1", "processed", eff.IdempotencyKey, "m1", now.Add(-2*time.Minute)))
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, `"processed": 2`)
	require.Equal(t, outboxtype.StateConfirmed, e.get(t, eff.ID).State, "confirmed by the first of them")
	d, err := e.op.Delivery(context.Background(), eff.ID)
	require.NoError(t, err)
	require.Equal(t, "delivered", d.Status, "processed, older, does not overwrite delivered")

	bounce := sgEvent("sg_3", "bounce", eff.IdempotencyKey, "m1", now)
	bounce["reason"] = "550 5.1.1 user unknown"
	status, _ = e.sendgridEvents(t, bounce)
	require.Equal(t, http.StatusOK, status)
	d, err = e.op.Delivery(context.Background(), eff.ID)
	require.NoError(t, err)
	require.Equal(t, "bounce", d.Status)
	require.Equal(t, "550 5.1.1 user unknown", d.Detail)
	require.Equal(t, outboxtype.StateConfirmed, e.get(t, eff.ID).State, "the request was accepted; the mail bounced")
	require.Equal(t, 1, e.count(t, "side_effect_audit WHERE effect_id = $1", eff.ID))
}

// A Stripe call that timed out leaves the effect fired, in doubt; the
// customer.created event carrying its key confirms it with the object id.
func TestStripeEventConfirmsAFiredEffect(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	eff := e.enqueue(t, customer())
	e.set(t, eff.ID, "state = 'fired', in_doubt = true, attempts = 1, fired_at = now(), last_error = 'no response: timeout'")
	status, body := e.stripeEvent(t, "evt_1", "customer.created",
		map[string]any{"id": "cus_123", "object": "customer", "metadata": map[string]any{"outboxd_idempotency_key": eff.IdempotencyKey}})
	require.Equal(t, http.StatusOK, status, body)
	got := e.get(t, eff.ID)
	require.Equal(t, outboxtype.StateConfirmed, got.State)
	require.Equal(t, "cus_123", *got.ProviderRef)
	require.Zero(t, e.count(t, "provider_drift"))

	// An event on an object outboxd did not create changes nothing.
	status, _ = e.stripeEvent(t, "evt_2", "customer.created", map[string]any{"id": "cus_999", "object": "customer", "metadata": map[string]any{}})
	require.Equal(t, http.StatusOK, status)
	require.Zero(t, e.count(t, "provider_drift"))
	require.Equal(t, 2, e.count(t, "inbox_messages"))
}

func TestBadSignaturesAreRefusedAndNothingIsStored(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	eff := e.enqueue(t, mail())
	e.set(t, eff.ID, "state = 'failed', in_doubt = true, attempts = 1, last_error = 'in doubt: not re-sent'")
	body, _ := json.Marshal([]map[string]any{sgEvent("sg_x", "processed", eff.IdempotencyKey, "m1", time.Now())})
	for name, h := range map[string]http.Header{
		"no signature":      {},
		"garbage signature": {"X-Twilio-Email-Event-Webhook-Signature": {"bm9wZQ=="}, "X-Twilio-Email-Event-Webhook-Timestamp": {"1700000000"}},
	} {
		status, _ := e.post(t, providerevents.SendGridPath, body, h)
		require.Equal(t, http.StatusBadRequest, status, name)
	}
	// Signed by another key.
	other, err := fakes.NewSendGridEventSigner()
	require.NoError(t, err)
	e2 := *e
	e2.sg = other
	status, _ := e2.sendgridEvents(t, sgEvent("sg_y", "processed", eff.IdempotencyKey, "m1", time.Now()))
	require.Equal(t, http.StatusBadRequest, status)

	sEvent, _ := json.Marshal(map[string]any{"id": "evt_bad", "type": "customer.created", "data": map[string]any{"object": map[string]any{}}})
	status, _ = e.post(t, providerevents.StripePath, sEvent, http.Header{"Stripe-Signature": {"t=1,v1=00"}})
	require.Equal(t, http.StatusBadRequest, status)

	require.Zero(t, e.count(t, "inbox_messages"))
	require.Equal(t, outboxtype.StateFailed, e.get(t, eff.ID).State)
}

// Each drift class is recorded with the effect, the event and what to check.
func TestDriftIsRecorded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	md := func(key string) map[string]any { return map[string]any{"outboxd_idempotency_key": key} }

	// A key no effect has.
	status, _ := e.stripeEvent(t, "evt_unknown", "customer.created", map[string]any{"id": "cus_1", "object": "customer", "metadata": md("f00d")})
	require.Equal(t, http.StatusOK, status)

	// Acted although failed (not in doubt) and although cancelled.
	failed := e.enqueue(t, customer())
	e.set(t, failed.ID, "state = 'failed', in_doubt = false, last_error = 'retries exhausted after 5 attempts: HTTP 429'")
	e.stripeEvent(t, "evt_failed", "customer.created", map[string]any{"id": "cus_2", "object": "customer", "metadata": md(failed.IdempotencyKey)})
	cancelled := e.enqueue(t, mail())
	e.set(t, cancelled.ID, "state = 'cancelled'")
	e.sendgridEvents(t, sgEvent("sg_c", "delivered", cancelled.IdempotencyKey, "m9", time.Now()))

	// Two objects for one key, and a refund undone after it was confirmed.
	twice := e.enqueue(t, customer())
	e.set(t, twice.ID, "state = 'confirmed', provider_ref = 'cus_A', confirmed_at = now()")
	e.stripeEvent(t, "evt_twice", "customer.created", map[string]any{"id": "cus_B", "object": "customer", "metadata": md(twice.IdempotencyKey)})
	refund := e.enqueue(t, outbox.Effect{Kind: "stripe.refund", Provider: "stripe", Payload: json.RawMessage(
		`{"operation": "refund.create", "params": {"payment_intent": "pi_1"}}`)})
	e.set(t, refund.ID, "state = 'confirmed', provider_ref = 're_1', confirmed_at = now()")
	e.stripeEvent(t, "evt_refund_failed", "refund.failed", map[string]any{"id": "re_1", "object": "refund", "status": "failed",
		"failure_reason": "expired_or_canceled_card", "metadata": md(refund.IdempotencyKey)})

	drift, err := e.op.Drift(context.Background(), outboxtype.DriftFilter{})
	require.NoError(t, err)
	byReason := map[string]outboxtype.DriftRecord{}
	for _, d := range drift {
		byReason[d.Reason] = d
	}
	require.Len(t, byReason, 5, "%+v", drift)
	require.Nil(t, byReason[outboxtype.DriftUnknownKey].EffectID)
	require.Contains(t, byReason[outboxtype.DriftUnknownKey].Check, "no effect has key f00d")
	require.Equal(t, failed.ID, *byReason[outboxtype.DriftActedWhileFailed].EffectID)
	require.Contains(t, byReason[outboxtype.DriftActedWhileFailed].Check, "confirm "+failed.ID.String()+" with reference cus_2")
	require.Equal(t, cancelled.ID, *byReason[outboxtype.DriftActedWhileCancelled].EffectID)
	require.Contains(t, byReason[outboxtype.DriftTwoObjects].Check, "cus_A (confirmed) and cus_B")
	require.Contains(t, byReason[outboxtype.DriftUndone].Check, "refund.failed (failed: expired_or_canceled_card)")
	require.Equal(t, outboxtype.StateFailed, e.get(t, failed.ID).State, "drift changes no state")
	require.Equal(t, outboxtype.StateCancelled, e.get(t, cancelled.ID).State)
	require.Equal(t, "cus_A", *e.get(t, twice.ID).ProviderRef)
}

func TestRetentionMustCoverTheSendersRetryWindow(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	_, err := providerevents.New(db.Pool, providerevents.Config{Schema: db.Schema, StripeSecret: stripeSecret, Retention: 24 * time.Hour})
	require.ErrorContains(t, err, "shorter than the sender's retry window (72h0m0s)")
	_, err = providerevents.New(db.Pool, providerevents.Config{Schema: db.Schema})
	require.ErrorContains(t, err, "configure a Stripe signing secret or a SendGrid verification key")
	_, err = providerevents.New(db.Pool, providerevents.Config{Schema: db.Schema, StripeSecret: "sk_live_oops"})
	require.ErrorContains(t, err, "starts with whsec_")
}

// TestAnEventConfirmsOnlyWhatItCanProve: a validly signed event naming an
// effect's key confirms it only if it comes from the effect's provider and
// is about the kind of object the effect's operation creates; otherwise it
// is drift and the effect is left to fire.
func TestAnEventConfirmsOnlyWhatItCanProve(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	capture := e.enqueue(t, outbox.EffectOf("stripe.capture", stripeschema.PaymentIntentCapture{ID: "pi_123"}))
	e.set(t, capture.ID, "state = 'fired', in_doubt = true, attempts = 1, fired_at = now(), last_error = 'no response: timeout'")
	email := e.enqueue(t, mail())
	e.set(t, email.ID, "state = 'failed', in_doubt = true, attempts = 1, fired_at = now(), last_error = 'in doubt: not re-sent'")

	// SendGrid "delivered" naming the capture's key.
	status, body := e.sendgridEvents(t, sgEvent("sg_x1", "delivered", capture.IdempotencyKey, "msg_1.filter", time.Now()))
	require.Equal(t, http.StatusOK, status, body)
	require.Equal(t, outboxtype.StateFired, e.get(t, capture.ID).State, "a SendGrid event cannot confirm a Stripe capture")
	require.Equal(t, 1, e.count(t, "provider_drift WHERE reason = $1", outboxtype.DriftOtherProvider))
	require.Zero(t, e.count(t, "side_effect_deliveries"), "nor record a delivery for it")

	// Stripe customer.updated naming the email's key.
	status, body = e.stripeEvent(t, "evt_x2", "customer.updated",
		map[string]any{"id": "cus_1", "object": "customer", "metadata": map[string]any{"outboxd_idempotency_key": email.IdempotencyKey}})
	require.Equal(t, http.StatusOK, status, body)
	require.Equal(t, outboxtype.StateFailed, e.get(t, email.ID).State, "a Stripe event cannot confirm an email")
	require.Equal(t, 2, e.count(t, "provider_drift WHERE reason = $1", outboxtype.DriftOtherProvider))

	// Stripe customer.created naming the capture's key: right provider,
	// wrong object.
	status, body = e.stripeEvent(t, "evt_x3", "customer.created",
		map[string]any{"id": "cus_2", "object": "customer", "metadata": map[string]any{"outboxd_idempotency_key": capture.IdempotencyKey}})
	require.Equal(t, http.StatusOK, status, body)
	require.Equal(t, outboxtype.StateFired, e.get(t, capture.ID).State, "a customer event cannot confirm a capture")
	require.Equal(t, 1, e.count(t, "provider_drift WHERE reason = $1", outboxtype.DriftOtherOperation))

	// A payment intent event naming the capture's key, about another
	// payment intent (one a caller created with that metadata): right
	// provider, right kind of object, not the object the capture acts on.
	status, body = e.stripeEvent(t, "evt_x5", "payment_intent.succeeded",
		map[string]any{"id": "pi_attacker_own", "object": "payment_intent", "status": "succeeded", "metadata": map[string]any{"outboxd_idempotency_key": capture.IdempotencyKey}})
	require.Equal(t, http.StatusOK, status, body)
	require.Equal(t, outboxtype.StateFired, e.get(t, capture.ID).State, "an event about another payment intent cannot confirm this one's capture")
	require.Equal(t, 1, e.count(t, "provider_drift WHERE reason = $1", outboxtype.DriftOtherObject))

	// The payment intent's own event does.
	status, body = e.stripeEvent(t, "evt_x4", "payment_intent.succeeded",
		map[string]any{"id": "pi_123", "object": "payment_intent", "status": "succeeded", "metadata": map[string]any{"outboxd_idempotency_key": capture.IdempotencyKey}})
	require.Equal(t, http.StatusOK, status, body)
	require.Equal(t, outboxtype.StateConfirmed, e.get(t, capture.ID).State)
}

// TestOneDeliveryRecordsAndLogsBoundedDrift: one signed SendGrid batch of
// 250 events naming keys no effect has records at most
// MaxDriftPerDelivery drift rows and logs at most MaxDriftLogLines lines
// and one summary; the observer (the metrics) still counts every one.
func TestOneDeliveryRecordsAndLogsBoundedDrift(t *testing.T) {
	t.Parallel()
	e := &env{db: testdb.New(t), obs: &observer{}}
	var err error
	e.sg, err = fakes.NewSendGridEventSigner()
	require.NoError(t, err)
	var logs bytes.Buffer
	var mu sync.Mutex
	h, err := providerevents.New(e.db.Pool, providerevents.Config{
		Schema: e.db.Schema, SendGridPublicKey: e.sg.PublicKey(), Observer: e.obs,
		Logger: slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	require.NoError(t, err)
	e.srv = httptest.NewServer(h)
	t.Cleanup(e.srv.Close)

	var events []map[string]any
	for i := range 250 {
		key := fmt.Sprintf("%064x", i+1)
		events = append(events, sgEvent(fmt.Sprintf("sg_%d", i), "delivered", key, fmt.Sprintf("m%d", i), time.Now()))
	}
	status, _ := e.sendgridEvents(t, events...)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, providerevents.MaxDriftPerDelivery, e.count(t, "provider_drift"))
	drift := 0
	for _, r := range e.obs.events {
		drift += len(r.Drift)
	}
	require.Equal(t, 250, drift, "every finding is still counted")
	mu.Lock()
	lines := strings.Count(logs.String(), "\n")
	text := logs.String()
	mu.Unlock()
	require.Equal(t, providerevents.MaxDriftLogLines+1, lines, "the first lines, then one summary")
	require.Contains(t, text, "not_logged=230")
	require.Contains(t, text, "not_recorded=150")
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestEachEventGoesToTheShardThatHoldsItsKey: one provider account for
// every shard, its events at one address. Each event is applied to, and
// remembered in the inbox of, the shard whose effect carries its key; a
// key no shard holds is drift in the first; a redelivery is a duplicate;
// each shard's observer hears of its own events.
func TestEachEventGoesToTheShardThatHoldsItsKey(t *testing.T) {
	t.Parallel()
	a, b := newEnv(t), newEnv(t)
	h, err := providerevents.NewFleet([]providerevents.Shard{
		{Name: "eu-1", Pool: a.db.Pool, Schema: a.db.Schema, Observer: a.obs},
		{Name: "us-1", Pool: b.db.Pool, Schema: b.db.Schema, Observer: b.obs},
	}, providerevents.Config{StripeSecret: stripeSecret, SendGridPublicKey: a.sg.PublicKey(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	fleet := httptest.NewServer(h)
	t.Cleanup(fleet.Close)
	via := &env{db: a.db, srv: fleet, sg: a.sg}

	inDoubt := func(e *env, eff outbox.Effect) *outboxtype.Effect {
		got := e.enqueue(t, eff)
		e.set(t, got.ID, "state = 'fired', in_doubt = true, attempts = 1, fired_at = now(), last_error = 'no response: timeout'")
		return got
	}
	cus := inDoubt(b, customer())
	status, body := via.stripeEvent(t, "evt_us", "customer.created",
		map[string]any{"id": "cus_us", "object": "customer", "metadata": map[string]any{"outboxd_idempotency_key": cus.IdempotencyKey}})
	require.Equal(t, http.StatusOK, status, body)
	require.Equal(t, outboxtype.StateConfirmed, b.get(t, cus.ID).State, "confirmed in the shard that holds its key")
	require.Equal(t, 1, b.count(t, "inbox_messages"))
	require.Zero(t, a.count(t, "inbox_messages"))

	status, body = via.stripeEvent(t, "evt_us", "customer.created",
		map[string]any{"id": "cus_us", "object": "customer", "metadata": map[string]any{"outboxd_idempotency_key": cus.IdempotencyKey}})
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, `"duplicates": 1`, "a redelivery is a duplicate where it went")

	// One SendGrid batch with a mail of each shard.
	mailA, mailB := inDoubt(a, mail()), inDoubt(b, mail())
	status, body = via.sendgridEvents(t,
		sgEvent("sg_a", "processed", mailA.IdempotencyKey, "msg_a", time.Now()),
		sgEvent("sg_b", "processed", mailB.IdempotencyKey, "msg_b", time.Now()))
	require.Equal(t, http.StatusOK, status, body)
	require.Equal(t, "msg_a", *a.get(t, mailA.ID).ProviderRef)
	require.Equal(t, "msg_b", *b.get(t, mailB.ID).ProviderRef)

	// A key no shard has: drift, recorded once, in the first shard.
	status, _ = via.stripeEvent(t, "evt_unknown", "customer.created",
		map[string]any{"id": "cus_x", "object": "customer", "metadata": map[string]any{"outboxd_idempotency_key": "f00d"}})
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, 1, a.count(t, "provider_drift"))
	require.Zero(t, b.count(t, "provider_drift"))

	require.Len(t, b.obs.events, 2, "us-1 heard of its Stripe event and its mail")
	require.Len(t, a.obs.events, 2, "eu-1 of its mail and the unknown key")
}
