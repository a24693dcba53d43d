package sideeffects

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/outboxd/outboxd/internal/engine"
	"github.com/outboxd/outboxd/internal/store"
	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/pgschema"
	"github.com/outboxd/outboxd/providers"
)

// OperatorConfig configures an Operator: the schema, and what it must know
// of the providers to apply the same guards as the dispatcher.
type OperatorConfig struct {
	// Schema holds outboxd's and River's tables ("" uses search_path).
	Schema string
	// Guarantees by provider name (each provider's Guarantees()). A
	// provider not listed is treated as having no idempotency keys: an
	// effect of it in doubt is at_most_once, and retry refuses to re-send
	// it without AllowDuplicate.
	Guarantees map[string]providers.Guarantees
	// InDoubt overrides a provider's in-doubt policy for individual kinds,
	// as the dispatcher's Config.InDoubt does.
	InDoubt map[string]providers.InDoubtPolicy
	// Profiles are the profiles of providers other than the built-ins
	// (providers.ProfilesOf(yourProvider)): what operators are told about
	// their effects and the rules their actions follow. A provider with
	// none gets cautious defaults.
	Profiles providers.Profiles
	// SharedLimits, when set, is where the limit keys are kept, as the
	// dispatchers' Config.SharedLimits: set it to the same place.
	SharedLimits *SharedLimits
}

// SharedLimits is where the limit keys (a Stripe or SendGrid account, a
// webhook host, an endpoint, a tenant, a broker) are kept when the
// effects live in more than one database (shards): every dispatcher and
// operator whose config names the same place shares each key, so N
// shards together keep one account's rate instead of N times it. Pool
// reaches a database migrated for outboxd (one of the shards, or one of
// its own) and Schema is its schema there. A replay's pace stays with the
// database its replay ran in. See docs/scaling.md.
type SharedLimits struct {
	Pool   *pgxpool.Pool
	Schema string
}

// engine is s as the engine takes it (nil when s is).
func (s *SharedLimits) engine() (*engine.SharedLimits, error) {
	if s == nil {
		return nil, nil
	}
	if s.Pool == nil {
		return nil, errors.New("SharedLimits: Pool is nil: give the pool of the database that keeps the limits")
	}
	if err := pgschema.Check(s.Schema); err != nil {
		return nil, fmt.Errorf("SharedLimits: Schema: %w", err)
	}
	return &engine.SharedLimits{Pool: s.Pool, Store: store.NewStore(s.Schema)}, nil
}

// Config configures a Dispatcher. Zero fields take the defaults below;
// NewDispatcher checks the rest and names the field at fault.
type Config struct {
	// Schema holds outboxd's and River's tables ("" uses search_path).
	Schema string
	// Providers are the providers this process dispatches for; each gets its
	// own River queue, named after it, so a slow provider cannot starve the
	// others. At least one.
	Providers []providers.Provider
	// Concurrency is the number of workers per provider queue. A provider
	// not listed gets DefaultConcurrency; a provider listed must be in
	// Providers.
	Concurrency map[string]int
	// InDoubt overrides a provider's in-doubt policy for individual kinds.
	InDoubt map[string]providers.InDoubtPolicy
	// Retry is the retry schedule; MaxDelay must not be below BaseDelay.
	Retry RetryPolicy
	// JobTimeout cancels an attempt that runs longer. It must exceed every
	// provider's own timeout (providers.Timed). Default 1m.
	JobTimeout time.Duration
	// ShutdownTimeout is how long Stop lets in-flight attempts finish
	// before River cancels them. Default 30s.
	ShutdownTimeout time.Duration
	// RescueAfter is how long a job may stay running before River assumes
	// its worker died and retries it. Must exceed JobTimeout. Default 2m.
	RescueAfter time.Duration
	// FetchCooldown and FetchPollInterval tune River's fetch loop. Defaults
	// 5ms and 100ms.
	FetchCooldown     time.Duration
	FetchPollInterval time.Duration
	// SweepInterval is how often the leader looks for pending and fired
	// effects without a dispatch job. Default 1m, at least 1s.
	SweepInterval time.Duration
	// SweepGrace leaves alone effects changed more recently than this.
	// Default 1m.
	SweepGrace time.Duration
	// Retention is how long terminal effects are kept; it must exceed every
	// provider's key window. Default 30 days; -1 disables the purge.
	Retention time.Duration
	// RetentionInterval is how often the purge runs. Default 1h.
	RetentionInterval time.Duration
	// CompletedJobRetention is how long River keeps a completed dispatch
	// job (its CompletedJobRetentionPeriod). The effect row holds all a
	// completed job says. Default 1h (River's own default is 24h).
	CompletedJobRetention time.Duration
	// Limits sets rate limits, in requests a second, shared by every
	// replica, by limit key: a provider's name for its account
	// ("stripe", "sendgrid"), or a key a provider names
	// ("webhook:api.partner.example"). Stripe's account limit defaults to
	// Stripe's published rate (live 100/s, test 25/s); keys with no rate
	// slow down only when the provider answers 429. A rate an operator set
	// (outboxctl limits set) is kept over these. See docs/limits.md.
	Limits map[string]float64
	// SharedLimits, when set, keeps the limit keys in one place for
	// every database (shard) whose dispatchers name it (see its type).
	SharedLimits *SharedLimits
	// LimitsInAnySecond names the keys of Limits whose rate is held as
	// "at most N in any second", a partner's contract stated that way,
	// instead of as an average: no burst after a quiet spell, and request
	// times a little further apart (docs/limits.md).
	LimitsInAnySecond []string
	// LimitPause is how long a 429 that names no delay pauses its limit
	// key, doubled for each such 429 in a row. Default 500ms.
	LimitPause time.Duration
	// MaxProviderDelay is the longest outboxd waits because a provider
	// asked it to (Retry-After in seconds or as a date, a rate-limit reset):
	// a longer delay is cut to this, logged and raised as the operational
	// event outboxd.provider.delay_bounded. A 429 pauses a limit key that
	// every replica and every effect to that destination share, so one
	// answer must not stop them for years. Default 10m.
	MaxProviderDelay time.Duration
	// TenantWindow is how many effects of one tenant, per provider, may
	// have a dispatch job at once (queued in River or being worked);
	// the rest wait in their tenant's queue, so that another tenant's new
	// effect has at most this many of each tenant's ahead of it. Effects
	// without a tenant are not limited. Default 32.
	TenantWindow int
	// TenantWeights multiply TenantWindow for the tenants named: a weight
	// of 2 gives a tenant twice the window. Positive; default 1.
	TenantWeights map[string]float64
	// Metrics, when set, receives what the dispatcher measures (see package
	// dispatchmetrics for Prometheus).
	Metrics Observer
	// Tracer, when set, traces each dispatch as a span ("outboxd.dispatch")
	// that continues the trace stored with the effect's event by the
	// enqueuing application, and each provider call as a client span
	// inside it; log lines of a dispatch carry its trace_id and span_id.
	// Package outbox/outboxtrace provides one for OpenTelemetry.
	Tracer Tracer
	// RiverMiddleware is added to the dispatcher's River client, for
	// example River's OpenTelemetry middleware (rivercontrib/otelriver),
	// whose job spans the dispatch spans link to.
	RiverMiddleware []rivertype.Middleware
	// Logger receives outboxd's and River's logs. Default slog.Default().
	Logger *slog.Logger
	// Name tells this process apart for operators (outboxctl dispatchers,
	// the web view's Dispatchers page, the jobs it ran: River's
	// attempted_by): letters, digits, '.', '_' and '-', at most 40.
	// Default the host name. The process's record is its name, pid and
	// start time, such as api-blue-4242-20261129T112233.125Z, so that a
	// restart is a new record and two processes never share one.
	Name string
	// Settings, when set, are recorded with this process's host and pid
	// for `outboxctl dispatchers` while it runs (refreshed every 30s,
	// marked stopped by Stop): what an operator needs to read its
	// behaviour, never secrets.
	Settings map[string]any
	// TestOnly shortens River's start-up for tests, as River's own
	// Config.TestOnly does.
	TestOnly bool
}

// Defaults for Config's and RetryPolicy's zero values. Together they
// bound crash recovery: an effect left fired by a killed process is
// rescued by River after RescueAfter, noticed within River's 30s rescuer
// interval, and re-fired after the first retry delay, about 3 minutes in
// all with the defaults; a dispatcher that starts later rescues such a job
// within seconds.
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
	DefaultSweepInterval     = time.Minute
	DefaultSweepGrace        = time.Minute
	DefaultRetention         = 30 * 24 * time.Hour
	DefaultRetentionInterval = time.Hour
	// DefaultCompletedJobRetention is how long River keeps a completed
	// dispatch job; see Config.CompletedJobRetention.
	DefaultCompletedJobRetention = time.Hour
	// DefaultLimitPause is the first pause of a key after a 429 that named
	// no delay (stripe-go's own retries start at 500 ms); each episode in
	// a row doubles it, up to a minute. A key pauses for every replica: a
	// few requests that arrived bunched should not cost it a whole second
	// of its rate.
	DefaultLimitPause = 500 * time.Millisecond
	// DefaultMaxProviderDelay bounds a delay a provider names; see
	// Config.MaxProviderDelay.
	DefaultMaxProviderDelay = 10 * time.Minute
	DefaultTenantWindow     = 32
	DefaultMaxAttempts      = outboxtype.DefaultMaxAttempts
	DefaultBaseDelay        = outboxtype.DefaultBaseDelay
	DefaultMaxDelay         = outboxtype.DefaultMaxDelay
)

// TenantLimitPrefix starts the limit key of a tenant's own rate:
// "tenant:acme" in Config.Limits or Operator.SetLimit.
const TenantLimitPrefix = engine.TenantLimitPrefix

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
	cfg.MaxProviderDelay = cmp.Or(cfg.MaxProviderDelay, DefaultMaxProviderDelay)
	cfg.TenantWindow = cmp.Or(cfg.TenantWindow, DefaultTenantWindow)
	return cfg
}

// validate checks cfg after withDefaults, naming the setting at fault; the
// checks run in a fixed order, so the same config always reports the same
// error.
// dispatcherName is what Config.Name may be.
var dispatcherName = regexp.MustCompile(`^[A-Za-z0-9._-]{1,40}$`)

// CheckName says what is wrong with name as a dispatcher's Config.Name,
// or nil ("" is the default, the host name).
func CheckName(name string) error {
	if name != "" && !dispatcherName.MatchString(name) {
		return fmt.Errorf("%q: use at most 40 letters, digits, '.', '_' or '-' (such as the host or pod name)", name)
	}
	return nil
}

func (cfg Config) validate() error {
	if err := pgschema.Check(cfg.Schema); err != nil {
		return fmt.Errorf("dispatcher: Schema: %w", err)
	}
	if len(cfg.Providers) == 0 {
		return errors.New("dispatcher: no providers configured")
	}
	if err := CheckName(cfg.Name); err != nil {
		return fmt.Errorf("dispatcher: Name: %w", err)
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
		if span := retrySpan(cfg.Retry, cfg.JobTimeout); g.WindowCoversRetries && g.KeyWindow > 0 && g.Refirable() < span {
			fix := fmt.Sprintf("make the window at least %s", span+g.KeyWindowMargin)
			if wa, ok := p.(providers.WindowAdviser); ok {
				fix = wa.WindowAdvice(span + g.KeyWindowMargin)
			}
			return fmt.Errorf("dispatcher: the %s key window (%s, less its %s margin) is shorter than the retry schedule (%d attempts, up to %s with calls): %s, or retry less (outboxd run --max-attempts, --retry-max-delay, --job-timeout)", name, g.KeyWindow, g.KeyWindowMargin, cfg.Retry.WithDefaults().MaxAttempts, span, fix)
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
	if cfg.MaxProviderDelay < 0 {
		return fmt.Errorf("dispatcher: max provider delay is %s: it must not be negative", cfg.MaxProviderDelay)
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
	if _, err := cfg.SharedLimits.engine(); err != nil {
		return fmt.Errorf("dispatcher: %w", err)
	}
	for _, key := range cfg.LimitsInAnySecond {
		rate, ok := cfg.Limits[key]
		if !ok {
			return fmt.Errorf("dispatcher: limit %q is to be held in any second but has no rate in Limits: give it one", key)
		}
		if err := outboxtype.CheckRateInAnySecond(rate); err != nil {
			return fmt.Errorf("dispatcher: limit %q: rate %w", key, err)
		}
	}
	return nil
}

// checkLimit checks one configured limit: a positive rate, for a provider
// this process has (by name, or a key that starts with "<provider>:").
func checkLimit(key string, rate float64, providers map[string]bool) error {
	name, rest, _ := strings.Cut(key, ":")
	switch {
	case outboxtype.CheckRate(rate) != nil:
		return fmt.Errorf("dispatcher: limit %q: rate %v: %w", key, rate, outboxtype.CheckRate(rate))
	case name+":" == TenantLimitPrefix && rest != "":
		return nil
	case !providers[name]:
		return fmt.Errorf("dispatcher: limit %q: no provider %q is configured: name a provider's account (stripe) or a key such as webhook:api.partner.example", key, name)
	}
	return nil
}

// wiring puts cfg, checked and with its defaults, in the terms of the
// engine's parts.
func (cfg Config) wiring() engine.Wiring {
	shared, _ := cfg.SharedLimits.engine() // checked with the rest
	workers := make(map[string]int, len(cfg.Providers))
	for _, p := range cfg.Providers {
		workers[p.Name()] = cmp.Or(cfg.Concurrency[p.Name()], DefaultConcurrency)
	}
	return engine.Wiring{
		Schema:    cfg.Schema,
		Providers: cfg.Providers,
		Workers:   workers,
		River: river.Config{
			JobTimeout:           cfg.JobTimeout,
			RescueStuckJobsAfter: cfg.RescueAfter,
			// Cancelled and discarded jobs keep River's default (24h): each
			// marks an effect an operator may be looking at.
			CompletedJobRetentionPeriod: cfg.CompletedJobRetention,
			SoftStopTimeout:             cfg.ShutdownTimeout,
			FetchCooldown:               cfg.FetchCooldown,
			FetchPollInterval:           cfg.FetchPollInterval,
			Logger:                      cfg.Logger,
			Middleware:                  cfg.RiverMiddleware,
			TestOnly:                    cfg.TestOnly,
		},
		Calls: engine.CallSettings{InDoubt: cfg.InDoubt, Retry: cfg.Retry, MaxProviderDelay: cfg.MaxProviderDelay,
			Metrics: cfg.Metrics, Tracer: cfg.Tracer},
		Limits: engine.LimitSettings{Shared: shared, Rates: cfg.Limits, InAnySecond: cfg.LimitsInAnySecond, Pause: cfg.LimitPause,
			TenantWindow: cfg.TenantWindow, TenantWeights: cfg.TenantWeights},
		Upkeep: engine.UpkeepSettings{SweepEvery: cfg.SweepInterval, SweepGrace: cfg.SweepGrace,
			Retention: cfg.Retention, RetentionEvery: cfg.RetentionInterval},
		Settings: cfg.Settings,
		Name:     cfg.Name,
	}
}

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
