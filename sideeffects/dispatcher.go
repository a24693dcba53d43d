package sideeffects

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

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
	// DefaultFetchCooldown and DefaultFetchPollInterval are tighter than
	// River's (100ms, 1s), chosen by measurement (docs/performance.md): an
	// effect is usually fired within a few milliseconds of its commit, and
	// within the poll interval when its insert notification was coalesced
	// with another.
	DefaultFetchCooldown     = 5 * time.Millisecond
	DefaultFetchPollInterval = 100 * time.Millisecond
)

// Config configures a Dispatcher.
type Config struct {
	// Schema holds outboxd's and River's tables ("" uses search_path).
	Schema string
	// Providers are the providers this process dispatches for; each gets its
	// own River queue, named after it, so a slow provider cannot starve the
	// others.
	Providers []providers.Provider
	// Concurrency is the number of workers per provider queue. A provider
	// not listed gets DefaultConcurrency.
	Concurrency map[string]int
	// InDoubt overrides a provider's in-doubt policy for individual kinds.
	InDoubt map[string]providers.InDoubtPolicy
	// Retry is the retry schedule.
	Retry RetryPolicy
	// JobTimeout cancels an attempt that runs longer. It must exceed every
	// provider's request timeout. Default 1m.
	JobTimeout time.Duration
	// RescueAfter is how long a job may stay running before River assumes
	// its worker died and retries it. Must exceed JobTimeout. Default 2m.
	RescueAfter time.Duration
	// FetchCooldown and FetchPollInterval tune River's fetch loop. Defaults
	// 20ms and 250ms.
	FetchCooldown     time.Duration
	FetchPollInterval time.Duration
	// SweepInterval is how often the leader looks for pending and fired
	// effects without a dispatch job. Default 1m.
	SweepInterval time.Duration
	// SweepGrace leaves alone effects changed more recently than this.
	// Default 1m.
	SweepGrace time.Duration
	// Retention is how long terminal effects are kept; it must exceed every
	// provider's key window. Default 30 days; -1 disables the purge.
	Retention time.Duration
	// RetentionInterval is how often the purge runs. Default 1h.
	RetentionInterval time.Duration
	// Metrics, when set, receives what the dispatcher measures (see package
	// dispatchmetrics for Prometheus).
	Metrics Observer
	// Logger receives outboxd's and River's logs. Default slog.Default().
	Logger *slog.Logger
	// TestOnly shortens River's start-up for tests.
	TestOnly bool
}

// Dispatcher runs River workers that fire side effects.
type Dispatcher struct {
	client *river.Client[pgx.Tx]
	worker *Worker
	intake *intake
}

// NewDispatcher validates cfg and builds a dispatcher; Start runs it.
func NewDispatcher(pool *pgxpool.Pool, cfg Config) (*Dispatcher, error) {
	if len(cfg.Providers) == 0 {
		return nil, errors.New("dispatcher: no providers configured")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.JobTimeout == 0 {
		cfg.JobTimeout = DefaultJobTimeout
	}
	if cfg.RescueAfter == 0 {
		cfg.RescueAfter = DefaultRescueAfter
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"job timeout", cfg.JobTimeout}, {"rescue-after", cfg.RescueAfter}, {"fetch cooldown", cfg.FetchCooldown},
		{"fetch poll interval", cfg.FetchPollInterval}, {"sweep interval", cfg.SweepInterval}, {"sweep grace", cfg.SweepGrace},
		{"retention interval", cfg.RetentionInterval}, {"retry base delay", cfg.Retry.BaseDelay}, {"retry max delay", cfg.Retry.MaxDelay}} {
		if d.v < 0 {
			return nil, fmt.Errorf("dispatcher: %s is %s: it must not be negative", d.name, d.v)
		}
	}
	if cfg.Retry.MaxAttempts < 0 {
		return nil, fmt.Errorf("dispatcher: retry max attempts is %d: it must not be negative", cfg.Retry.MaxAttempts)
	}
	if cfg.SweepInterval > 0 && cfg.SweepInterval < time.Second {
		return nil, fmt.Errorf("dispatcher: sweep interval is %s: it must be at least 1s", cfg.SweepInterval)
	}
	if cfg.RescueAfter <= cfg.JobTimeout {
		return nil, fmt.Errorf("dispatcher: rescue-after (%s) must exceed job-timeout (%s)", cfg.RescueAfter, cfg.JobTimeout)
	}
	cfg.FetchCooldown = cmp.Or(cfg.FetchCooldown, DefaultFetchCooldown)
	cfg.FetchPollInterval = cmp.Or(cfg.FetchPollInterval, DefaultFetchPollInterval)
	cfg.SweepInterval = cmp.Or(cfg.SweepInterval, DefaultSweepInterval)
	cfg.SweepGrace = cmp.Or(cfg.SweepGrace, DefaultSweepGrace)
	cfg.Retention = cmp.Or(cfg.Retention, DefaultRetention)
	cfg.RetentionInterval = cmp.Or(cfg.RetentionInterval, DefaultRetentionInterval)
	store := NewStore(cfg.Schema)
	w := &Worker{
		pool:      pool,
		store:     store,
		providers: make(map[string]providers.Provider, len(cfg.Providers)),
		inDoubt:   cfg.InDoubt,
		retry:     cfg.Retry.withDefaults(),
		logger:    cfg.Logger,
		metrics:   cmp.Or[Observer](cfg.Metrics, noObserver{}),
	}
	queues := make(map[string]river.QueueConfig, len(cfg.Providers))
	for _, p := range cfg.Providers {
		name := p.Name()
		if _, dup := w.providers[name]; dup {
			return nil, fmt.Errorf("dispatcher: provider %q configured twice", name)
		}
		w.providers[name] = p
		if sh, ok := p.(providers.SecretHolder); ok {
			w.secrets = append(w.secrets, sh.Secrets()...)
		}
		w.providerNames = append(w.providerNames, name)
		n := cfg.Concurrency[name]
		if n < 0 {
			return nil, fmt.Errorf("dispatcher: concurrency for %q must be positive, got %d", name, n)
		}
		if n == 0 {
			n = DefaultConcurrency
		}
		queues[name] = river.QueueConfig{MaxWorkers: n}
	}
	for name := range cfg.Concurrency {
		if _, ok := w.providers[name]; !ok {
			return nil, fmt.Errorf("dispatcher: concurrency set for unknown provider %q", name)
		}
	}
	for _, p := range cfg.Providers {
		g := p.Guarantees()
		if g.KeyWindow < 0 || g.KeyWindowMargin < 0 || (g.KeyWindow > 0 && g.KeyWindow <= g.KeyWindowMargin) {
			return nil, fmt.Errorf("dispatcher: the %s key window (%s) must exceed its margin (%s): no retry could ever be made", p.Name(), g.KeyWindow, g.KeyWindowMargin)
		}
		if cfg.Retention > 0 && g.KeyWindow > 0 && cfg.Retention <= g.KeyWindow {
			return nil, fmt.Errorf("dispatcher: retention (%s) must exceed the %s key window (%s): a purged effect no longer deduplicates", cfg.Retention, p.Name(), g.KeyWindow)
		}
	}
	queues[MaintenanceQueue] = river.QueueConfig{MaxWorkers: 1}
	workers := river.NewWorkers()
	if err := river.AddWorkerSafely(workers, w); err != nil {
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
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Schema:               cfg.Schema,
		Queues:               queues,
		Workers:              workers,
		JobTimeout:           cfg.JobTimeout,
		RescueStuckJobsAfter: cfg.RescueAfter,
		FetchCooldown:        cfg.FetchCooldown,
		FetchPollInterval:    cfg.FetchPollInterval,
		Logger:               cfg.Logger,
		PeriodicJobs:         periodicJobs,
		TestOnly:             cfg.TestOnly,
	})
	if err != nil {
		return nil, fmt.Errorf("dispatcher: river client: %w", err)
	}
	return &Dispatcher{client: client, worker: w, intake: &intake{
		pool: pool, store: store, schema: cfg.Schema, poll: cfg.FetchPollInterval, logger: cfg.Logger, client: client,
	}}, nil
}

// Start begins fetching and working dispatch jobs.
func (d *Dispatcher) Start(ctx context.Context) error {
	d.worker.startBatchers()
	if err := d.client.Start(ctx); err != nil {
		d.worker.stopBatchers()
		return err
	}
	d.intake.start()
	return nil
}

// Stop stops fetching and waits for in-flight attempts until ctx is done;
// then it cancels them. A cancelled attempt leaves its effect fired, to be
// re-fired with the same key by this or another replica.
func (d *Dispatcher) Stop(ctx context.Context) error {
	// The batchers serve the workers until the last one has returned.
	defer d.worker.stopBatchers()
	d.intake.stopIntake()
	err := d.client.Stop(ctx)
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		hardCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		return d.client.StopAndCancel(hardCtx)
	}
	return err
}

// River is the underlying River client, for subscriptions and inserts.
func (d *Dispatcher) River() *river.Client[pgx.Tx] { return d.client }
