package engine

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/outboxd/outboxd/internal/store"
	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/providers"
)

// Wiring is what NewDispatcher builds a dispatcher from: a
// sideeffects.Config, checked and given its defaults there, put in the
// terms of the parts that use it, as River's client hands each of its
// parts a config of its own.
type Wiring struct {
	Schema    string
	Providers []providers.Provider
	// Workers is each provider queue's number of workers.
	Workers map[string]int
	// River holds the River client's own settings: its timings, logger,
	// middleware and TestOnly. NewDispatcher adds its ID, schema, queues,
	// workers and periodic jobs.
	River river.Config
	// Calls is how the worker calls providers and reports what it did.
	Calls CallSettings
	// Limits are the rate limits and the tenants' windows.
	Limits LimitSettings
	// Upkeep is the sweeper's and the purge's timing.
	Upkeep UpkeepSettings
	// Settings are recorded for operators while the dispatcher runs.
	Settings map[string]any
	// Name begins this process's record (default the host name).
	Name string
	// Retry retries effects by hand's rules, for paced replays: the
	// operator's Retry (package sideeffects), knowing what this process's
	// providers promise.
	Retry func(ctx context.Context, ids []uuid.UUID, opts outboxtype.ActionOpts) ([]outboxtype.Change, error)
}

// CallSettings are the worker's: the in-doubt policies by kind, the retry
// schedule (with its defaults), and where measurements and spans go.
type CallSettings struct {
	InDoubt map[string]providers.InDoubtPolicy
	Retry   outboxtype.RetryPolicy
	// MaxProviderDelay bounds a delay a provider names (Retry-After, a
	// window) before it is obeyed.
	MaxProviderDelay time.Duration
	Metrics          outboxtype.Observer
	Tracer           outboxtype.Tracer
}

// LimitSettings are the limiter's and the tenant feeder's: rates by limit
// key as configured (a provider's name stands for its account), the first
// pause after a 429 that names no delay, and the tenants' windows.
type LimitSettings struct {
	// Shared, when set, keeps the limit keys for every database that
	// names it (SharedLimits).
	Shared *SharedLimits
	Rates  map[string]float64
	// InAnySecond names the keys of Rates held as at most that many
	// requests in any second.
	InAnySecond   []string
	Pause         time.Duration
	TenantWindow  int
	TenantWeights map[string]float64
}

// UpkeepSettings time the maintenance jobs: how often the sweeper runs and
// what it leaves alone, and how long ended effects are kept (0 or less
// keeps them) and how often the purge runs.
type UpkeepSettings struct {
	SweepEvery     time.Duration
	SweepGrace     time.Duration
	Retention      time.Duration
	RetentionEvery time.Duration
}

// heartbeatInterval is how often a running dispatcher refreshes its
// record; destinationsInterval how often it looks whether what its gates
// hold back changed (and records it if so).
const (
	heartbeatInterval    = 30 * time.Second
	destinationsInterval = 2 * time.Second
)

// Dispatcher runs River workers that fire side effects.
type Dispatcher struct {
	// record is this dispatcher's row in outboxd_dispatchers, written
	// when it has settings to record, and its River client's ID.
	record    string
	settings  map[string]any
	heartbeat chan struct{}
	stopOnce  sync.Once
	pool      *pgxpool.Pool
	store     *store.Store
	logger    *slog.Logger

	client  *river.Client[pgx.Tx]
	worker  *Worker
	replays *replayWorker
	intake  *intake
	due     *dueKeeper
}

// limitKeys resolves the configured limits and the providers' published
// ones: the account key of each provider that has one, and every key's
// rate (a provider's name stands for its account).
func limitKeys(ps []providers.Provider, limits map[string]float64) (accounts map[string]string, rates map[string]float64, defaults map[string]float64, err error) {
	accounts, rates, defaults = map[string]string{}, map[string]float64{}, map[string]float64{}
	for _, p := range ps {
		lp, ok := p.(providers.Limited)
		if !ok {
			continue
		}
		if l := lp.Limit(nil); l.Key != "" {
			accounts[p.Name()] = l.Key
			if l.Rate > 0 {
				defaults[l.Key] = l.Rate
			}
		}
	}
	for key, rate := range limits {
		if !strings.Contains(key, ":") {
			acct, ok := accounts[key]
			if !ok {
				return nil, nil, nil, fmt.Errorf("dispatcher: limit %q: the %s provider has no account limit: name its keys (%s:<destination>)", key, key, key)
			}
			key = acct
		}
		rates[key] = rate
	}
	return accounts, rates, defaults, nil
}

// NewDispatcher builds a dispatcher from w (package sideeffects checks a
// Config and wires it); Start runs it.
func NewDispatcher(pool *pgxpool.Pool, w Wiring) (*Dispatcher, error) {
	if w.Retry == nil {
		return nil, errors.New("dispatcher: Wiring.Retry is required (paced replays retry through it)")
	}
	logger := w.River.Logger
	if logger == nil {
		logger = slog.Default()
	}
	st := store.NewStore(w.Schema)
	accounts, rates, defaults, err := limitKeys(w.Providers, w.Limits.Rates)
	if err != nil {
		return nil, err
	}
	lim := newLimiter(pool, st, logger, w.Limits.Pause)
	lim.shared = w.Limits.Shared
	for key, rate := range defaults {
		if _, set := rates[key]; !set {
			lim.ensure(key, rate, false, "default")
		}
	}
	for key, rate := range rates {
		lim.ensure(key, rate, slices.Contains(w.Limits.InAnySecond, key), "config")
	}
	worker := &Worker{
		tenants:       newTenantFeeder(w.Limits.TenantWindow, w.Limits.TenantWeights),
		limits:        lim,
		accountLimits: accounts,
		accountWait:   accountWaitFor(w.River.JobTimeout),
		pool:          pool,
		store:         st,
		providers:     make(map[string]providers.Provider, len(w.Providers)),
		inDoubt:       w.Calls.InDoubt,
		retry:         w.Calls.Retry,
		maxDelay:      w.Calls.MaxProviderDelay,
		logger:        logger,
		metrics:       cmp.Or[outboxtype.Observer](w.Calls.Metrics, noObserver{}),
		tracer:        w.Calls.Tracer,
	}
	queues := make(map[string]river.QueueConfig, len(w.Providers))
	for _, p := range w.Providers {
		name := p.Name()
		worker.providers[name] = p
		if sh, ok := p.(providers.SecretHolder); ok {
			worker.secrets = append(worker.secrets, sh.Secrets()...)
		}
		worker.providerNames = append(worker.providerNames, name)
		queues[name] = river.QueueConfig{MaxWorkers: w.Workers[name]}
	}
	queues[MaintenanceQueue] = river.QueueConfig{MaxWorkers: 1}
	queues[ReplayQueue] = river.QueueConfig{MaxWorkers: replayWorkers}
	workers := river.NewWorkers()
	if err := river.AddWorkerSafely(workers, worker); err != nil {
		return nil, fmt.Errorf("dispatcher: %w", err)
	}
	batches := &batchWorker{w: worker, slots: make(map[string]chan struct{}, len(w.Providers))}
	for name, q := range queues {
		batches.slots[name] = make(chan struct{}, q.MaxWorkers)
	}
	if err := river.AddWorkerSafely[BatchArgs](workers, batches); err != nil {
		return nil, fmt.Errorf("dispatcher: %w", err)
	}
	replays := &replayWorker{pool: pool, store: st, retryEach: w.Retry, logger: logger}
	if err := river.AddWorkerSafely[ReplayArgs](workers, replays); err != nil {
		return nil, fmt.Errorf("dispatcher: %w", err)
	}
	if err := river.AddWorkerSafely[SweepArgs](workers, &sweepWorker{pool: pool, store: st, grace: w.Upkeep.SweepGrace, logger: logger}); err != nil {
		return nil, fmt.Errorf("dispatcher: %w", err)
	}
	periodicJobs := []*river.PeriodicJob{periodic(w.Upkeep.SweepEvery, SweepArgs{})}
	if err := river.AddWorkerSafely[RetentionArgs](workers, &retentionWorker{pool: pool, store: st, retention: w.Upkeep.Retention, logger: logger}); err != nil {
		return nil, fmt.Errorf("dispatcher: %w", err)
	}
	if w.Upkeep.Retention > 0 {
		periodicJobs = append(periodicJobs, periodic(w.Upkeep.RetentionEvery, RetentionArgs{}))
	}
	// Expired idempotency keys (outbox/idempotency) go whatever the
	// effects' retention.
	if err := river.AddWorkerSafely[KeyExpiryArgs](workers, &keyExpiryWorker{pool: pool, store: st, logger: logger}); err != nil {
		return nil, fmt.Errorf("dispatcher: %w", err)
	}
	periodicJobs = append(periodicJobs, periodic(w.Upkeep.RetentionEvery, KeyExpiryArgs{}))
	if err := river.AddWorkerSafely[SummaryArgs](workers, &summaryWorker{pool: pool, store: st, retention: w.Upkeep.Retention}); err != nil {
		return nil, fmt.Errorf("dispatcher: %w", err)
	}
	periodicJobs = append(periodicJobs, periodic(summaryInterval, SummaryArgs{}))
	windows := map[string]time.Duration{}
	for _, p := range w.Providers {
		if w := p.Guarantees().Refirable(); w > 0 {
			windows[p.Name()] = w
		}
	}
	if err := river.AddWorkerSafely[KeyWindowWatchArgs](workers, &keyWindowWorker{pool: pool, store: st, windows: windows}); err != nil {
		return nil, fmt.Errorf("dispatcher: %w", err)
	}
	periodicJobs = append(periodicJobs, periodic(time.Minute, KeyWindowWatchArgs{}))
	// River marks the jobs a process works with its client ID
	// (attempted_by); it is also this process's record in
	// outboxd_dispatchers, so that a job left running names its process.
	record := recordID(w.Name, time.Now())
	rc := w.River
	rc.ID, rc.Schema, rc.Logger = record, w.Schema, logger
	rc.Queues, rc.Workers, rc.PeriodicJobs = queues, workers, periodicJobs
	client, err := river.NewClient(riverpgxv5.New(pool), &rc)
	if err != nil {
		return nil, fmt.Errorf("dispatcher: river client: %w", err)
	}
	// The intake, the chains and the batches insert jobs up to a thousand
	// times a second, and River notifies the fetching workers at most once
	// per FetchCooldown per queue and inserting client: a job inserted
	// just after another waits for the next notified insert or for the
	// fetch poll. Their own insert client notifies every millisecond at
	// most, as the applications' do (outbox.New).
	inserts, err := river.NewClient(riverpgxv5.New(nil), &river.Config{Schema: w.Schema, FetchCooldown: time.Millisecond, Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("dispatcher: river insert client: %w", err)
	}
	worker.client = inserts
	return &Dispatcher{record: record, settings: w.Settings, heartbeat: make(chan struct{}), pool: pool, store: st, logger: logger,
		client: client, worker: worker, replays: replays, intake: &intake{
			pool: pool, store: st, schema: w.Schema, logger: logger, client: inserts,
			tenants: worker.tenants,
		}, due: newDueKeeper(pool, st, logger, worker.providerNames, w.Schema, rc.RescueStuckJobsAfter, w.Calls.Retry.Delay(1))}, nil
}

// Start begins fetching and working dispatch jobs.
func (d *Dispatcher) Start(ctx context.Context) error {
	provs := make([]providers.Provider, 0, len(d.worker.providerNames))
	for _, name := range d.worker.providerNames {
		provs = append(provs, d.worker.providers[name])
	}
	if err := d.store.RecordGuarantees(ctx, d.pool, d.record, provs); err != nil {
		// Operators then apply their own settings, and refuse an unforced
		// retry of a provider they do not know.
		d.logger.Warn("could not record the providers' guarantees for operators", "error", err)
	}
	d.worker.startBatchers()
	d.worker.limits.start(ctx)
	if err := d.client.Start(ctx); err != nil {
		d.worker.stopBatchers()
		d.worker.limits.stopLimiter()
		return err
	}
	d.intake.start()
	d.due.start()
	if d.settings != nil {
		d.announce(ctx)
	}
	return nil
}

// destinations is what this process's providers' gates hold back.
func (d *Dispatcher) destinations() []providers.DestinationState {
	out := []providers.DestinationState{}
	for _, name := range d.worker.providerNames {
		if r, ok := d.worker.providers[name].(providers.DestinationReporter); ok {
			out = append(out, r.Destinations()...)
		}
	}
	return out
}

// recordID names a dispatcher process: host, pid and start time, at most
// River's 100 characters.
func recordID(name string, start time.Time) string {
	if name == "" {
		name, _ = os.Hostname()
		if len(name) > 40 {
			name = name[:40]
		}
	}
	return fmt.Sprintf("%s-%d-%s", name, os.Getpid(), start.UTC().Format("20060102T150405.000Z"))
}

// announce records the dispatcher's settings and refreshes the record
// until Stop or the end of ctx.
func (d *Dispatcher) announce(ctx context.Context) {
	host, _ := os.Hostname()
	if err := d.store.RecordDispatcher(ctx, d.pool, d.record, host, os.Getpid(), d.settings); err != nil {
		d.logger.Warn("could not record this dispatcher's settings", "error", err)
	}
	go func() {
		t := time.NewTicker(heartbeatInterval)
		defer t.Stop()
		// What the gates hold back is written as soon as it changes (looked
		// at every destinationsInterval), not only with the heartbeat: a
		// breaker that opens is what an operator looks for first.
		dt := time.NewTicker(destinationsInterval)
		defer dt.Stop()
		var last []byte
		for {
			select {
			case <-ctx.Done():
				return
			case <-d.heartbeat:
				return
			case <-t.C:
				_ = d.store.DispatcherSeenWith(ctx, d.pool, d.record, false, d.destinations())
			case <-dt.C:
				dests := d.destinations()
				raw, _ := json.Marshal(dests)
				if !bytes.Equal(raw, last) {
					if d.store.DispatcherSeenWith(ctx, d.pool, d.record, false, dests) == nil {
						last = raw
					}
				}
			}
		}
	}()
}

// Stop stops fetching and lets in-flight attempts finish for River's
// SoftStopTimeout (sideeffects.Config.ShutdownTimeout), after which River
// cancels them (its soft stop). If ctx ends first, they are cancelled then (River's StopAndCancel). It
// returns when every worker has returned. A cancelled attempt leaves its
// effect fired, to be re-fired with the same key by this or another
// replica.
func (d *Dispatcher) Stop(ctx context.Context) error {
	// The batchers serve the workers until the last one has returned.
	defer d.worker.stopBatchers()
	defer d.worker.limits.stopLimiter()
	defer d.stopOnce.Do(func() {
		close(d.heartbeat)
		if d.settings != nil {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = d.store.DispatcherSeen(sctx, d.pool, d.record, true)
		}
	})
	d.intake.stopIntake()
	d.due.stopKeeper()
	err := d.client.Stop(ctx)
	if ctx.Err() != nil {
		hard, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		return d.client.StopAndCancel(hard)
	}
	return err
}

// Stopped is closed once the dispatcher has stopped, however the stop
// began (Stop, or the cancellation of Start's context).
func (d *Dispatcher) Stopped() <-chan struct{} { return d.client.Stopped() }

// Limits is what this process knows of the rate limits now: each key's
// rate (as lowered by 429s), pause, and the workers waiting for it here.
func (d *Dispatcher) Limits() []KeyState { return d.worker.limits.states() }
