// Package sideeffects runs the dispatcher that moves each side effect
// pending -> fired -> confirmed with River workers, and the operator API
// that inspects and repairs effects.
//
//	pending --claim (committed before the provider is called)--> fired
//	fired   --acknowledged (committed before the job counts as done)--> confirmed
//	fired   --retryable (the provider proved it did not act)--> pending, retried later
//	fired   --in doubt (5xx, timeout, crash)--> fired, re-fired with the same key
//	pending|fired --permanent, retries exhausted, key window passed--> failed
//
// Applications enqueue effects with package outbox, in their own
// transaction, and run a Dispatcher here (or the outboxd binary). An
// effect's idempotency key is Key(event id, kind); Postgres computes the
// same value as outboxd_idempotency_key(source_id, kind), and the effect's
// id is derived from it (SQL outboxd_effect_id).
//
// The engine itself (SQL, worker, maintenance) lives in internal/engine;
// this package is the part an application or an operator needs.
package sideeffects

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/outboxd/outboxd/internal/engine"
	"github.com/outboxd/outboxd/internal/store"
	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/pgschema"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/bundled"
)

// The values shared with package outbox and the engine live in package
// outboxtype (as River's live in rivertype); these names are theirs.
type (
	// EffectRow is an effect as stored (a side_effects row) and read by
	// operators; outbox.Effect is what an application asks for, and
	// outbox.EffectResult what Enqueue recorded.
	EffectRow = outboxtype.Effect
	// State is an effect's state.
	State = outboxtype.State
	// RetryPolicy is the retry schedule of Config.
	RetryPolicy = outboxtype.RetryPolicy
	// Observer receives what the dispatcher measures (package
	// dispatchmetrics implements it for Prometheus).
	Observer = outboxtype.Observer
	// Tracer traces dispatches and provider calls (package
	// outbox/outboxtrace implements it for OpenTelemetry).
	Tracer = outboxtype.Tracer
	// ActionOpts are who acts and why, and the guards an action may lift.
	ActionOpts = outboxtype.ActionOpts
	// Change is what an operator action did (or, in a dry run, would do)
	// to one effect.
	Change = outboxtype.Change
	// StuckEffect is an effect that is not progressing, with its live River
	// job; Diagnosis says why and what to do.
	StuckEffect = outboxtype.StuckEffect
	// EventResult is what one provider event did to the effect it names.
	EventResult = outboxtype.EventResult
)

// The states of side_effects.state.
const (
	StatePending   = outboxtype.StatePending
	StateFired     = outboxtype.StateFired
	StateConfirmed = outboxtype.StateConfirmed
	StateFailed    = outboxtype.StateFailed
	StateCancelled = outboxtype.StateCancelled
)

// Failure reasons an effect's last_error starts with.
const (
	ReasonInDoubt     = outboxtype.ReasonInDoubt
	ReasonKeyWindow   = outboxtype.ReasonKeyWindow
	ReasonUnqueueable = outboxtype.ReasonUnqueueable
)

// JobKind is the River kind of dispatch jobs, for SQL over river_job.
const JobKind = engine.JobKind

// ErrNotFound reports an effect id or key that no effect has.
var ErrNotFound = store.ErrNotFound

// Key is the idempotency key of the effect of kind caused by event eventID:
// hex(sha256(event id + ":" + kind)). It never changes.
func Key(eventID uuid.UUID, kind string) string { return store.Key(eventID, kind) }

// Dispatcher runs the River workers that fire side effects.
type Dispatcher engine.Dispatcher

// NewDispatcher checks cfg, naming the field at fault, and builds a
// dispatcher with cfg's zero fields at their defaults; Start runs it.
func NewDispatcher(pool *pgxpool.Pool, cfg Config) (*Dispatcher, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	// Paced replays retry by an operator's rules, knowing what this
	// process's providers promise, as outboxctl's operator knows it from
	// its flags.
	guarantees := make(map[string]providers.Guarantees, len(cfg.Providers))
	for _, p := range cfg.Providers {
		guarantees[p.Name()] = p.Guarantees()
	}
	op, err := NewOperator(pool, OperatorConfig{Schema: cfg.Schema, Guarantees: guarantees, InDoubt: cfg.InDoubt})
	if err != nil {
		return nil, err
	}
	w := cfg.wiring()
	w.Retry = op.Retry
	d, err := engine.NewDispatcher(pool, w)
	if err != nil {
		return nil, err
	}
	return (*Dispatcher)(d), nil
}

func (d *Dispatcher) engine() *engine.Dispatcher { return (*engine.Dispatcher)(d) }

// Start starts dispatching. Cancelling ctx begins a graceful stop, as Stop
// does.
func (d *Dispatcher) Start(ctx context.Context) error { return d.engine().Start(ctx) }

// Stop stops fetching and lets in-flight attempts finish for
// Config.ShutdownTimeout (or until ctx ends), then cancels them. A
// cancelled attempt leaves its effect fired, to be re-fired with the same
// key by this or another replica.
func (d *Dispatcher) Stop(ctx context.Context) error { return d.engine().Stop(ctx) }

// Stopped is closed once the dispatcher has stopped.
func (d *Dispatcher) Stopped() <-chan struct{} { return d.engine().Stopped() }

// Limits is what this process knows of the rate limits now (for metrics:
// see dispatchmetrics.Limits).
func (d *Dispatcher) Limits() []outboxtype.LimitState { return d.engine().Limits() }

// Operator inspects and repairs effects, with the guards and audit trail
// of outboxctl and the web view (they use it too).
//
// It holds the rules of the transitions people make by hand (each in one
// transaction with its audit row and, for a retry, its new River job:
// operator.go), of paced replays (replays.go) and of lifting holds
// (limits.go); its reads run the store's statements as they are.
type Operator struct {
	pool  *pgxpool.Pool
	store *store.Store
	river *river.Client[pgx.Tx]
	// told is the providers' guarantees and inDoubt the in-doubt policies
	// by kind, as the dispatchers were told them, so that a redrive
	// applies the rules a worker would.
	told    map[string]providers.Guarantees
	inDoubt map[string]providers.InDoubtPolicy
	// profiles are the built-in providers' and OperatorConfig.Profiles.
	profiles providers.Profiles
	// shared is OperatorConfig.SharedLimits (nil: the limits are kept
	// with the effects).
	shared *engine.SharedLimits
}

// NewOperator returns the operator API over cfg.Schema.
func NewOperator(pool *pgxpool.Pool, cfg OperatorConfig) (*Operator, error) {
	if err := pgschema.Check(cfg.Schema); err != nil {
		return nil, fmt.Errorf("operator: Schema: %w", err)
	}
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Schema: cfg.Schema})
	if err != nil {
		return nil, fmt.Errorf("operator: river client: %w", err)
	}
	profiles := bundled.Profiles()
	for name, p := range cfg.Profiles {
		profiles[name] = p
	}
	shared, err := cfg.SharedLimits.engine()
	if err != nil {
		return nil, fmt.Errorf("operator: %w", err)
	}
	return &Operator{pool: pool, store: store.NewStore(cfg.Schema), river: rc, told: cfg.Guarantees, inDoubt: cfg.InDoubt,
		profiles: profiles, shared: shared}, nil
}

// limitsPlace is where key's row is kept (engine.LimitsPlace).
func (o *Operator) limitsPlace(key string) (*pgxpool.Pool, *store.Store) {
	return engine.LimitsPlace(o.shared, o.pool, o.store, key)
}

// Profile is what operators are told about provider, and the rules their
// actions follow for its effects: its providers.Profile (a built-in's, or
// one in OperatorConfig.Profiles), or cautious defaults.
func (o *Operator) Profile(provider string) providers.Profile {
	p, _ := o.profiles.Of(provider)
	return p
}

// Profiles are the profiles Profile reads.
func (o *Operator) Profiles() providers.Profiles { return o.profiles }

// KeyWindows is, by provider, how long after the first request with its
// key an effect may still be fired: its key window less the margin. Every
// provider a dispatcher runs is there (brokers and an application's own
// included), as the dispatchers last recorded it; the operator's own
// settings (OperatorConfig.Guarantees) take precedence. A provider with no
// key window is missing.
func (o *Operator) KeyWindows(ctx context.Context) (map[string]time.Duration, error) {
	recorded, err := o.store.AllProviderGuarantees(ctx, o.pool)
	if err != nil {
		return nil, err
	}
	for name, g := range o.told {
		recorded[name] = g
	}
	out := make(map[string]time.Duration, len(recorded))
	for name, g := range recorded {
		if w := g.Refirable(); w != 0 {
			out[name] = w
		}
	}
	return out, nil
}

// Get returns the effect with id.
func (o *Operator) Get(ctx context.Context, id uuid.UUID) (*EffectRow, error) {
	return o.store.Get(ctx, o.pool, id)
}

// Carried returns the effect whose id or idempotency key is ref when its
// event still carries it (outbox.EffectsByDispatcher: no dispatcher has
// taken the event yet), or ErrNotFound: what an operator who found no
// effect under ref is told. It reads every event that carries effects.
func (o *Operator) Carried(ctx context.Context, ref string) (*outboxtype.CarriedEffect, error) {
	id, err := uuid.Parse(ref)
	if err != nil {
		var ok bool
		if id, ok = store.KeyEffectID(strings.ToLower(ref)); !ok {
			return nil, ErrNotFound
		}
	}
	return o.store.Carried(ctx, o.pool, id)
}

// Stuck returns pending and fired effects unchanged for olderThan, and
// failed ones not acknowledged, oldest first.
func (o *Operator) Stuck(ctx context.Context, olderThan time.Duration, limit int) ([]StuckEffect, error) {
	return o.store.Stuck(ctx, o.pool, time.Now().Add(-olderThan), limit)
}

// StuckGroups groups what Stuck lists by cause (state, kind, provider, a
// webhook's host, the first words of the last error), newest incident
// first, with counts and ages: an incident now is on top whatever old
// failures there are. Live effects retrying after an error count however
// recently they changed, so a partner that stopped answering shows in the
// first seconds, while each attempt still changes its effects. Failures count when they ended within
// IncidentWindow (24h): older ones are FailureReasons' and List's, and
// reading them all would cost the page what the failed count costs.
func (o *Operator) StuckGroups(ctx context.Context, olderThan time.Duration, limit int) ([]outboxtype.StuckGroup, error) {
	now := time.Now()
	return o.store.StuckGroups(ctx, o.pool, now.Add(-olderThan), now.Add(-IncidentWindow), limit)
}

// IncidentWindow is how far back StuckGroups counts failures.
const IncidentWindow = 24 * time.Hour

// The reads below are what outboxctl and the web view show; each reads
// through an index (docs/performance.md times them at 10 M effects).

// GetByKey returns the effect whose idempotency key is key.
func (o *Operator) GetByKey(ctx context.Context, key string) (*EffectRow, error) {
	return o.store.GetByKey(ctx, o.pool, key)
}

// List returns effects matching f, newest first (f.After continues a page).
func (o *Operator) List(ctx context.Context, f outboxtype.Filter) ([]*EffectRow, error) {
	return o.store.List(ctx, o.pool, f)
}

// Stats summarises the effects: live and failed ones in full, confirmed
// and cancelled ones that ended within window (zero: every row kept).
func (o *Operator) Stats(ctx context.Context, window time.Duration) (*outboxtype.Stats, error) {
	return o.store.Stats(ctx, o.pool, window)
}

// SummarizeMinutes adds the minutes before upTo to the per-minute summary
// that Stats reads (the leader does it every minute by itself): for a
// summary that should hold history from before it began, after moving
// its start back (outboxd_minutes_summarized.since and up_to).
func (o *Operator) SummarizeMinutes(ctx context.Context, upTo time.Time) (time.Time, error) {
	return o.store.SummarizeMinutes(ctx, o.pool, upTo)
}

// Event returns the event with id.
func (o *Operator) Event(ctx context.Context, id uuid.UUID) (*outboxtype.Event, error) {
	return o.store.Event(ctx, o.pool, id)
}

// Events lists events matching f, newest first, with their effects.
func (o *Operator) Events(ctx context.Context, f outboxtype.EventFilter) ([]outboxtype.EventEffects, error) {
	return o.store.Events(ctx, o.pool, f)
}

// Jobs lists the River jobs of effect id, newest first.
func (o *Operator) Jobs(ctx context.Context, id uuid.UUID) ([]outboxtype.Job, error) {
	return o.store.Jobs(ctx, o.pool, id)
}

// Audit lists the recorded actions on effect id, oldest first.
func (o *Operator) Audit(ctx context.Context, id uuid.UUID) ([]outboxtype.AuditEntry, error) {
	return o.store.Audit(ctx, o.pool, id)
}

// Attempts lists the failed attempts of effect id, oldest first.
func (o *Operator) Attempts(ctx context.Context, id uuid.UUID) ([]outboxtype.Attempt, error) {
	return o.store.Attempts(ctx, o.pool, id)
}

// Delivery returns the delivery status a provider reported for the mail
// of effect id (ErrNotFound when none).
func (o *Operator) Delivery(ctx context.Context, id uuid.UUID) (*outboxtype.Delivery, error) {
	return o.store.Delivery(ctx, o.pool, id)
}

// Reconcile asks the provider what it holds for effect e's key: asker
// (the provider's Reconciler; nil when none can be asked) for the objects
// it created or changed, SendGrid's recorded events for a mail, nothing
// for a webhook (its receiver's log is the only record). It reads only;
// the result's Suggest says what to do.
func (o *Operator) Reconcile(ctx context.Context, e *EffectRow, asker providers.Reconciler) (*outboxtype.Reconciliation, error) {
	rec := &outboxtype.Reconciliation{Effect: e}
	var err error
	switch {
	case asker != nil:
		lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if rec.Found, rec.Asked, err = asker.Lookup(lctx, e.Payload, e.IdempotencyKey); err != nil {
			return nil, fmt.Errorf("asking %s: %w", e.Provider, err)
		}
	case o.Profile(e.Provider).Answers == providers.AnswersEvents:
		if rec.Delivery, err = o.Delivery(ctx, e.ID); err != nil {
			return nil, err
		}
		rec.Asked = "read the SendGrid events outboxd received for the key"
		if rec.Delivery != nil {
			ref := ""
			if e.ProviderRef != nil {
				ref = *e.ProviderRef
			}
			rec.Found = []providers.Found{{ID: ref, Object: "mail", Status: rec.Delivery.Status, Created: rec.Delivery.EventAt}}
		}
	default:
		rec.Asked = "nothing to ask " + e.Provider + ": look for webhook-id " + e.IdempotencyKey + " in the receiver's log"
	}
	if rec.Drift, err = o.Drift(ctx, outboxtype.DriftFilter{EffectID: &e.ID}); err != nil {
		return nil, err
	}
	return rec, nil
}

// Drift lists what provider events contradicted, newest first.
func (o *Operator) Drift(ctx context.Context, f outboxtype.DriftFilter) ([]outboxtype.DriftRecord, error) {
	return o.store.Drift(ctx, o.pool, f)
}

// AckDrift records that drift records were reviewed, by actor for reason:
// they leave the default list and the outboxd_drift_unacknowledged gauge.
// It returns the ids it acknowledged now.
func (o *Operator) AckDrift(ctx context.Context, ids []int64, actor, reason string) ([]int64, error) {
	return o.store.AckDrift(ctx, o.pool, ids, actor, reason)
}

// Limits lists every rate limit key as the replicas share it, with the
// effects waiting for it.
// A key effects wait for that has no row yet is listed too.
func (o *Operator) Limits(ctx context.Context) ([]outboxtype.LimitReport, error) {
	rows, err := engine.LimitRows(ctx, o.shared, o.pool, o.store)
	if err != nil {
		return nil, err
	}
	waits, err := o.store.WaitingByLimit(ctx, o.pool)
	if err != nil {
		return nil, err
	}
	out := make([]outboxtype.LimitReport, 0, len(rows)+len(waits))
	for _, r := range rows {
		rate, paused := engine.LimitNow(r)
		rep := outboxtype.LimitReport{Key: r.Key, Rate: r.Rate, RateSource: r.RateSource, InAnySecond: r.InAnySecond, CurrentRate: rate,
			Throttles: r.Throttles, LastThrottleAt: r.LastThrottleAt, Granted: r.Granted}
		if paused {
			rep.PausedUntil = r.PausedUntil
		}
		if w, ok := waits[r.Key]; ok {
			rep.WaitingEffects, rep.WaitingSince, rep.OldestKeyWindowFrom = w.Effects, w.Since, w.OldestKeyWindowFrom
			delete(waits, r.Key)
		}
		out = append(out, rep)
	}
	for key, w := range waits {
		out = append(out, outboxtype.LimitReport{Key: key, WaitingEffects: w.Effects, WaitingSince: w.Since, OldestKeyWindowFrom: w.OldestKeyWindowFrom})
	}
	slices.SortFunc(out, func(a, b outboxtype.LimitReport) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// SetLimit sets limit key's rate at run time for every replica (within a
// second), kept over the rates replicas are started with; rate nil leaves
// the key no rate of its own (it slows on 429s only). resume ends a 429's
// pause and, once every replica has seen it end, makes the effects waiting
// for the key due (see ResumeLimit). Audited with actor and reason; it
// returns the rate the key had. inAnySecond holds the rate as "at most
// rate requests in any second" (a whole number) instead of as an average.
func (o *Operator) SetLimit(ctx context.Context, key string, rate *float64, inAnySecond bool, actor, reason string, resume bool) (*float64, error) {
	if err := outboxtype.CheckLimitKey(key); err != nil {
		return nil, fmt.Errorf("limit: %w", err)
	}
	switch {
	case rate == nil && inAnySecond:
		return nil, fmt.Errorf("limit %s: only a rate can be held in any second; give one", key)
	case rate != nil && inAnySecond:
		if err := outboxtype.CheckRateInAnySecond(*rate); err != nil {
			return nil, fmt.Errorf("limit %s: rate %w", key, err)
		}
	case rate != nil:
		if err := outboxtype.CheckRate(*rate); err != nil {
			return nil, fmt.Errorf("limit %s: rate %g: %w", key, *rate, err)
		}
	}
	pool, st := o.limitsPlace(key)
	before, err := st.SetLimit(ctx, pool, key, rate, inAnySecond, actor, reason, resume)
	if err != nil || !resume {
		return before, err
	}
	_, err = o.WakeWaiting(ctx, []string{key})
	return before, err
}

// LimitHistory lists the run-time changes of key's rate ("" every key),
// newest first, at most limit.
func (o *Operator) LimitHistory(ctx context.Context, key string, limit int) ([]outboxtype.LimitChange, error) {
	if key != "" || o.shared == nil {
		pool, st := o.limitsPlace(key)
		return st.LimitHistory(ctx, pool, key, limit)
	}
	// Every key: the shared place's changes and the replays' paces here.
	out, err := o.shared.Store.LimitHistory(ctx, o.shared.Pool, "", limit)
	if err != nil {
		return nil, err
	}
	local, err := o.store.LimitHistory(ctx, o.pool, "", limit)
	if err != nil {
		return nil, err
	}
	for _, c := range local {
		if strings.HasPrefix(c.Key, engine.ReplayLimitPrefix) {
			out = append(out, c)
		}
	}
	slices.SortStableFunc(out, func(a, b outboxtype.LimitChange) int { return b.At.Compare(a.At) })
	return out[:min(len(out), limit)], nil
}

// ErrReplayNotFound is returned for a replay id that does not exist.
var ErrReplayNotFound = store.ErrReplayNotFound

// Tenants lists the tenants with effects waiting for a place in their
// window or in flight (fair shares), the longest queue first, at most limit.
func (o *Operator) Tenants(ctx context.Context, limit int) ([]outboxtype.TenantReport, error) {
	return o.store.TenantReports(ctx, o.pool, limit)
}

// TenantTotals sums, by provider, every tenant's effects due and waiting
// for a place in its window: how many tenants, how many effects, the
// oldest.
func (o *Operator) TenantTotals(ctx context.Context) ([]outboxtype.TenantTotal, error) {
	return o.store.TenantTotals(ctx, o.pool)
}

// UnacknowledgedDrift counts the drift records nobody acknowledged.
func (o *Operator) UnacknowledgedDrift(ctx context.Context) (int64, error) {
	return o.store.UnacknowledgedDrift(ctx, o.pool)
}

// Dispatchers lists the dispatchers that recorded their settings, newest
// first, at most limit.
func (o *Operator) Dispatchers(ctx context.Context, limit int) ([]outboxtype.DispatcherRecord, error) {
	return o.store.Dispatchers(ctx, o.pool, limit)
}

// RunningJobs counts the dispatch jobs River marks running, by the
// dispatcher that holds them (a DispatcherRecord's ID): jobs held by a
// dispatcher that stopped or stopped reporting were left by a process that
// died, and wait for River's rescue.
func (o *Operator) RunningJobs(ctx context.Context) ([]outboxtype.RunningJobs, error) {
	return o.store.RunningJobs(ctx, o.pool)
}

// Purge deletes terminal effects that ended before cutoff, and the events
// they leave without effects, in batches at full speed (the dispatcher's
// retention job yields between batches instead). dryRun counts only.
func (o *Operator) Purge(ctx context.Context, cutoff time.Time, dryRun bool) (outboxtype.PurgeResult, error) {
	return o.store.Purge(ctx, o.pool, cutoff, dryRun)
}

// ByProviderRef returns the effects whose provider reference is ref (a
// Stripe object id such as pi_… or re_…, a SendGrid X-Message-Id or an
// event's sg_message_id, the reference a manual confirmation recorded),
// newest first, at most limit.
func (o *Operator) ByProviderRef(ctx context.Context, ref string, limit int) ([]*EffectRow, error) {
	return o.store.ByProviderRef(ctx, o.pool, ref, limit)
}

// ByKeyPrefix returns the effects whose idempotency key begins with prefix
// (12 to 64 lowercase hex digits, as outboxctl prints keys), at most limit.
func (o *Operator) ByKeyPrefix(ctx context.Context, prefix string, limit int) ([]*EffectRow, error) {
	return o.store.ByKeyPrefix(ctx, o.pool, prefix, limit)
}

// WithDriftLimit returns a context in which ApplyProviderEvent records at
// most n drift rows for all the events applied with it (one delivery):
// drift past it is reported in EventResult but not stored.
func WithDriftLimit(ctx context.Context, n int64) context.Context {
	return store.WithDriftLimit(ctx, n)
}

// BlockedBehind returns the first earlier effect of id's ordering key that
// has not ended, which id waits for; nil when none.
func (o *Operator) BlockedBehind(ctx context.Context, id uuid.UUID) (*uuid.UUID, error) {
	return o.store.BlockedBehind(ctx, o.pool, id)
}

// BlockedChains counts the ordering keys whose chain waits behind an
// earlier effect, the effects waiting, and the age of the oldest.
func (o *Operator) BlockedChains(ctx context.Context) (outboxtype.BlockedChains, error) {
	return o.store.BlockedChains(ctx, o.pool)
}

// WaitingBehind lists the effects after id on its ordering key that have
// not ended, in the order a release of id sends them (at most limit).
func (o *Operator) WaitingBehind(ctx context.Context, id uuid.UUID, limit int) ([]*EffectRow, error) {
	return o.store.WaitingBehind(ctx, o.pool, id, limit)
}

// StateGauges counts live and failed effects by state and kind, with the
// age of the oldest of each.
func (o *Operator) StateGauges(ctx context.Context) ([]outboxtype.StateGauge, error) {
	return o.store.StateGauges(ctx, o.pool)
}

// FailureReasons groups the newest unacknowledged failed effects, at most
// of of them, by kind and reason, most frequent first, at most limit
// groups.
func (o *Operator) FailureReasons(ctx context.Context, limit, of int) ([]outboxtype.ReasonCount, error) {
	return o.store.FailureReasons(ctx, o.pool, limit, of)
}

// Throughput counts effects confirmed and failed per minute since since.
func (o *Operator) Throughput(ctx context.Context, since time.Time) ([]outboxtype.MinuteCount, error) {
	return o.store.Throughput(ctx, o.pool, since)
}

// EventsOfAggregate lists the events of one aggregate, newest first, with
// their effects. An empty aggType finds aggID under any aggregate type (an
// order id pasted without saying it is an order).
func (o *Operator) EventsOfAggregate(ctx context.Context, aggType, aggID string, limit int) ([]outboxtype.EventEffects, error) {
	return o.store.EventsOfAggregate(ctx, o.pool, aggType, aggID, limit)
}

// EffectsOfEvent lists the effects of event id.
func (o *Operator) EffectsOfEvent(ctx context.Context, id uuid.UUID) ([]*EffectRow, error) {
	return o.store.EffectsOfEvent(ctx, o.pool, id)
}

// ApplyProviderEvent applies a verified provider event in tx (the inbox's,
// so that the event is applied once): it confirms the effect the event
// proves done, records a mail's delivery status, and records drift.
func (o *Operator) ApplyProviderEvent(ctx context.Context, tx pgx.Tx, ev providers.EventReport) (EventResult, error) {
	return o.store.ApplyProviderEvent(ctx, tx, ev)
}

// PurgeInBatches is Purge at the given pace: Yield pauses after each batch
// for as long as the batch took, as the dispatcher's retention job does
// beside live traffic.
func (o *Operator) PurgeInBatches(ctx context.Context, cutoff time.Time, opts outboxtype.PurgeOptions) (outboxtype.PurgeResult, error) {
	return o.store.PurgeInBatches(ctx, o.pool, cutoff, opts)
}

// ExplainReads returns the JSON query plans of the statements behind
// Stuck (effects unchanged since notSince), Stats (window from since), the
// list of failed effects and the retention purge, keyed by name, for
// checking at scale that each reads its index and no table.
func (o *Operator) ExplainReads(ctx context.Context, notSince, since time.Time) (map[string]string, error) {
	return o.store.ExplainAdmin(ctx, o.pool, notSince, since)
}

// JobParams are the River insert parameters of the job that dispatches
// effect id at provider, scheduled for notBefore (nil: at once): for tools
// that write side_effects rows without outbox.Enqueue and insert their
// jobs at once (otherwise the sweeper gives each a job within
// Config.SweepInterval).
func JobParams(id uuid.UUID, provider string, notBefore *time.Time) river.InsertManyParams {
	return engine.JobParams(id, provider, notBefore)
}
