package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/endpoint"
	"github.com/outboxd/outboxd/providers/endpoint/endpointschema"
	"github.com/outboxd/outboxd/providers/webhook"
	"github.com/outboxd/outboxd/sideeffects"
)

type dispatchResult struct {
	Name      string  `json:"name"`
	N         int     `json:"n"`
	Seconds   float64 `json:"seconds"`
	PerSecond float64 `json:"per_second"`
	// VsRiver is this rate over River's no-op rate with fast settings;
	// VsRiverSame over River's with outboxd's settings. 0 for River itself.
	VsRiver     float64 `json:"vs_river_fast,omitempty"`
	VsRiverSame float64 `json:"vs_river_same_settings,omitempty"`
	// VsWatermill is this rate over the Watermill SQL forwarder's.
	VsWatermill float64 `json:"vs_watermill_forwarder,omitempty"`
	// Updates and HOTUpdates count side_effects updates during an outboxd
	// burn-down, and those that wrote no index entry.
	Updates    int64 `json:"updates,omitempty"`
	HOTUpdates int64 `json:"hot_updates,omitempty"`
	// Keys is the number of ordering keys the effects were spread over (0:
	// unordered), and VsUnordered this rate over the unordered no-op rate.
	Keys        int     `json:"ordering_keys,omitempty"`
	VsUnordered float64 `json:"vs_unordered,omitempty"`
	// VsUntraced is this rate, with tracing on, over the same row's
	// without.
	VsUntraced float64 `json:"vs_untraced,omitempty"`
	// VsIntake is this rate over the unordered no-op rate with jobs
	// inserted by the dispatcher from the intake, as an ordered chain's
	// jobs are: like for like.
	VsIntake float64 `json:"vs_unordered_jobs_by_dispatcher,omitempty"`
	// VsNoRefIndex is this rate, every confirmation writing a provider
	// reference, over the same row's with the provider-reference index
	// dropped: what the search by reference costs dispatch.
	VsNoRefIndex float64 `json:"vs_no_provider_ref_index,omitempty"`
	// VsNoop is this rate over the no-op provider's in the same phase.
	VsNoop float64 `json:"vs_noop_provider,omitempty"`
}

// River's no-op floor with fast settings, as a tuned job queue would run.
const (
	fastWorkers      = 2000
	fastCooldown     = 2 * time.Millisecond
	fastPollInterval = 20 * time.Millisecond
)

// noopProvider acknowledges every effect at once, counting calls; with
// refs, it answers with a reference of its own for each, as Stripe answers
// with the object's id.
// noopName is the no-op provider's name.
const noopName = "noop"

type noopProvider struct {
	calls  atomic.Int64
	onSend func(req providers.Request)
	refs   bool
}

func (p *noopProvider) Name() string                                  { return noopName }
func (p *noopProvider) ValidatePayload(string, json.RawMessage) error { return nil }
func (p *noopProvider) Guarantees() providers.Guarantees {
	return providers.Guarantees{InDoubt: providers.AtLeastOnce}
}

func (p *noopProvider) Send(_ context.Context, req providers.Request) (providers.Result, error) {
	if p.onSend != nil {
		p.onSend(req)
	}
	p.calls.Add(1)
	if p.refs {
		return providers.Result{Ref: "pi_" + req.Key[:24]}, nil
	}
	return providers.Result{}, nil
}

// noopArgs and noopWorker are River's floor: a job that does nothing.
type noopArgs struct{}

func (noopArgs) Kind() string { return "bench.noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
	done atomic.Int64
}

func (w *noopWorker) Work(context.Context, *river.Job[noopArgs]) error {
	w.done.Add(1)
	return nil
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// dispatchThroughput burns down the same number of River no-op jobs and of
// outboxd effects with a no-op provider, with the same River settings; then,
// optionally, effects through the real webhook provider.
func (b *bench) dispatchThroughput(ctx context.Context, withWebhook bool) ([]dispatchResult, error) {
	n := b.s.Effects
	same, err := b.riverNoop(ctx, "River, no-op jobs, outboxd's settings", n, b.s.Workers, b.s.FetchCooldown, b.s.FetchPollInterval)
	if err != nil {
		return nil, fmt.Errorf("river baseline: %w", err)
	}
	fast, err := b.riverNoop(ctx, fmt.Sprintf("River, no-op jobs, fast (%d workers, %s, %s)", fastWorkers, fastCooldown, fastPollInterval),
		n, fastWorkers, fastCooldown, fastPollInterval)
	if err != nil {
		return nil, fmt.Errorf("river baseline: %w", err)
	}
	same.VsRiver = same.PerSecond / fast.PerSecond
	out := []dispatchResult{fast, same}
	if b.s.IntakeOnly {
		// Only the row of effects found in the intake, against River's.
		noop := &noopProvider{}
		r, err := b.burnDownWith(ctx, "outboxd, no-op provider, jobs by dispatcher", n, noop, func() int { return int(noop.calls.Load()) },
			func(ctx context.Context) error { return b.seedIntake(ctx, n, noop.Name(), `{}`) })
		if err != nil {
			return nil, err
		}
		r.VsRiver, r.VsRiverSame = r.PerSecond/fast.PerSecond, r.PerSecond/same.PerSecond
		carried, err := b.carriedBurnDown(ctx, n)
		if err != nil {
			return nil, err
		}
		carried.VsRiver, carried.VsRiverSame, carried.VsIntake = carried.PerSecond/fast.PerSecond, carried.PerSecond/same.PerSecond, carried.PerSecond/r.PerSecond
		return append(out, r, carried), nil
	}
	noop := &noopProvider{}
	ours, err := b.burnDown(ctx, "outboxd, no-op provider", n, noop, `{}`, func() int { return int(noop.calls.Load()) })
	if err != nil {
		return nil, err
	}
	ours.VsRiver, ours.VsRiverSame = ours.PerSecond/fast.PerSecond, ours.PerSecond/same.PerSecond
	traced, err := b.tracedBurnDown(ctx, n)
	if err != nil {
		return nil, err
	}
	traced.VsUntraced = traced.PerSecond / ours.PerSecond
	traced.VsRiver, traced.VsRiverSame = traced.PerSecond/fast.PerSecond, traced.PerSecond/same.PerSecond
	if b.wm != nil {
		fwd, err := b.wm.forward(ctx, n)
		if err != nil {
			return nil, err
		}
		fwd.VsRiver, fwd.VsRiverSame = fwd.PerSecond/fast.PerSecond, fwd.PerSecond/same.PerSecond
		ours.VsWatermill = ours.PerSecond / fwd.PerSecond
		out = append(out, fwd)
	}
	out = append(out, ours, traced)
	withRefs, err := b.refIndexCost(ctx, n)
	if err != nil {
		return nil, err
	}
	for i := range withRefs {
		withRefs[i].VsRiver, withRefs[i].VsRiverSame = withRefs[i].PerSecond/fast.PerSecond, withRefs[i].PerSecond/same.PerSecond
	}
	out = append(out, withRefs...)
	var intake dispatchResult
	if b.s.OrderedKeys > 0 {
		// Unordered effects whose jobs the dispatcher inserts from the
		// intake (outbox.JobsByDispatcher), as it inserts an ordered
		// chain's: the like-for-like baseline of the ordered rows.
		n := b.s.OrderedKeys * b.s.OrderedPerKey
		noop := &noopProvider{}
		intake, err = b.burnDownWith(ctx, "outboxd, no-op provider, jobs by dispatcher", n, noop, func() int { return int(noop.calls.Load()) },
			func(ctx context.Context) error { return b.seedIntake(ctx, n, noop.Name(), `{}`) })
		if err != nil {
			return nil, err
		}
		intake.VsRiver, intake.VsRiverSame, intake.VsUnordered = intake.PerSecond/fast.PerSecond, intake.PerSecond/same.PerSecond, intake.PerSecond/ours.PerSecond
		out = append(out, intake)
		carried, err := b.carriedBurnDown(ctx, n)
		if err != nil {
			return nil, err
		}
		carried.VsRiver, carried.VsRiverSame, carried.VsIntake = carried.PerSecond/fast.PerSecond, carried.PerSecond/same.PerSecond, carried.PerSecond/intake.PerSecond
		out = append(out, carried)
		for _, o := range []struct {
			name    string
			keys, n int
		}{
			{fmt.Sprintf("outboxd, no-op provider, ordered: %d keys x %d", b.s.OrderedKeys, b.s.OrderedPerKey), b.s.OrderedKeys, b.s.OrderedKeys * b.s.OrderedPerKey},
			{"outboxd, no-op provider, ordered: one hot key", 1, b.s.HotKeyEffects},
		} {
			noop := &noopProvider{}
			r, err := b.burnDownWith(ctx, o.name, o.n, noop, func() int { return int(noop.calls.Load()) },
				func(ctx context.Context) error { return b.seedOrdered(ctx, o.n, o.keys, noop.Name(), `{}`) })
			if err != nil {
				return nil, err
			}
			r.Keys, r.VsUnordered, r.VsIntake = o.keys, r.PerSecond/ours.PerSecond, r.PerSecond/intake.PerSecond
			r.VsRiver, r.VsRiverSame = r.PerSecond/fast.PerSecond, r.PerSecond/same.PerSecond
			out = append(out, r)
		}
	}
	if withWebhook && b.s.WebhookEffects > 0 {
		wh, err := b.webhookBurnDown(ctx, false)
		if err != nil {
			return nil, err
		}
		wh.VsRiver, wh.VsRiverSame, wh.VsNoop = wh.PerSecond/fast.PerSecond, wh.PerSecond/same.PerSecond, wh.PerSecond/ours.PerSecond
		out = append(out, wh)
		// The default: webhooks found in the intake, fired from batch
		// jobs, against the no-op provider's effects found the same way.
		whIntake, err := b.webhookBurnDown(ctx, true)
		if err != nil {
			return nil, err
		}
		whIntake.VsRiver, whIntake.VsRiverSame = whIntake.PerSecond/fast.PerSecond, whIntake.PerSecond/same.PerSecond
		if intake.PerSecond > 0 {
			whIntake.VsNoop = whIntake.PerSecond / intake.PerSecond
		}
		out = append(out, whIntake)
		ep, err := b.endpointBurnDown(ctx)
		if err != nil {
			return nil, err
		}
		ep.VsRiver, ep.VsRiverSame = ep.PerSecond/fast.PerSecond, ep.PerSecond/same.PerSecond
		out = append(out, ep)
	}
	return out, nil
}

// refIndexCost burns down n effects whose provider answers with a
// reference, with side_effects_provider_ref_idx dropped and as the
// migrations leave it, alternating twice (without, with, without, with) so
// that a checkpoint or the cache's state weighs on both alike, and reports
// each row's rate over both of its runs.
func (b *bench) refIndexCost(ctx context.Context, n int) ([]dispatchResult, error) {
	const index = "side_effects_provider_ref_idx"
	var def string
	if err := b.pool.QueryRow(ctx, "SELECT pg_get_indexdef($1::regclass)", b.schema+"."+index).Scan(&def); err != nil {
		return nil, fmt.Errorf("%s: %w", index, err)
	}
	without := dispatchResult{Name: "outboxd, no-op provider answering a reference, no reference index"}
	with := dispatchResult{Name: "outboxd, no-op provider answering a reference (as Stripe does)"}
	for range 2 {
		for _, r := range []*dispatchResult{&without, &with} {
			if r == &without {
				if _, err := b.pool.Exec(ctx, "DROP INDEX "+b.schema+"."+index); err != nil {
					return nil, err
				}
			}
			noop := &noopProvider{refs: true}
			got, err := b.burnDown(ctx, r.Name, n, noop, `{}`, func() int { return int(noop.calls.Load()) })
			if r == &without {
				if _, rerr := b.pool.Exec(context.WithoutCancel(ctx), def); rerr != nil && err == nil {
					err = rerr
				}
			}
			if err != nil {
				return nil, err
			}
			r.N += got.N
			r.Seconds += got.Seconds
			r.Updates += got.Updates
			r.HOTUpdates += got.HOTUpdates
		}
	}
	for _, r := range []*dispatchResult{&without, &with} {
		r.PerSecond = float64(r.N) / r.Seconds
	}
	with.VsNoRefIndex = with.PerSecond / without.PerSecond
	return []dispatchResult{without, with}, nil
}

func (b *bench) riverNoop(ctx context.Context, name string, n, maxWorkers int, cooldown, poll time.Duration) (dispatchResult, error) {
	w := &noopWorker{}
	workers := river.NewWorkers()
	river.AddWorker(workers, w)
	client, err := river.NewClient(riverpgxv5.New(b.pool), &river.Config{
		Schema:            b.schema,
		Queues:            map[string]river.QueueConfig{"noop_river": {MaxWorkers: maxWorkers}},
		Workers:           workers,
		FetchCooldown:     cooldown,
		FetchPollInterval: poll,
		Logger:            quiet,
	})
	if err != nil {
		return dispatchResult{}, err
	}
	for i := 0; i < n; i += 5000 {
		params := make([]river.InsertManyParams, 0, 5000)
		for j := i; j < min(i+5000, n); j++ {
			params = append(params, river.InsertManyParams{Args: noopArgs{}, InsertOpts: &river.InsertOpts{Queue: "noop_river"}})
		}
		if _, err := client.InsertMany(ctx, params); err != nil {
			return dispatchResult{}, err
		}
	}
	done := make(chan struct{})
	go progress(name, n, func() int { return int(w.done.Load()) }, done)
	start := time.Now()
	if err := client.Start(ctx); err != nil {
		return dispatchResult{}, err
	}
	err = b.waitFor(ctx, func() bool { return int(w.done.Load()) >= n },
		"SELECT count(*) FROM "+b.schema+".river_job WHERE kind = 'bench.noop' AND state <> 'completed'")
	elapsed := time.Since(start)
	close(done)
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = client.Stop(stopCtx)
	if err != nil {
		return dispatchResult{}, err
	}
	_, err = b.pool.Exec(ctx, "TRUNCATE "+b.schema+".river_job")
	return dispatchResult{Name: name, N: n, Seconds: elapsed.Seconds(), PerSecond: float64(n) / elapsed.Seconds()}, err
}

// burnDown seeds n effects of provider p with payload and their jobs, then
// dispatches them all and reports the rate.
func (b *bench) burnDown(ctx context.Context, name string, n int, p providers.Provider, payload string, current func() int) (dispatchResult, error) {
	return b.burnDownWith(ctx, name, n, p, current, func(ctx context.Context) error { return b.seedEffects(ctx, n, p.Name(), payload) })
}

// burnDownWith seeds with seed, then dispatches the n effects seeded and
// reports the rate.
func (b *bench) burnDownWith(ctx context.Context, name string, n int, p providers.Provider, current func() int, seed func(context.Context) error) (dispatchResult, error) {
	if err := seed(ctx); err != nil {
		return dispatchResult{}, err
	}
	d, err := b.dispatcher(p)
	if err != nil {
		return dispatchResult{}, err
	}
	if _, err := b.pool.Exec(ctx, "SELECT pg_stat_reset_single_table_counters($1::regclass)", b.schema+".side_effects"); err != nil {
		return dispatchResult{}, err
	}
	done := make(chan struct{})
	go progress(name, n, current, done)
	start := time.Now()
	if err := d.Start(ctx); err != nil {
		return dispatchResult{}, err
	}
	err = b.waitFor(ctx, func() bool { return current() >= n },
		"SELECT count(*) FROM "+b.schema+".side_effects WHERE phase = 'live'")
	elapsed := time.Since(start)
	close(done)
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = d.Stop(stopCtx)
	if err != nil {
		return dispatchResult{}, err
	}
	var confirmed int
	if err := b.pool.QueryRow(ctx, "SELECT count(*) FROM "+b.schema+".side_effects WHERE state = 'confirmed' AND (kind = $1 OR kind LIKE $2)",
		benchKind, endpointschema.KindPrefix+"%").Scan(&confirmed); err != nil {
		return dispatchResult{}, err
	}
	if confirmed != n {
		return dispatchResult{}, fmt.Errorf("%s: %d of %d effects confirmed", name, confirmed, n)
	}
	upd, hot, err := b.updates(ctx, 2*int64(n))
	if err != nil {
		return dispatchResult{}, err
	}
	if err := b.clear(ctx); err != nil {
		return dispatchResult{}, err
	}
	return dispatchResult{Name: name, N: n, Seconds: elapsed.Seconds(), PerSecond: float64(n) / elapsed.Seconds(),
		Updates: upd, HOTUpdates: hot}, nil
}

// updates reads how many updates of side_effects Postgres counted since the
// counters were reset, and how many were HOT. An idle backend reports its
// counts up to 10 seconds after its last transaction, and one that exits
// reports them as it goes: so the pool's connections are closed first (the
// next statement opens new ones), and it waits at most 15s for at least
// want updates to be counted.
func (b *bench) updates(ctx context.Context, want int64) (all, hot int64, err error) {
	b.pool.Reset()
	deadline := time.Now().Add(15 * time.Second)
	for {
		err = b.pool.QueryRow(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables
			WHERE schemaname = $1 AND relname = 'side_effects'`, b.schema).Scan(&all, &hot)
		if err != nil || all >= want || time.Now().After(deadline) {
			return all, hot, err
		}
		select {
		case <-ctx.Done():
			return all, hot, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (b *bench) dispatcher(p providers.Provider) (*sideeffects.Dispatcher, error) {
	cfg := b.dispatcherConfig(p)
	if b.traced != nil {
		cfg.Tracer = b.traced.tracer
	}
	return sideeffects.NewDispatcher(b.pool, cfg)
}

// tracedBurnDown is the no-op burn-down with tracing on: each event
// carries a traceparent, as one enqueued in a traced request does, and
// each dispatch reads it and starts its spans.
func (b *bench) tracedBurnDown(ctx context.Context, n int) (dispatchResult, error) {
	b.traced = newBenchTracing()
	defer func() {
		_ = b.traced.tp.Shutdown(context.Background())
		b.traced = nil
	}()
	noop := &noopProvider{}
	return b.burnDownWith(ctx, "outboxd, no-op provider, traced (OpenTelemetry SDK, every trace sampled)", n, noop,
		func() int { return int(noop.calls.Load()) },
		func(ctx context.Context) error {
			if err := b.seedEffects(ctx, n, noop.Name(), `{}`); err != nil {
				return err
			}
			_, err := b.pool.Exec(ctx, `UPDATE `+b.schema+`.outbox_events
				SET traceparent = '00-' || md5(id::text) || '-' || substr(md5(id::text || 's'), 1, 16) || '-01'`)
			if err != nil {
				return err
			}
			return b.vacuum(ctx)
		})
}

func (b *bench) dispatcherConfig(p providers.Provider) sideeffects.Config {
	return sideeffects.Config{
		Schema:            b.schema,
		Providers:         []providers.Provider{p},
		Concurrency:       map[string]int{p.Name(): b.s.Workers},
		FetchCooldown:     b.s.FetchCooldown,
		FetchPollInterval: b.s.FetchPollInterval,
		Logger:            quiet,
	}
}

// localReceiver serves 204 to every POST on a loopback address and counts
// them; stop closes it.
func localReceiver() (addr string, received *atomic.Int64, stop func(), err error) {
	received = new(atomic.Int64)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, nil, err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		received.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return ln.Addr().String(), received, func() { _ = srv.Close() }, nil
}

var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}

// webhookBurnDown burns down webhooks to one local receiver, each with its
// own River job or, fromIntake, found in the intake as the default enqueue
// leaves them (fired from batch jobs).
func (b *bench) webhookBurnDown(ctx context.Context, fromIntake bool) (dispatchResult, error) {
	addr, received, stop, err := localReceiver()
	if err != nil {
		return dispatchResult{}, err
	}
	defer stop()
	p, err := webhook.New(webhook.Config{
		Secret:          "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
		AllowedNetworks: loopback,
		MaxPerHost:      b.s.WebhookMaxPerHost,
	})
	if err != nil {
		return dispatchResult{}, err
	}
	payload := `{"url": "http://` + addr + `/hook", "body": {"type": "order.paid", "order": "ord_42"}}`
	if fromIntake {
		n := b.s.WebhookEffects
		return b.burnDownWith(ctx, "outboxd, webhook provider, jobs by dispatcher", n, p, func() int { return int(received.Load()) },
			func(ctx context.Context) error { return b.seedIntake(ctx, n, p.Name(), payload) })
	}
	return b.burnDown(ctx, "outboxd, webhook provider", b.s.WebhookEffects, p, payload, func() int { return int(received.Load()) })
}

// endpointBurnDown is the webhook row's burn-down delivered to one
// registered endpoint at the same kind of receiver: each delivery reads
// its endpoint, opens its sealed secret and builds the body from its
// event.
func (b *bench) endpointBurnDown(ctx context.Context) (dispatchResult, error) {
	addr, received, stop, err := localReceiver()
	if err != nil {
		return dispatchResult{}, err
	}
	defer stop()
	key, err := endpoint.ParseKey(endpoint.NewKey())
	if err != nil {
		return dispatchResult{}, err
	}
	reg, err := endpoint.NewRegistry(endpoint.RegistryConfig{Schema: b.schema, Key: key, AllowedNetworks: loopback})
	if err != nil {
		return dispatchResult{}, err
	}
	ep, _, err := reg.Create(ctx, b.pool, endpoint.Endpoint{URL: "http://" + addr + "/hook", EventTypes: []string{"*"}},
		endpoint.Change{Actor: "outboxbench"})
	if err != nil {
		return dispatchResult{}, err
	}
	p, err := endpoint.New(endpoint.Config{DB: b.pool, Schema: b.schema, Key: key,
		Webhook: webhook.Config{AllowedNetworks: loopback, MaxPerHost: b.s.WebhookMaxPerHost}})
	if err != nil {
		return dispatchResult{}, err
	}
	n := b.s.WebhookEffects
	return b.burnDownWith(ctx, "outboxd, endpoint provider (one endpoint)", n, p, func() int { return int(received.Load()) },
		func(ctx context.Context) error {
			return b.seedEffectsOf(ctx, n, endpointschema.KindPrefix+ep.ID.String(), p.Name(), `{"endpoint_id": "`+ep.ID.String()+`"}`)
		})
}

// seedEffects writes n events and effects with SQL and their dispatch jobs
// with River, outside the timed part. Each effect's id is derived from its
// key (outboxd_effect_id), as Enqueue and outboxd_enqueue write it: a row
// with another id is also indexed by its key (side_effects_other_id_key_idx),
// a SHA-256 and an index entry at each update that is not HOT.
func (b *bench) seedEffects(ctx context.Context, n int, provider, payload string) error {
	return b.seedEffectsOf(ctx, n, benchKind, provider, payload)
}

// benchKind is the kind of the effects the burn-downs seed; an endpoint's
// deliveries are kind endpoint:<id>.
const benchKind = "bench.effect"

// seedEffectsOf is seedEffects with effects of kind.
func (b *bench) seedEffectsOf(ctx context.Context, n int, kind, provider, payload string) error {
	rows, err := b.pool.Query(ctx, `
WITH ev AS (
	INSERT INTO `+b.schema+`.outbox_events (id, event_type, payload)
	SELECT gen_random_uuid(), 'bench', '{"order": "ord_42"}' FROM generate_series(1, $1)
	RETURNING id)
INSERT INTO `+b.schema+`.side_effects (id, source_id, kind, provider, payload)
SELECT `+b.schema+`.outboxd_effect_id(id, $4), id, $4, $2, $3::jsonb FROM ev
RETURNING id`, n, provider, payload, kind)
	if err != nil {
		return err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return err
	}
	client, err := river.NewClient(riverpgxv5.New(b.pool), &river.Config{Schema: b.schema, Logger: quiet})
	if err != nil {
		return err
	}
	for i := 0; i < len(ids); i += 5000 {
		params := make([]river.InsertManyParams, 0, 5000)
		for _, id := range ids[i:min(i+5000, len(ids))] {
			params = append(params, sideeffects.JobParams(id, provider, nil))
		}
		if _, err := client.InsertMany(ctx, params); err != nil {
			return err
		}
	}
	return b.vacuum(ctx)
}

// seedIntake writes n events and effects queued in the intake, as
// outbox.JobsByDispatcher does, outside the timed part; the dispatcher
// inserts their jobs.
func (b *bench) seedIntake(ctx context.Context, n int, provider, payload string) error {
	_, err := b.pool.Exec(ctx, `
WITH ev AS (
	INSERT INTO `+b.schema+`.outbox_events (id, event_type, payload)
	SELECT gen_random_uuid(), 'bench', '{}' FROM generate_series(1, $1)
	RETURNING id),
eff AS (
	INSERT INTO `+b.schema+`.side_effects (id, source_id, kind, provider, payload)
	SELECT `+b.schema+`.outboxd_effect_id(id, 'bench.effect'), id, 'bench.effect', $2, $3::jsonb FROM ev
	RETURNING id, provider)
INSERT INTO `+b.schema+`.outbox_intake (effect_id, provider) SELECT id, provider FROM eff`, n, provider, payload)
	if err != nil {
		return err
	}
	return b.seedCompletedJobs(ctx, n, provider)
}

// carriedBurnDown burns down n no-op effects that their events carry
// (outbox.EffectsByDispatcher): the dispatcher writes their rows as it
// takes the events, then dispatches them as those from the intake.
func (b *bench) carriedBurnDown(ctx context.Context, n int) (dispatchResult, error) {
	noop := &noopProvider{}
	return b.burnDownWith(ctx, "outboxd, no-op provider, effects by dispatcher", n, noop, func() int { return int(noop.calls.Load()) },
		func(ctx context.Context) error { return b.seedCarried(ctx, n, noop.Name(), `{}`) })
}

// seedCarried writes n events each carrying one effect, and their rows
// in outbox_event_intake, as outbox.EffectsByDispatcher does, outside the
// timed part.
func (b *bench) seedCarried(ctx context.Context, n int, provider, payload string) error {
	_, err := b.pool.Exec(ctx, `
WITH ev AS (
	INSERT INTO `+b.schema+`.outbox_events (id, event_type, payload, effects)
	SELECT gen_random_uuid(), 'bench', '{}', jsonb_build_array(jsonb_build_object('kind', 'bench.effect', 'provider', $2::text, 'payload', $3::jsonb))
	FROM generate_series(1, $1)
	RETURNING id)
INSERT INTO `+b.schema+`.outbox_event_intake (event_id) SELECT id FROM ev`, n, provider, payload)
	if err != nil {
		return err
	}
	return b.seedCompletedJobs(ctx, n, provider)
}

// seedOrdered writes n events and effects spread round-robin over keys
// ordering keys, outside the timed part. Like an application's, the rows
// get no job: the dispatcher gives each chain's first effect one, and the
// next when it is confirmed.
func (b *bench) seedOrdered(ctx context.Context, n, keys int, provider, payload string) error {
	_, err := b.pool.Exec(ctx, `
WITH ev AS (
	INSERT INTO `+b.schema+`.outbox_events (id, event_type, payload)
	SELECT gen_random_uuid(), 'bench', '{}' FROM generate_series(1, $1)
	RETURNING id),
numbered AS (SELECT id, row_number() OVER () AS i FROM ev)
INSERT INTO `+b.schema+`.side_effects (id, source_id, kind, provider, payload, ordering_key)
SELECT `+b.schema+`.outboxd_effect_id(id, 'bench.effect'), id, 'bench.effect', $2, $3::jsonb, 'bench-' || (i % $4) FROM numbered ORDER BY i`, n, provider, payload, keys)
	if err != nil {
		return err
	}
	return b.seedCompletedJobs(ctx, n, provider)
}

// seedCompletedJobs leaves River's job table as River leaves it, with the
// completed jobs of the last hour (the burn-down just before left n), and
// vacuums. Without them the table would be analysed empty (autovacuum is
// off), and the planner would join River's fetch to it with sequential
// scans as the dispatcher inserts jobs: fetches of seconds, measured. The
// unordered row has its n jobs in the table when it is analysed.
func (b *bench) seedCompletedJobs(ctx context.Context, n int, provider string) error {
	if _, err := b.pool.Exec(ctx, `
INSERT INTO `+b.schema+`.river_job (state, attempt, max_attempts, attempted_at, created_at, finalized_at, scheduled_at,
	args, attempted_by, kind, queue)
SELECT 'completed', 1, 25, t, t, t, t, jsonb_build_object('effect_id', gen_random_uuid()), ARRAY['bench'], $2, $3
FROM (SELECT now() - random() * interval '1 minute' AS t FROM generate_series(1, $1)) s`, n, sideeffects.JobKind, provider); err != nil {
		return err
	}
	return b.vacuum(ctx)
}

// waitFor waits until sent reports every call made (in process, so that
// the benchmark's own polling does not load Postgres during the run), then
// polls a count query until it returns zero.
func (b *bench) waitFor(ctx context.Context, sent func() bool, countSQL string) error {
	deadline := time.Now().Add(10 * time.Minute)
	for !sent() {
		if time.Now().After(deadline) {
			return errors.New("not every call made after 10 minutes")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	for {
		var left int
		if err := b.pool.QueryRow(ctx, countSQL).Scan(&left); err != nil {
			return err
		}
		if left == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d left after 10 minutes", left)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}
