package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/engine"
	"github.com/outboxd/outboxd/internal/fakes"
	"github.com/outboxd/outboxd/internal/store"
	"github.com/outboxd/outboxd/internal/testdb"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/sendgrid"
	"github.com/outboxd/outboxd/providers/stripe"
	"github.com/outboxd/outboxd/providers/webhook"
	"github.com/outboxd/outboxd/sideeffects"
	"github.com/outboxd/outboxd/sideeffects/oncall"
)

const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}

type workerBundle struct {
	db    *testdb.DB
	ob    *outbox.Outbox
	recv  *fakes.Receiver
	store *store.Store
	cfg   sideeffects.Config
}

type workerOpts struct {
	maxAttempts  int
	noLoopback   bool
	webhookLimit time.Duration
}

func setupWorker(t *testing.T, opts workerOpts) *workerBundle {
	t.Helper()
	db := testdb.New(t)
	recv, err := fakes.NewReceiver(secret)
	require.NoError(t, err)
	t.Cleanup(recv.Close)
	allowed := loopback
	if opts.noLoopback {
		allowed = nil
	}
	p, err := webhook.New(webhook.Config{Secret: secret, AllowedNetworks: allowed, Timeout: cmpOr(opts.webhookLimit, 5*time.Second)})
	require.NoError(t, err)
	ob, err := outbox.New(outbox.Config{Jobs: outbox.JobsInTransaction, Schema: db.Schema, Providers: []providers.Validator{
		webhook.Schema{AllowedNetworks: loopback}, stripe.Schema{}, sendgrid.Schema{},
	}})
	require.NoError(t, err)
	return &workerBundle{
		db: db, ob: ob, recv: recv, store: store.NewStore(db.Schema),
		cfg: sideeffects.Config{
			Schema:            db.Schema,
			Providers:         []providers.Provider{p},
			Retry:             outboxtype.RetryPolicy{MaxAttempts: opts.maxAttempts, BaseDelay: 10 * time.Millisecond, MaxDelay: 50 * time.Millisecond},
			FetchCooldown:     10 * time.Millisecond,
			FetchPollInterval: 50 * time.Millisecond,
			Logger:            slog.New(slog.NewTextHandler(io.Discard, nil)),
			TestOnly:          true,
		},
	}
}

func cmpOr(a, b time.Duration) time.Duration {
	if a != 0 {
		return a
	}
	return b
}

// start runs a dispatcher until the test ends.
func (b *workerBundle) start(t *testing.T) *engine.Dispatcher {
	t.Helper()
	d, err := newDispatcher(b.db.Pool, b.cfg)
	require.NoError(t, err)
	require.NoError(t, d.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = d.Stop(ctx)
	})
	return d
}

// enqueue records one event with one webhook effect to path and returns the
// effect.
func (b *workerBundle) enqueue(t *testing.T, path string) outbox.EffectResult {
	t.Helper()
	return b.enqueueURL(t, b.recv.URL+path)
}

func (b *workerBundle) enqueueURL(t *testing.T, url string) outbox.EffectResult {
	t.Helper()
	return b.enqueueEffect(t, outbox.EffectOf("webhook.order_paid", webhook.Payload{URL: url, Body: json.RawMessage(`{"type": "order.paid"}`)}))
}

// enqueueEffect records one event with the given effect.
func (b *workerBundle) enqueueEffect(t *testing.T, effect outbox.Effect) outbox.EffectResult {
	t.Helper()
	ctx := context.Background()
	var res *outbox.Result
	err := pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
		var err error
		res, err = b.ob.Enqueue(ctx, tx,
			outbox.Event{ID: uuid.New(), Type: "order.paid", Payload: json.RawMessage(`{"order": "ord_42"}`)}, effect)
		return err
	})
	require.NoError(t, err)
	return res.Effects[0]
}

// waitFor polls until the effect reaches state, failing after 30s.
func (b *workerBundle) waitFor(t *testing.T, id uuid.UUID, state outboxtype.State) *outboxtype.Effect {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		e := b.effect(t, id)
		if e.State == state {
			return e
		}
		if time.Now().After(deadline) {
			t.Fatalf("effect %s: state %s after 30s, want %s (last error: %v)", id, e.State, state, deref(e.LastError))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func (b *workerBundle) jobState(t *testing.T, effectID uuid.UUID) string {
	t.Helper()
	var state string
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT state FROM `+b.db.Schema+`.river_job
		WHERE args->>'effect_id' = $1 ORDER BY id DESC LIMIT 1`, effectID.String()).Scan(&state))
	return state
}

// waitForJob polls until the effect's newest River job reaches state; River
// records outcomes asynchronously.
func (b *workerBundle) waitForJob(t *testing.T, effectID uuid.UUID, state string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := b.jobState(t, effectID)
		if got == state {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("job of effect %s: state %s after 30s, want %s", effectID, got, state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestDispatchConfirmsEveryEffect(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	b.start(t)
	var effects []outbox.EffectResult
	for range 20 {
		effects = append(effects, b.enqueue(t, "/orders"))
	}
	for _, e := range effects {
		got := b.waitFor(t, e.ID, outboxtype.StateConfirmed)
		require.Equal(t, 1, got.Attempts)
		require.NotNil(t, got.ConfirmedAt)
		b.waitForJob(t, e.ID, "completed") // River's completer records it after the confirmation
	}
	byID := b.recv.ByID()
	require.Len(t, byID, len(effects), "one distinct webhook-id per effect")
	for _, e := range effects {
		ds := byID[e.Key]
		require.Len(t, ds, 1, "effect %s delivered once", e.ID)
		require.True(t, ds[0].Verified, "signature verifies with the Standard Webhooks library")
		require.Equal(t, e.Key, ds[0].Key, "Idempotency-Key equals webhook-id")
	}
}

func TestDispatchRetryableThenConfirmed(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	b.recv.Respond("/flaky", fakes.Status(500))
	b.start(t)
	e := b.enqueue(t, "/flaky")
	got := b.waitFor(t, e.ID, outboxtype.StateConfirmed)
	require.Equal(t, 2, got.Attempts)
	ds := b.recv.Deliveries()
	require.Len(t, ds, 2)
	require.Equal(t, []int{500, 204}, []int{ds[0].Status, ds[1].Status})
	require.Equal(t, e.Key, ds[0].ID)
	require.Equal(t, e.Key, ds[1].ID, "the retry carries the same webhook-id")
}

func TestDispatchGoneFails(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	b.recv.Respond("/gone", fakes.Status(http.StatusGone))
	b.start(t)
	e := b.enqueue(t, "/gone")
	got := b.waitFor(t, e.ID, outboxtype.StateFailed)
	require.Equal(t, 1, got.Attempts)
	require.Contains(t, deref(got.LastError), "HTTP 410")
	require.Len(t, b.recv.Deliveries(), 1, "a permanent failure is not retried")
	b.waitForJob(t, e.ID, "cancelled") // River does not retry past outboxd's decision
}

func TestDispatchHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	b.recv.Respond("/busy", fakes.Status(http.StatusTooManyRequests, "Retry-After", "2"))
	b.start(t)
	e := b.enqueue(t, "/busy")
	b.waitFor(t, e.ID, outboxtype.StateConfirmed)
	ds := b.recv.Deliveries()
	require.Len(t, ds, 2)
	// The schedule alone would retry after ~10ms; the receiver asked for 2s.
	require.GreaterOrEqual(t, ds[1].At.Sub(ds[0].At), 2*time.Second)
}

func TestDispatchRetriesExhausted(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{maxAttempts: 3})
	b.recv.Respond("/down", fakes.Status(503), fakes.Status(503), fakes.Status(503), fakes.Status(503))
	b.start(t)
	e := b.enqueue(t, "/down")
	got := b.waitFor(t, e.ID, outboxtype.StateFailed)
	require.Equal(t, 3, got.Attempts)
	require.Contains(t, deref(got.LastError), "retries exhausted after 3 attempts")
	for _, d := range b.recv.Deliveries() {
		require.Equal(t, e.Key, d.ID)
	}
	require.Len(t, b.recv.Deliveries(), 3)
}

func TestConfirmFailureRefiresWithSameKey(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	d := b.start(t)
	var calls atomic.Int32
	var stateAtCrash atomic.Value
	engine.SetBeforeConfirm(d, func(ctx context.Context) error {
		if calls.Add(1) > 1 {
			return nil
		}
		// The provider has acted; the process "dies" before confirming.
		var state string
		if err := b.db.Pool.QueryRow(ctx, `SELECT state FROM `+b.db.Schema+`.side_effects`).Scan(&state); err != nil {
			return err
		}
		stateAtCrash.Store(state)
		return errors.New("injected: crash before confirm")
	})
	e := b.enqueue(t, "/orders")
	got := b.waitFor(t, e.ID, outboxtype.StateConfirmed)
	require.Equal(t, "fired", stateAtCrash.Load(), "fired is committed before the provider is called")
	require.Equal(t, 2, got.Attempts)
	ds := b.recv.Deliveries()
	require.Len(t, ds, 2, "the in-doubt effect is re-fired")
	require.Equal(t, e.Key, ds[0].ID)
	require.Equal(t, e.Key, ds[1].ID, "with the same webhook-id, so the receiver can deduplicate")
}

func TestShutdownMidCallLeavesFiredForNextProcess(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	inFlight := make(chan struct{})
	b.recv.Respond("/slow", func(w http.ResponseWriter, r *http.Request) int {
		close(inFlight)
		<-r.Context().Done() // hang until the caller gives up
		return 0
	})
	first, err := newDispatcher(b.db.Pool, b.cfg)
	require.NoError(t, err)
	require.NoError(t, first.Start(context.Background()))
	e := b.enqueue(t, "/slow")
	<-inFlight

	expired, cancel := context.WithCancel(context.Background())
	cancel() // no grace period: in-flight attempts are cancelled at once
	require.NoError(t, first.Stop(expired))

	got := b.effect(t, e.ID)
	require.Equal(t, outboxtype.StateFired, got.State, "an interrupted attempt stays fired")

	b.start(t) // the next process
	got = b.waitFor(t, e.ID, outboxtype.StateConfirmed)
	require.Equal(t, 2, got.Attempts)
	byID := b.recv.ByID()
	require.Len(t, byID, 1)
	require.Len(t, byID[e.Key], 2, "both attempts carried the effect's key")
}

func TestLoopbackRefusedUnlessAllowed(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{noLoopback: true})
	b.start(t)
	port := b.recv.URL[strings.LastIndex(b.recv.URL, ":")+1:]
	e := b.enqueueURL(t, "http://localhost:"+port+"/orders")
	got := b.waitFor(t, e.ID, outboxtype.StateFailed)
	require.Contains(t, deref(got.LastError), "loopback")
	require.Empty(t, b.recv.Deliveries())
	// Delivery with loopback allowed is covered by every other test here.
}

func TestKeyWindowExpiredIsNotRefired(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	e := b.enqueue(t, "/orders")
	// An attempt made 25 hours ago never reported back.
	_, err := b.db.Pool.Exec(context.Background(), `UPDATE `+b.db.Schema+`.side_effects
		SET state = 'fired', attempts = 1, first_fired_at = now() - interval '25 hours', key_window_from = now() - interval '25 hours' WHERE id = $1`, e.ID)
	require.NoError(t, err)
	b.start(t)
	got := b.waitFor(t, e.ID, outboxtype.StateFailed)
	require.Equal(t, outboxtype.ReasonKeyWindow, deref(got.LastError))
	require.Equal(t, 1, got.Attempts)
	require.Empty(t, b.recv.Deliveries(), "past the key window a re-fire could act twice")
}

func TestTerminalEffectsAreNeverFired(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	e := b.enqueue(t, "/orders")
	_, err := b.db.Pool.Exec(context.Background(), `UPDATE `+b.db.Schema+`.side_effects SET state = 'cancelled' WHERE id = $1`, e.ID)
	require.NoError(t, err)
	b.start(t)
	b.waitForJob(t, e.ID, "completed")
	got := b.effect(t, e.ID)
	require.Equal(t, outboxtype.StateCancelled, got.State)
	require.Zero(t, got.Attempts)
	require.Empty(t, b.recv.Deliveries())
}

func TestShutdownDrainsInFlightCalls(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	inFlight := make(chan struct{})
	b.recv.Respond("/slow", func(w http.ResponseWriter, _ *http.Request) int {
		close(inFlight)
		time.Sleep(300 * time.Millisecond) // a slow but healthy receiver
		w.WriteHeader(http.StatusNoContent)
		return http.StatusNoContent
	})
	d, err := newDispatcher(b.db.Pool, b.cfg)
	require.NoError(t, err)
	require.NoError(t, d.Start(context.Background()))
	e := b.enqueue(t, "/slow")
	<-inFlight

	// SIGTERM with a grace period: the call in flight finishes and is
	// confirmed before Stop returns.
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, d.Stop(stopCtx))
	got := b.effect(t, e.ID)
	require.Equal(t, outboxtype.StateConfirmed, got.State)
	require.Equal(t, 1, got.Attempts)
	require.Len(t, b.recv.Deliveries(), 1)
}

// One hanging receiver must not take every worker of the webhook queue: with
// outboxd's default settings and more effects waiting for a host that never
// answers than the queue has workers (and a request timeout far longer
// than the test's patience), an effect for a healthy host is still
// delivered while the hanging requests are in flight.
func TestHangingReceiverDoesNotStallOtherDestinations(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{webhookLimit: 5 * time.Minute})
	b.cfg.JobTimeout = 6 * time.Minute
	b.cfg.RescueAfter = 7 * time.Minute
	b.start(t)

	var inFlight, maxInFlight, finished atomic.Int32
	release := make(chan struct{})
	hanging := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inFlight.Add(1)
		for {
			m := maxInFlight.Load()
			if n <= m || maxInFlight.CompareAndSwap(m, n) {
				break
			}
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
		inFlight.Add(-1)
		finished.Add(1)
	}))
	t.Cleanup(func() { close(release); hanging.Close() })

	// More effects for the hanging host than the queue has workers.
	hangingEffects := sideeffects.DefaultConcurrency + 50
	for range hangingEffects {
		b.enqueueURL(t, hanging.URL+"/slow")
	}
	// A host that never answered holds its warm-up's four requests: it
	// answers none, so no more open (providers/webhook's gate).
	const warm = 4
	require.Eventually(t, func() bool { return inFlight.Load() == warm }, testWait, pollEvery,
		"the hanging host gets its share of workers")
	healthy := b.enqueue(t, "/orders")
	b.waitFor(t, healthy.ID, outboxtype.StateConfirmed)
	require.Zero(t, finished.Load(), "delivered while every hanging request was still in flight")
	require.Equal(t, int32(warm), maxInFlight.Load(), "never more than the warm-up at a host that never answered")
	require.Less(t, warm, webhook.DefaultMaxPerHost)
}

// gatedProvider turns effects away at its gate a number of times before it
// admits them, and acknowledges every request.
type gatedProvider struct {
	refuse  atomic.Int32
	admits  atomic.Int32
	sends   atomic.Int32
	release atomic.Int32
	// onRelease, if set, runs when a slot is released.
	onRelease func()
}

func (p *gatedProvider) Name() string                                  { return "gated" }
func (p *gatedProvider) ValidatePayload(string, json.RawMessage) error { return nil }
func (p *gatedProvider) Guarantees() providers.Guarantees {
	return providers.Guarantees{InDoubt: providers.AtMostOnce}
}
func (p *gatedProvider) Send(context.Context, providers.Request) (providers.Result, error) {
	p.sends.Add(1)
	return providers.Result{Ref: "ok"}, nil
}
func (p *gatedProvider) Admit(context.Context, json.RawMessage) (func(error), time.Duration, bool) {
	p.admits.Add(1)
	if p.refuse.Add(-1) >= 0 {
		return nil, 10 * time.Millisecond, false
	}
	return func(error) {
		if p.onRelease != nil {
			p.onRelease()
		}
		p.release.Add(1)
	}, 0, true
}

// An effect turned away at its provider's gate is not fired: the claim is
// undone, no attempt counts, and (at_most_once notwithstanding) it is not
// treated as in doubt when it is admitted later.
func TestGateRefusalUndoesTheClaim(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	p := &gatedProvider{}
	p.refuse.Store(3)
	b.cfg.Providers = []providers.Provider{p}
	ob, err := outbox.New(outbox.Config{Jobs: outbox.JobsInTransaction, Schema: b.db.Schema, Providers: []providers.Validator{p}})
	require.NoError(t, err)
	b.ob = ob
	b.start(t)
	e := b.enqueueEffect(t, outbox.Effect{Kind: "gated.x", Provider: "gated", Payload: json.RawMessage(`{}`)})
	got := b.waitFor(t, e.ID, outboxtype.StateConfirmed)
	require.Equal(t, int32(4), p.admits.Load(), "turned away three times, then admitted")
	require.Equal(t, int32(1), p.sends.Load())
	require.Equal(t, 1, got.Attempts, "the refusals spent no attempt")
	require.Equal(t, 1, got.TotalAttempts)
	require.Eventually(t, func() bool { return p.release.Load() == 1 }, testWait, pollEvery, "the slot is released")
}

// A destination's slot is held while the request is in flight, not while
// outboxd records the answer: the gate gets its slot back before the
// confirmation is committed, so the next effect for a destination at its
// cap never waits for outboxd's own bookkeeping.
func TestGateSlotFreedBeforeTheConfirmation(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	p := &gatedProvider{}
	stateAtRelease := make(chan string, 1)
	p.onRelease = func() {
		var st string
		if err := b.db.Pool.QueryRow(context.Background(), `SELECT state FROM `+b.db.Schema+`.side_effects`).Scan(&st); err != nil {
			st = err.Error()
		}
		stateAtRelease <- st
	}
	b.cfg.Providers = []providers.Provider{p}
	ob, err := outbox.New(outbox.Config{Jobs: outbox.JobsInTransaction, Schema: b.db.Schema, Providers: []providers.Validator{p}})
	require.NoError(t, err)
	b.ob = ob
	b.start(t)
	e := b.enqueueEffect(t, outbox.Effect{Kind: "gated.x", Provider: "gated", Payload: json.RawMessage(`{}`)})
	b.waitFor(t, e.ID, outboxtype.StateConfirmed)
	select {
	case st := <-stateAtRelease:
		require.Equal(t, string(outboxtype.StateFired), st, "the slot came back before the confirmation")
	case <-time.After(testWait):
		t.Fatal("the slot was never released")
	}
}

// With outbox.JobsByDispatcher the application's transaction holds no River
// job; the dispatcher gives every effect exactly one and fires it.
func TestDispatcherInsertsJobsFromTheIntake(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	ob, err := outbox.New(outbox.Config{Schema: b.db.Schema, Jobs: outbox.JobsByDispatcher,
		Providers: []providers.Validator{webhook.Schema{AllowedNetworks: loopback}}})
	require.NoError(t, err)
	b.ob = ob
	// Effects committed before any dispatcher runs are found by its poll.
	early := b.enqueue(t, "/orders")
	b.start(t)
	var effects []outbox.EffectResult
	for range 30 {
		effects = append(effects, b.enqueue(t, "/orders"))
	}
	for _, e := range append(effects, early) {
		b.waitFor(t, e.ID, outboxtype.StateConfirmed)
		own, batches := b.jobs(t, e.ID)
		require.Equal(t, 1, own+batches, "one job for each effect: its own or a batch")
		require.Len(t, b.recv.ByID()[e.Key], 1, "delivered once")
	}
	var left int
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM `+b.db.Schema+`.outbox_intake`).Scan(&left))
	require.Zero(t, left, "the intake is drained")
}

// carrying makes b enqueue under EffectsByDispatcher and returns its
// outbox.
func (b *workerBundle) carrying(t *testing.T) *outbox.Outbox {
	t.Helper()
	ob, err := outbox.New(outbox.Config{Schema: b.db.Schema, Jobs: outbox.EffectsByDispatcher,
		Providers: []providers.Validator{webhook.Schema{AllowedNetworks: loopback}}})
	require.NoError(t, err)
	b.ob = ob
	return ob
}

// Under EffectsByDispatcher a dispatcher writes out the effects each
// event carries when it takes the event, with the ids, keys and creation
// times the enqueue reported, and dispatches them as any other: each
// delivered once, a scheduled one kept for its time, the event left
// carrying nothing and the intake empty.
func TestDispatcherWritesOutTheEffectsEventsCarry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupWorker(t, workerOpts{})
	ob := b.carrying(t)
	later := time.Now().Add(time.Hour)
	var scheduled outbox.EffectResult
	var effects []outbox.EffectResult
	enqueue := func() {
		require.NoError(t, pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
			remind := outbox.EffectOf("webhook.remind", webhook.Payload{URL: b.recv.URL + "/remind", Body: json.RawMessage(`{}`)})
			remind.NotBefore = later
			res, err := ob.Enqueue(ctx, tx, outbox.Event{ID: uuid.New(), Type: "order.paid"},
				outbox.EffectOf("webhook.a", webhook.Payload{URL: b.recv.URL + "/a", Body: json.RawMessage(`{}`)}),
				outbox.EffectOf("webhook.b", webhook.Payload{URL: b.recv.URL + "/b", Body: json.RawMessage(`{}`)}),
				remind)
			if err != nil {
				return err
			}
			effects = append(effects, res.Effects[0], res.Effects[1])
			scheduled = res.Effects[2]
			return nil
		}))
	}
	// Events committed before any dispatcher runs are found by its poll.
	enqueue()
	var rows int
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM `+b.db.Schema+`.side_effects`).Scan(&rows))
	require.Zero(t, rows, "no effect row before a dispatcher takes the event")
	b.start(t)
	for range 20 {
		enqueue()
	}
	for _, e := range effects {
		deadline := time.Now().Add(30 * time.Second)
		for {
			got, err := b.store.Get(ctx, b.db.Pool, e.ID)
			if err == nil && got.State == outboxtype.StateConfirmed {
				break
			}
			require.True(t, time.Now().Before(deadline), "effect %s not confirmed after 30s", e.ID)
			time.Sleep(20 * time.Millisecond)
		}
		require.Len(t, b.recv.ByID()[e.Key], 1, "delivered once, with the key the enqueue reported")
	}
	got, err := b.store.Get(ctx, b.db.Pool, scheduled.ID)
	require.NoError(t, err)
	require.Equal(t, outboxtype.StatePending, got.State)
	require.NotNil(t, got.NotBefore)
	require.WithinDuration(t, later, *got.NotBefore, time.Millisecond, "the scheduled time carried")
	var carried, waiting, intake, early int
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM `+b.db.Schema+`.outbox_events WHERE effects IS NOT NULL),
		(SELECT count(*) FROM `+b.db.Schema+`.outbox_event_intake),
		(SELECT count(*) FROM `+b.db.Schema+`.outbox_intake),
		(SELECT count(*) FROM `+b.db.Schema+`.side_effects e JOIN `+b.db.Schema+`.outbox_events ev ON ev.id = e.source_id
			WHERE e.created_at <> ev.created_at)`).Scan(&carried, &waiting, &intake, &early))
	require.Equal(t, [4]int{0, 0, 0, 0}, [4]int{carried, waiting, intake, early},
		"events carry nothing, intakes drained, every effect created when its event was")
}

// Replays of events that carry their effects, racing the dispatchers
// that take the same events: whichever writes an event's effects out
// first, the other finds nothing to write, every replay is a duplicate
// and every effect is delivered once.
func TestReplaysRaceTheDispatchersWritingOut(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupWorker(t, workerOpts{})
	ob := b.carrying(t)
	const n = 60
	events := make([]outbox.Event, n)
	effect := func(i int) outbox.Effect {
		return outbox.EffectOf("webhook.a", webhook.Payload{URL: b.recv.URL + "/a", Body: json.RawMessage(fmt.Sprintf(`{"i": %d}`, i))})
	}
	keys := map[string]bool{}
	for i := range events {
		events[i] = outbox.Event{ID: uuid.New(), Type: "order.paid"}
		require.NoError(t, pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
			res, err := ob.Enqueue(ctx, tx, events[i], effect(i))
			if err == nil {
				keys[res.Effects[0].Key] = true
			}
			return err
		}))
	}
	b.start(t)
	b.start(t)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range events {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
				res, err := ob.Enqueue(ctx, tx, events[i], effect(i))
				if err == nil && (!res.EventExisted || !res.Effects[0].Duplicate) {
					err = fmt.Errorf("replay of event %d: %+v", i, res)
				}
				return err
			})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var confirmed int
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM `+b.db.Schema+`.side_effects WHERE state = 'confirmed'`).Scan(&confirmed))
		if confirmed == n {
			break
		}
		require.True(t, time.Now().Before(deadline), "%d of %d confirmed after 30s", confirmed, n)
		time.Sleep(20 * time.Millisecond)
	}
	for key := range keys {
		require.Len(t, b.recv.ByID()[key], 1, "delivered once")
	}
	require.Len(t, b.recv.ByID(), n, "no request for anything else")
}

// Every failed attempt is kept with its time, duration, outcome, error and
// the host that answered; the confirmation is on the effect itself.
func TestFailedAttemptsAreKeptForOperators(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	b.recv.Respond("/flaky", fakes.Status(503), fakes.Status(429))
	b.start(t)
	e := b.enqueue(t, "/flaky")
	got := b.waitFor(t, e.ID, outboxtype.StateConfirmed)
	require.Equal(t, 3, got.TotalAttempts)
	attempts, err := b.store.Attempts(context.Background(), b.db.Pool, e.ID)
	require.NoError(t, err)
	require.Len(t, attempts, 2)
	host := strings.TrimPrefix(b.recv.URL, "http://")
	require.Equal(t, 1, attempts[0].Attempt)
	require.Equal(t, "in_doubt", attempts[0].Outcome)
	require.Contains(t, attempts[0].Error, "HTTP 503")
	require.Equal(t, host, attempts[0].Host)
	require.Equal(t, 2, attempts[1].Attempt)
	require.Equal(t, engine.OutcomeThrottled, attempts[1].Outcome, "a 429 is kept as throttled: not an attempt")
	require.Contains(t, attempts[1].Error, "HTTP 429")
	require.Equal(t, host, attempts[1].Host)
	require.Equal(t, 2, got.Attempts, "the 503 and the confirmation count, the 429 does not")
}

// An answer that proves the provider did not act (a refusal such as 409) leaves
// an effect failed but not in doubt, so stuck does not tell an operator to
// look for a delivery that cannot have happened; an earlier in-doubt
// attempt (a 503) keeps it in doubt.
func TestProvenFailuresAreNotInDoubt(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{maxAttempts: 2})
	b.recv.Respond("/gone", fakes.Status(410))
	b.recv.Respond("/busy", fakes.Status(409), fakes.Status(409))
	b.recv.Respond("/flaky-then-gone", fakes.Status(503), fakes.Status(410))
	b.start(t)
	gone, busy, flaky := b.enqueue(t, "/gone"), b.enqueue(t, "/busy"), b.enqueue(t, "/flaky-then-gone")
	for _, c := range []struct {
		id      uuid.UUID
		inDoubt bool
		advice  string
	}{
		{gone.ID, false, "The provider refused it (permanent)"},
		{busy.ID, false, "The provider never acted"},
		{flaky.ID, true, "An earlier request may have been delivered"},
	} {
		e := b.waitFor(t, c.id, outboxtype.StateFailed)
		require.Equal(t, c.inDoubt, e.InDoubt, deref(e.LastError))
		stuck, err := b.store.Stuck(context.Background(), b.db.Pool, time.Now(), 10)
		require.NoError(t, err)
		for _, s := range stuck {
			if s.ID == c.id {
				require.Contains(t, oncall.Diagnosis(s, time.Now(), time.Hour, 0), c.advice)
			}
		}
	}
}

// River's soft stop: in-flight attempts get Config.ShutdownTimeout, then
// River cancels them, well before the caller's own deadline; the effect
// stays fired for the next process.
func TestShutdownTimeoutCancelsHangingAttempts(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	inFlight := make(chan struct{})
	b.recv.Respond("/hang", func(w http.ResponseWriter, r *http.Request) int {
		close(inFlight)
		<-r.Context().Done()
		return 0
	})
	cfg := b.cfg
	cfg.ShutdownTimeout = 100 * time.Millisecond
	d, err := newDispatcher(b.db.Pool, cfg)
	require.NoError(t, err)
	require.NoError(t, d.Start(context.Background()))
	e := b.enqueue(t, "/hang")
	<-inFlight
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, d.Stop(ctx))
	require.NoError(t, ctx.Err(), "River cancelled the attempt at ShutdownTimeout, not the caller's deadline")
	<-d.Stopped()
	got := b.effect(t, e.ID)
	require.Equal(t, outboxtype.StateFired, got.State)
}

// TestARunningJobNamesItsDispatcher: River marks a job it works with the
// dispatcher's recorded id, so that a job left running names its process.
func TestARunningJobNamesItsDispatcher(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	inFlight := make(chan struct{})
	b.recv.Respond("/hang", func(w http.ResponseWriter, r *http.Request) int {
		close(inFlight)
		<-r.Context().Done()
		return 0
	})
	b.cfg.Settings = map[string]any{"providers": []string{"webhook"}}
	b.cfg.ShutdownTimeout = 100 * time.Millisecond // the hanging call is cut off at the end
	b.start(t)
	b.enqueue(t, "/hang")
	<-inFlight
	ctx := context.Background()
	ds, err := b.store.Dispatchers(ctx, b.db.Pool, 10)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	running, err := b.store.RunningJobs(ctx, b.db.Pool)
	require.NoError(t, err)
	require.Len(t, running, 1)
	require.Equal(t, ds[0].ID, running[0].HeldBy)
	require.Equal(t, 1, running[0].Jobs)
}

// newDispatcher builds a dispatcher as an application does
// (sideeffects.NewDispatcher) and returns the engine's, which the tests'
// hooks reach into.
func newDispatcher(pool *pgxpool.Pool, cfg sideeffects.Config) (*engine.Dispatcher, error) {
	d, err := sideeffects.NewDispatcher(pool, cfg)
	return (*engine.Dispatcher)(d), err
}

// TestNoWaitIsNegative: a retry time that passed before River asked for it
// is now, not a time in the past (River would replace it with its own
// schedule, errors^4 seconds: 21 minutes after six errors), and a snooze
// until a time that just passed is a snooze of zero, not River's panic.
func TestNoWaitIsNegative(t *testing.T) {
	t.Parallel()
	before := time.Now()
	got := engine.RetryTimeOf(before.Add(-time.Hour))
	require.False(t, got.Before(before), "a past retry time becomes now: %s", got)
	future := time.Now().Add(time.Minute)
	require.Equal(t, future, engine.RetryTimeOf(future), "a time still ahead is kept")

	var err error
	require.NotPanics(t, func() { err = engine.Snooze(-5 * time.Second) })
	var se *rivertype.JobSnoozeError
	require.ErrorAs(t, err, &se)
	require.Zero(t, se.Duration)
}

// TestRiverGetsASummaryNotTheReceiversBody: River logs a job's error at
// INFO and keeps it in river_job.errors (otelriver puts it in a span): it
// gets the class and status, while the receiver's whole answer stays in
// the effect's attempt history for operators.
func TestRiverGetsASummaryNotTheReceiversBody(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	b.recv.Respond("/busy", func(w http.ResponseWriter, _ *http.Request) int {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, `{"error": "maintenance", "echo": "token-echo-7731"}`)
		return http.StatusServiceUnavailable
	})
	b.start(t)
	e := b.enqueue(t, "/busy")
	b.waitFor(t, e.ID, outboxtype.StateConfirmed)

	var errs []string
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT coalesce(array_agg(x->>'error'), '{}') FROM `+b.db.Schema+`.river_job,
		jsonb_array_elements(coalesce(to_jsonb(errors), '[]'::jsonb)) x WHERE args->>'effect_id' = $1::text`, e.ID).Scan(&errs))
	require.NotEmpty(t, errs, "the 503 was an errored run of the job")
	for _, text := range errs {
		require.Contains(t, text, "HTTP 503")
		require.NotContains(t, text, "token-echo-7731")
	}
	attempts, err := b.store.Attempts(context.Background(), b.db.Pool, e.ID)
	require.NoError(t, err)
	require.Len(t, attempts, 1)
	require.Contains(t, attempts[0].Error, "token-echo-7731", "operators still read the receiver's answer")
}
