package engine_test

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/engine"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/providers/webhook"
	"github.com/outboxd/outboxd/sideeffects"
)

func (b *workerBundle) enqueueFor(t *testing.T, tenant, path string) uuid.UUID {
	t.Helper()
	ctx := context.Background()
	var res *outbox.Result
	require.NoError(t, pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
		var err error
		res, err = b.ob.Enqueue(ctx, tx, outbox.Event{ID: uuid.New(), Type: "order.paid", Tenant: tenant},
			outbox.EffectOf("webhook.order_paid", webhook.Payload{URL: b.recv.URL + path, Body: json.RawMessage(`{}`)}))
		return err
	}))
	return res.Effects[0].ID
}

// liveJobsOf counts the live dispatch jobs of tenant's effects.
func (b *workerBundle) liveJobsOf(t *testing.T, tenant string) int {
	t.Helper()
	var n int
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM `+b.db.Schema+`.river_job j
		JOIN `+b.db.Schema+`.side_effects e ON e.id = (j.args->>'effect_id')::uuid
		WHERE j.kind = 'outboxd.dispatch' AND j.state IN ('available', 'pending', 'retryable', 'running', 'scheduled') AND e.tenant = $1`, tenant).Scan(&n))
	return n
}

// TestATenantsBacklogDoesNotHoldBackAnothersNewEffect: tenant A has 60
// webhooks to a receiver that does not answer; the webhook queue has four
// workers. Without tenants all four would hang on A's effects and B's new
// effect would wait behind the other 56. With a window of two, A has at
// most two jobs at once, and B's effect is delivered while A's hang; when
// A's receiver answers, each of A's effects is delivered once.
func TestATenantsBacklogDoesNotHoldBackAnothersNewEffect(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	b.cfg.Concurrency = map[string]int{"webhook": 4}
	b.cfg.TenantWindow = 2
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	const backlog = 60
	hang := func(w http.ResponseWriter, r *http.Request) int {
		select {
		case <-release:
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusNoContent)
		return http.StatusNoContent
	}
	for range backlog {
		b.recv.Respond("/a", hang)
	}
	var a []uuid.UUID
	for range backlog {
		a = append(a, b.enqueueFor(t, "tenant-a", "/a"))
	}
	require.Equal(t, outboxtype.StatePending, b.effect(t, a[0]).State)
	require.Equal(t, "turn:tenant-a", deref(b.effect(t, a[0]).WaitingFor), "waiting for its tenant's turn")
	b.start(t)
	// A's first two effects are sent and hang.
	require.Eventually(t, func() bool { return len(b.recv.Deliveries()) == 0 && b.liveJobsOf(t, "tenant-a") == 2 }, testWait, pollEvery)

	other := b.enqueueFor(t, "tenant-b", "/b")
	b.waitFor(t, other, outboxtype.StateConfirmed)
	require.LessOrEqual(t, b.liveJobsOf(t, "tenant-a"), 2, "A never has more than its window")
	fired := 0
	for _, id := range a {
		if b.effect(t, id).State != outboxtype.StatePending {
			fired++
		}
	}
	require.LessOrEqual(t, fired, 2)

	once.Do(func() { close(release) })
	for _, id := range a {
		b.waitFor(t, id, outboxtype.StateConfirmed)
	}
	for id, ds := range b.recv.ByID() {
		require.Len(t, ds, 1, "webhook %s delivered once", id)
	}
	var queued, inflight int
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM `+b.db.Schema+`.outboxd_tenant_queue),
		(SELECT count(*) FROM `+b.db.Schema+`.outboxd_tenant_inflight)`).Scan(&queued, &inflight))
	require.Zero(t, queued)
	require.Zero(t, inflight, "each end freed its place")
}

// TestTenantWindowsAreWeighted: with a window of two, a tenant of weight 2
// gets four jobs at once, another two; scheduled effects wait for their
// time without taking a place; an effect with an ordering key keeps its
// chain's order and is not queued.
func TestTenantWindowsAreWeighted(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	b.cfg.TenantWindow = 2
	b.cfg.TenantWeights = map[string]float64{"big": 2}
	d, err := newDispatcher(b.db.Pool, b.cfg) // not started: the feeder runs by hand
	require.NoError(t, err)
	ctx := context.Background()
	for range 6 {
		b.enqueueFor(t, "big", "/x")
		b.enqueueFor(t, "small", "/x")
	}
	require.NoError(t, pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
		_, err := b.ob.Enqueue(ctx, tx, outbox.Event{ID: uuid.New(), Type: "order.paid", Tenant: "small"},
			outbox.Effect{Kind: "webhook.later", Provider: "webhook", NotBefore: time.Now().Add(time.Hour),
				Payload: json.RawMessage(`{"url": "` + b.recv.URL + `/x", "body": {}}`)},
			outbox.Effect{Kind: "webhook.chained", Provider: "webhook", OrderingKey: "order:1",
				Payload: json.RawMessage(`{"url": "` + b.recv.URL + `/x", "body": {}}`)})
		return err
	}))
	n, err := engine.FeedTenants(ctx, d)
	require.NoError(t, err)
	require.Equal(t, 6, n, "four for big, two for small")
	require.Equal(t, 4, b.liveJobsOf(t, "big"))
	require.Equal(t, 2, b.liveJobsOf(t, "small"))
	n, err = engine.FeedTenants(ctx, d)
	require.NoError(t, err)
	require.Zero(t, n, "the windows are full")
	var queued int
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM `+b.db.Schema+`.outboxd_tenant_queue`).Scan(&queued))
	require.Equal(t, 2+4+1, queued, "two of big's, four of small's and the scheduled one; not the chained one")

	_, err = newDispatcher(b.db.Pool, sideeffects.Config{Schema: b.db.Schema, Providers: b.cfg.Providers, TenantWeights: map[string]float64{"x": 0}})
	require.ErrorContains(t, err, `tenant "x" has weight 0`)
}

// TestATenantsOwnRate: a rate set for tenant:slow paces its requests for
// every replica (besides its provider's limits), and leaves another
// tenant's alone.
func TestATenantsOwnRate(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	b.cfg.Limits = map[string]float64{"tenant:slow": 4}
	b.start(t)
	var slow, fast []uuid.UUID
	for range 5 {
		slow = append(slow, b.enqueueFor(t, "slow", "/slow"))
		fast = append(fast, b.enqueueFor(t, "fast", "/fast"))
	}
	for _, id := range append(slow, fast...) {
		b.waitFor(t, id, outboxtype.StateConfirmed)
	}
	var first, last time.Time
	for _, d := range b.recv.Deliveries() {
		if d.Path != "/slow" {
			continue
		}
		if first.IsZero() || d.At.Before(first) {
			first = d.At
		}
		if d.At.After(last) {
			last = d.At
		}
	}
	// Four a second: the key's schedule gives five requests times a
	// second apart from first to last. The first may go late (its
	// connection is new) and so nearer the others; unpaced, all five go
	// within a few milliseconds.
	require.GreaterOrEqual(t, last.Sub(first), 500*time.Millisecond, "tenant slow's five requests at 4/s")
	op, err := sideeffects.NewOperator(b.db.Pool, sideeffects.OperatorConfig{Schema: b.db.Schema})
	require.NoError(t, err)
	reports, err := op.Limits(context.Background())
	require.NoError(t, err)
	var granted int64
	for _, r := range reports {
		if r.Key == "tenant:slow" {
			granted = r.Granted
			require.InDelta(t, 4, *r.Rate, 0)
		}
		require.NotEqual(t, "tenant:fast", r.Key, "a tenant without a rate costs no row")
	}
	require.GreaterOrEqual(t, granted, int64(5))
	for _, id := range slow {
		require.Equal(t, 1, b.effect(t, id).Attempts, "waiting for the tenant's rate is not an attempt")
	}
}
