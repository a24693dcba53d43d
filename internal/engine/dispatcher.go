package engine

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/pgschema"
	"github.com/outboxd/outboxd/providers"
)

// Defaults for Config's zero values. Together they bound crash recovery: an
// effect left fired by a killed process is rescued by River after
// RescueAfter, noticed within River's 30s rescuer interval, and re-fired
// after the first retry delay, about 3 minutes in all with the defaults; a
// dispatcher that starts later rescues such a job within seconds.
const (
	// DefaultConcurrency is high because most workers wait: on the shared
	// claim and confirm statements (larger batches are cheaper per effect)
	// or on a provider. Measured in docs/performance.md.
	DefaultConcurrency = 400
	DefaultJobTimeout  = time.Minute
	DefaultRescueAfter = 2 * time.Minute
	// DefaultShutdownTimeout is how long Stop lets in-flight calls finish.
	DefaultShutdownTimeout = 30 * time.Second
	// DefaultFetchCooldown and DefaultFetchPollInterval are tighter than
	// River's (100ms, 1s), chosen by measurement (docs/performance.md): an
	// effect is usually fired within a few milliseconds of its commit, and
	// within the poll interval when its insert notification was coalesced
	// with another.
	DefaultFetchCooldown     = 5 * time.Millisecond
	DefaultFetchPollInterval = 100 * time.Millisecond
)

// Config configures a Dispatcher. Its fields are documented once, on
// sideeffects.Config, its public face, which has the same fields in the
// same order and is converted to it (the conversion stops compiling if
// the two drift apart).
type Config struct {
	Schema                string
	Providers             []providers.Provider
	Concurrency           map[string]int
	InDoubt               map[string]providers.InDoubtPolicy
	Retry                 outboxtype.RetryPolicy
	JobTimeout            time.Duration
	ShutdownTimeout       time.Duration
	RescueAfter           time.Duration
	FetchCooldown         time.Duration
	FetchPollInterval     time.Duration
	SweepInterval         time.Duration
	SweepGrace            time.Duration
	Retention             time.Duration
	RetentionInterval     time.Duration
	CompletedJobRetention time.Duration
	Limits                map[string]float64
	LimitPause            time.Duration
	TenantWindow          int
	TenantWeights         map[string]float64
	Metrics               outboxtype.Observer
	Tracer                outboxtype.Tracer
	RiverMiddleware       []rivertype.Middleware
	Logger                *slog.Logger
	Settings              map[string]any
	TestOnly              bool
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
	store     *Store
	logger    *slog.Logger

	client  *river.Client[pgx.Tx]
	worker  *Worker
	replays *replayWorker
	intake  *intake
}

// withDefaults fills in the zero fields of cfg, as River's Config does.
func (cfg Config) withDefaults() Config {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.JobTimeout = cmp.Or(cfg.JobTimeout, DefaultJobTimeout)
	cfg.RescueAfter = cmp.Or(cfg.RescueAfter, DefaultRescueAfter)
	cfg.ShutdownTimeout = cmp.Or(cfg.ShutdownTimeout, DefaultShutdownTimeout)
	cfg.FetchCooldown = cmp.Or(cfg.FetchCooldown, DefaultFetchCooldown)
	cfg.FetchPollInterval = cmp.Or(cfg.FetchPollInterval, DefaultFetchPollInterval)
	cfg.SweepInterval = cmp.Or(cfg.SweepInterval, DefaultSweepInterval)
	cfg.SweepGrace = cmp.Or(cfg.SweepGrace, DefaultSweepGrace)
	cfg.Retention = cmp.Or(cfg.Retention, DefaultRetention)
	cfg.RetentionInterval = cmp.Or(cfg.RetentionInterval, DefaultRetentionInterval)
	cfg.CompletedJobRetention = cmp.Or(cfg.CompletedJobRetention, DefaultCompletedJobRetention)
	cfg.Retry = cfg.Retry.WithDefaults()
	cfg.LimitPause = cmp.Or(cfg.LimitPause, DefaultLimitPause)
	cfg.TenantWindow = cmp.Or(cfg.TenantWindow, DefaultTenantWindow)
	return cfg
}

// validate checks cfg after withDefaults, naming the setting at fault; the
// checks run in a fixed order, so the same config always reports the same
// error.
func (cfg Config) validate() error {
	if err := pgschema.Check(cfg.Schema); err != nil {
		return fmt.Errorf("dispatcher: Schema: %w", err)
	}
	if len(cfg.Providers) == 0 {
		return errors.New("dispatcher: no providers configured")
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"job timeout", cfg.JobTimeout}, {"rescue-after", cfg.RescueAfter}, {"shutdown timeout", cfg.ShutdownTimeout},
		{"fetch cooldown", cfg.FetchCooldown}, {"fetch poll interval", cfg.FetchPollInterval}, {"sweep interval", cfg.SweepInterval},
		{"sweep grace", cfg.SweepGrace}, {"retention interval", cfg.RetentionInterval}, {"retry base delay", cfg.Retry.BaseDelay},
		{"retry max delay", cfg.Retry.MaxDelay}, {"completed job retention", cfg.CompletedJobRetention}} {
		if d.v < 0 {
			return fmt.Errorf("dispatcher: %s is %s: it must not be negative", d.name, d.v)
		}
	}
	if cfg.Retry.MaxAttempts < 0 {
		return fmt.Errorf("dispatcher: retry max attempts is %d: it must not be negative", cfg.Retry.MaxAttempts)
	}
	if cfg.SweepInterval < time.Second {
		return fmt.Errorf("dispatcher: sweep interval is %s: it must be at least 1s", cfg.SweepInterval)
	}
	if cfg.Retry.MaxDelay < cfg.Retry.BaseDelay {
		return fmt.Errorf("dispatcher: retry max delay (%s) must not be shorter than the retry base delay (%s)", cfg.Retry.MaxDelay, cfg.Retry.BaseDelay)
	}
	if cfg.RescueAfter <= cfg.JobTimeout {
		return fmt.Errorf("dispatcher: rescue-after (%s) must exceed job-timeout (%s)", cfg.RescueAfter, cfg.JobTimeout)
	}
	seen := map[string]bool{}
	for _, p := range cfg.Providers {
		name := p.Name()
		if seen[name] {
			return fmt.Errorf("dispatcher: provider %q configured twice", name)
		}
		seen[name] = true
		if n := cfg.Concurrency[name]; n < 0 {
			return fmt.Errorf("dispatcher: concurrency for %q must be positive, got %d", name, n)
		}
		if t, ok := p.(providers.Timed); ok && cfg.JobTimeout <= t.Timeout() {
			return fmt.Errorf("dispatcher: job timeout (%s) must exceed the %s provider's timeout (%s): the job would be cancelled before the call could time out and report why", cfg.JobTimeout, name, t.Timeout())
		}
		g := p.Guarantees()
		if g.KeyWindow < 0 || g.KeyWindowMargin < 0 || (g.KeyWindow > 0 && g.KeyWindow <= g.KeyWindowMargin) {
			return fmt.Errorf("dispatcher: the %s key window (%s) must exceed its margin (%s): no retry could ever be made", name, g.KeyWindow, g.KeyWindowMargin)
		}
		if span := retrySpan(cfg.Retry, cfg.JobTimeout); g.WindowCoversRetries && g.KeyWindow > 0 && g.KeyWindow-g.KeyWindowMargin < span {
			return fmt.Errorf("dispatcher: the %s key window (%s, less its %s margin) is shorter than the retry schedule (%d attempts, up to %s with calls): make the window at least %s, or retry less", name, g.KeyWindow, g.KeyWindowMargin, cfg.Retry.WithDefaults().MaxAttempts, span, span+g.KeyWindowMargin)
		}
		if cfg.Retention > 0 && g.KeyWindow > 0 && cfg.Retention <= g.KeyWindow {
			return fmt.Errorf("dispatcher: retention (%s) must exceed the %s key window (%s): a purged effect no longer deduplicates", cfg.Retention, name, g.KeyWindow)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Concurrency)) {
		if !seen[name] {
			return fmt.Errorf("dispatcher: concurrency set for unknown provider %q", name)
		}
	}
	if cfg.LimitPause < 0 {
		return fmt.Errorf("dispatcher: limit pause is %s: it must not be negative", cfg.LimitPause)
	}
	if cfg.TenantWindow < 0 {
		return fmt.Errorf("dispatcher: tenant window is %d: it must be positive", cfg.TenantWindow)
	}
	for _, t := range slices.Sorted(maps.Keys(cfg.TenantWeights)) {
		if w := cfg.TenantWeights[t]; !(w > 0) || math.IsInf(w, 0) {
			return fmt.Errorf("dispatcher: tenant %q has weight %g: a weight is a positive number", t, w)
		}
	}
	for _, key := range slices.Sorted(maps.Keys(cfg.Limits)) {
		if err := checkLimit(key, cfg.Limits[key], seen); err != nil {
			return err
		}
	}
	return nil
}

// checkLimit checks one configured limit: a positive rate, for a provider
// this process has (by name, or a key that starts with "<provider>:").
func checkLimit(key string, rate float64, providers map[string]bool) error {
	name, rest, _ := strings.Cut(key, ":")
	switch {
	case name+":" == TenantLimitPrefix && rest != "" && (rate > 0) && !math.IsInf(rate, 0):
		return nil
	case !providers[name]:
		return fmt.Errorf("dispatcher: limit %q: no provider %q is configured: name a provider's account (stripe) or a key such as webhook:api.partner.example", key, name)
	case !(rate > 0) || math.IsInf(rate, 0):
		return fmt.Errorf("dispatcher: limit %q: rate %v: it must be a positive number of requests a second", key, rate)
	}
	return nil
}

// limitKeys resolves cfg's limits and the providers' published ones: the
// account key of each provider that has one, and every key's rate (a
// provider's name stands for its account).
func limitKeys(cfg Config) (accounts map[string]string, rates map[string]float64, defaults map[string]float64, err error) {
	accounts, rates, defaults = map[string]string{}, map[string]float64{}, map[string]float64{}
	for _, p := range cfg.Providers {
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
	for key, rate := range cfg.Limits {
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

// NewDispatcher validates cfg and builds a dispatcher; Start runs it.
func NewDispatcher(pool *pgxpool.Pool, cfg Config) (*Dispatcher, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	store := NewStore(cfg.Schema)
	accounts, rates, defaults, err := limitKeys(cfg)
	if err != nil {
		return nil, err
	}
	lim := newLimiter(pool, store, cfg.Logger, cfg.LimitPause)
	for key, rate := range defaults {
		if _, set := rates[key]; !set {
			lim.ensure(key, rate, "default")
		}
	}
	for key, rate := range rates {
		lim.ensure(key, rate, "config")
	}
	w := &Worker{
		tenants:       newTenantFeeder(cfg.TenantWindow, cfg.TenantWeights),
		limits:        lim,
		accountLimits: accounts,
		accountWait:   accountWaitFor(cfg.JobTimeout),
		pool:          pool,
		store:         store,
		providers:     make(map[string]providers.Provider, len(cfg.Providers)),
		inDoubt:       cfg.InDoubt,
		retry:         cfg.Retry,
		logger:        cfg.Logger,
		metrics:       cmp.Or[outboxtype.Observer](cfg.Metrics, noObserver{}),
		tracer:        cfg.Tracer,
	}
	queues := make(map[string]river.QueueConfig, len(cfg.Providers))
	for _, p := range cfg.Providers {
		name := p.Name()
		w.providers[name] = p
		if sh, ok := p.(providers.SecretHolder); ok {
			w.secrets = append(w.secrets, sh.Secrets()...)
		}
		w.providerNames = append(w.providerNames, name)
		queues[name] = river.QueueConfig{MaxWorkers: cmp.Or(cfg.Concurrency[name], DefaultConcurrency)}
	}
	queues[MaintenanceQueue] = river.QueueConfig{MaxWorkers: 1}
	queues[ReplayQueue] = river.QueueConfig{MaxWorkers: replayWorkers}
	// Paced replays retry through an Operator that knows what this
	// process's providers promise, as outboxctl's does from the flags.
	guarantees := make(map[string]providers.Guarantees, len(cfg.Providers))
	for _, p := range cfg.Providers {
		guarantees[p.Name()] = p.Guarantees()
	}
	replayOp := &Operator{pool: pool, store: store, cfg: OperatorConfig{Schema: cfg.Schema, Guarantees: guarantees, InDoubt: cfg.InDoubt}}
	workers := river.NewWorkers()
	if err := river.AddWorkerSafely(workers, w); err != nil {
		return nil, fmt.Errorf("dispatcher: %w", err)
	}
	batches := &batchWorker{w: w, slots: make(map[string]chan struct{}, len(cfg.Providers))}
	for name, q := range queues {
		batches.slots[name] = make(chan struct{}, q.MaxWorkers)
	}
	if err := river.AddWorkerSafely[BatchArgs](workers, batches); err != nil {
		return nil, fmt.Errorf("dispatcher: %w", err)
	}
	replays := &replayWorker{pool: pool, store: store, op: replayOp, logger: cfg.Logger}
	if err := river.AddWorkerSafely[ReplayArgs](workers, replays); err != nil {
		return nil, fmt.Errorf("dispatcher: %w", err)
	}
	if err := river.AddWorkerSafely[SweepArgs](workers, &sweepWorker{pool: pool, store: store, grace: cfg.SweepGrace, logger: cfg.Logger}); err != nil {
		return nil, fmt.Errorf("dispatcher: %w", err)
	}
	periodicJobs := []*river.PeriodicJob{periodic(cfg.SweepInterval, SweepArgs{})}
	if err := river.AddWorkerSafely[RetentionArgs](workers, &retentionWorker{pool: pool, store: store, retention: cfg.Retention, logger: cfg.Logger}); err != nil {
		return nil, fmt.Errorf("dispatcher: %w", err)
	}
	if cfg.Retention > 0 {
		periodicJobs = append(periodicJobs, periodic(cfg.RetentionInterval, RetentionArgs{}))
	}
	// Expired idempotency keys (outbox/idempotency) go whatever the
	// effects' retention.
	if err := river.AddWorkerSafely[KeyExpiryArgs](workers, &keyExpiryWorker{pool: pool, store: store, logger: cfg.Logger}); err != nil {
		return nil, fmt.Errorf("dispatcher: %w", err)
	}
	periodicJobs = append(periodicJobs, periodic(cfg.RetentionInterval, KeyExpiryArgs{}))
	if err := river.AddWorkerSafely[SummaryArgs](workers, &summaryWorker{pool: pool, store: store, retention: cfg.Retention}); err != nil {
		return nil, fmt.Errorf("dispatcher: %w", err)
	}
	periodicJobs = append(periodicJobs, periodic(summaryInterval, SummaryArgs{}))
	windows := map[string]time.Duration{}
	for _, p := range cfg.Providers {
		if g := p.Guarantees(); g.KeyWindow > g.KeyWindowMargin {
			windows[p.Name()] = g.KeyWindow - g.KeyWindowMargin
		}
	}
	if err := river.AddWorkerSafely[KeyWindowWatchArgs](workers, &keyWindowWorker{pool: pool, store: store, windows: windows}); err != nil {
		return nil, fmt.Errorf("dispatcher: %w", err)
	}
	periodicJobs = append(periodicJobs, periodic(time.Minute, KeyWindowWatchArgs{}))
	// River marks the jobs a process works with its client ID
	// (attempted_by); it is also this process's record in
	// outboxd_dispatchers, so that a job left running names its process.
	record := recordID()
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		ID:                   record,
		Schema:               cfg.Schema,
		Queues:               queues,
		Workers:              workers,
		JobTimeout:           cfg.JobTimeout,
		RescueStuckJobsAfter: cfg.RescueAfter,
		// Cancelled and discarded jobs keep River's default (24h): each
		// marks an effect an operator may be looking at.
		CompletedJobRetentionPeriod: cfg.CompletedJobRetention,
		SoftStopTimeout:             cfg.ShutdownTimeout,
		FetchCooldown:               cfg.FetchCooldown,
		FetchPollInterval:           cfg.FetchPollInterval,
		Logger:                      cfg.Logger,
		PeriodicJobs:                periodicJobs,
		Middleware:                  cfg.RiverMiddleware,
		TestOnly:                    cfg.TestOnly,
	})
	if err != nil {
		return nil, fmt.Errorf("dispatcher: river client: %w", err)
	}
	replayOp.river = client
	// The intake, the chains and the batches insert jobs up to a thousand
	// times a second, and River notifies the fetching workers at most once
	// per FetchCooldown per queue and inserting client: a job inserted
	// just after another waits for the next notified insert or for the
	// fetch poll. Their own insert client notifies every millisecond at
	// most, as the applications' do (outbox.New).
	inserts, err := river.NewClient(riverpgxv5.New(nil), &river.Config{Schema: cfg.Schema, FetchCooldown: time.Millisecond, Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("dispatcher: river insert client: %w", err)
	}
	w.client = inserts
	return &Dispatcher{record: record, settings: cfg.Settings, heartbeat: make(chan struct{}), pool: pool, store: store, logger: cfg.Logger,
		client: client, worker: w, replays: replays, intake: &intake{
			pool: pool, store: store, schema: cfg.Schema, logger: cfg.Logger, client: inserts,
			tenants: w.tenants,
		}}, nil
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
func recordID() string {
	host, _ := os.Hostname()
	if len(host) > 60 {
		host = host[:60]
	}
	return fmt.Sprintf("%s-%d-%d", host, os.Getpid(), time.Now().UnixNano())
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

// Stop stops fetching and lets in-flight attempts finish for
// Config.ShutdownTimeout, after which River cancels them (its soft stop).
// If ctx ends first, they are cancelled then (River's StopAndCancel). It
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

// retrySpan is the longest an effect's attempts can last from its first
// fire to its last: every delay of the schedule at its longest, and every
// call but the last taking the whole job timeout.
func retrySpan(p outboxtype.RetryPolicy, jobTimeout time.Duration) time.Duration {
	p = p.WithDefaults()
	var span time.Duration
	for a := 1; a < p.MaxAttempts; a++ {
		d := p.MaxDelay
		if a-1 < 40 {
			if exp := p.BaseDelay << (a - 1); exp > 0 && exp < d {
				d = exp
			}
		}
		span += d + jobTimeout
	}
	return span
}
