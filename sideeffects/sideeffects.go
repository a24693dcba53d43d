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
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/outboxd/outboxd/internal/engine"
	"github.com/outboxd/outboxd/internal/store"
	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/providers"
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
	d, err := engine.NewDispatcher(pool, cfg.wiring())
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
type Operator struct {
	op *engine.Operator
	// told are the guarantees the operator's own settings give.
	told map[string]providers.Guarantees
}

// NewOperator returns the operator API over cfg.Schema.
func NewOperator(pool *pgxpool.Pool, cfg OperatorConfig) (*Operator, error) {
	op, err := engine.NewOperator(pool, cfg.Schema, cfg.Guarantees, cfg.InDoubt)
	if err != nil {
		return nil, err
	}
	return &Operator{op: op, told: cfg.Guarantees}, nil
}

// KeyWindows is, by provider, how long after the first request with its
// key an effect may still be fired: its key window less the margin. Every
// provider a dispatcher runs is there (brokers and an application's own
// included), as the dispatchers last recorded it; the operator's own
// settings (OperatorConfig.Guarantees) take precedence. A provider with no
// key window is missing.
func (o *Operator) KeyWindows(ctx context.Context) (map[string]time.Duration, error) {
	recorded, err := o.op.Store().AllProviderGuarantees(ctx, o.op.Pool())
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
	return o.op.Store().Get(ctx, o.op.Pool(), id)
}

// Stuck returns pending and fired effects unchanged for olderThan, and
// failed ones not acknowledged, oldest first.
func (o *Operator) Stuck(ctx context.Context, olderThan time.Duration, limit int) ([]StuckEffect, error) {
	return o.op.Store().Stuck(ctx, o.op.Pool(), time.Now().Add(-olderThan), limit)
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
	return o.op.Store().StuckGroups(ctx, o.op.Pool(), now.Add(-olderThan), now.Add(-IncidentWindow), limit)
}

// IncidentWindow is how far back StuckGroups counts failures.
const IncidentWindow = 24 * time.Hour

// Retry moves failed and cancelled effects (fired ones with Force) back to
// pending with a new River job and the same key; see ActionOpts for the
// guards it applies.
func (o *Operator) Retry(ctx context.Context, ids []uuid.UUID, opts ActionOpts) ([]Change, error) {
	return o.op.Retry(ctx, ids, opts)
}

// Requeue gives pending and fired effects without a live River job one.
func (o *Operator) Requeue(ctx context.Context, ids []uuid.UUID, opts ActionOpts) ([]Change, error) {
	return o.op.Requeue(ctx, ids, opts)
}

// EditPayload replaces the payload of a failed effect no provider acted on
// (every attempt refused before any request, or refused for its fields
// by a provider that keeps no result for the key) and sends it back to
// pending with the same key; v, the provider's Validator, must accept the
// new payload. The audit row keeps both payloads. Refused otherwise,
// saying why: such an effect is fixed where it was enqueued.
func (o *Operator) EditPayload(ctx context.Context, id uuid.UUID, payload json.RawMessage, v providers.Validator, opts ActionOpts) (Change, error) {
	return o.op.EditPayload(ctx, id, payload, v, opts)
}

// Cancel makes effects never fire.
func (o *Operator) Cancel(ctx context.Context, ids []uuid.UUID, opts ActionOpts) ([]Change, error) {
	return o.op.Cancel(ctx, ids, opts)
}

// Confirm records that the provider performed an effect, with its
// reference (opts.Ref), after checking the provider. A webhook has none:
// without opts.Ref it is recorded as "webhook-id <its key>", the id the
// receiver logged; any other effect without opts.Ref is skipped, saying so.
func (o *Operator) Confirm(ctx context.Context, id uuid.UUID, opts ActionOpts) (Change, error) {
	return o.op.Confirm(ctx, id, opts)
}

// Acknowledge keeps failed effects failed, reviewed and correct, out of the
// stuck list and the failed-effects alert.
func (o *Operator) Acknowledge(ctx context.Context, ids []uuid.UUID, opts ActionOpts) ([]Change, error) {
	return o.op.Acknowledge(ctx, ids, opts)
}

// Release lets the effects after each one on its ordering key go on, whatever
// becomes of it; its state does not change (docs/ordering.md).
func (o *Operator) Release(ctx context.Context, ids []uuid.UUID, opts ActionOpts) ([]Change, error) {
	return o.op.Release(ctx, ids, opts)
}

// The reads below are what outboxctl and the web view show; each reads
// through an index (docs/performance.md times them at 10 M effects).

// GetByKey returns the effect whose idempotency key is key.
func (o *Operator) GetByKey(ctx context.Context, key string) (*EffectRow, error) {
	return o.op.Store().GetByKey(ctx, o.op.Pool(), key)
}

// List returns effects matching f, newest first (f.After continues a page).
func (o *Operator) List(ctx context.Context, f outboxtype.Filter) ([]*EffectRow, error) {
	return o.op.Store().List(ctx, o.op.Pool(), f)
}

// Stats summarises the effects: live and failed ones in full, confirmed
// and cancelled ones that ended within window (zero: every row kept).
func (o *Operator) Stats(ctx context.Context, window time.Duration) (*outboxtype.Stats, error) {
	return o.op.Store().Stats(ctx, o.op.Pool(), window)
}

// SummarizeMinutes adds the minutes before upTo to the per-minute summary
// that Stats reads (the leader does it every minute by itself): for a
// summary that should hold history from before it began, after moving
// its start back (outboxd_minutes_summarized.since and up_to).
func (o *Operator) SummarizeMinutes(ctx context.Context, upTo time.Time) (time.Time, error) {
	return o.op.Store().SummarizeMinutes(ctx, o.op.Pool(), upTo)
}

// Event returns the event with id.
func (o *Operator) Event(ctx context.Context, id uuid.UUID) (*outboxtype.Event, error) {
	return o.op.Store().Event(ctx, o.op.Pool(), id)
}

// Events lists events matching f, newest first, with their effects.
func (o *Operator) Events(ctx context.Context, f outboxtype.EventFilter) ([]outboxtype.EventEffects, error) {
	return o.op.Store().Events(ctx, o.op.Pool(), f)
}

// Jobs lists the River jobs of effect id, newest first.
func (o *Operator) Jobs(ctx context.Context, id uuid.UUID) ([]outboxtype.Job, error) {
	return o.op.Store().Jobs(ctx, o.op.Pool(), id)
}

// Audit lists the recorded actions on effect id, oldest first.
func (o *Operator) Audit(ctx context.Context, id uuid.UUID) ([]outboxtype.AuditEntry, error) {
	return o.op.Store().Audit(ctx, o.op.Pool(), id)
}

// Attempts lists the failed attempts of effect id, oldest first.
func (o *Operator) Attempts(ctx context.Context, id uuid.UUID) ([]outboxtype.Attempt, error) {
	return o.op.Store().Attempts(ctx, o.op.Pool(), id)
}

// Delivery returns the delivery status a provider reported for the mail
// of effect id (ErrNotFound when none).
func (o *Operator) Delivery(ctx context.Context, id uuid.UUID) (*outboxtype.Delivery, error) {
	return o.op.Store().Delivery(ctx, o.op.Pool(), id)
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
	case profileOf(e.Provider).Answers == providers.AnswersEvents:
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
	return o.op.Store().Drift(ctx, o.op.Pool(), f)
}

// AckDrift records that drift records were reviewed, by actor for reason:
// they leave the default list and the outboxd_drift_unacknowledged gauge.
// It returns the ids it acknowledged now.
func (o *Operator) AckDrift(ctx context.Context, ids []int64, actor, reason string) ([]int64, error) {
	return o.op.Store().AckDrift(ctx, o.op.Pool(), ids, actor, reason)
}

// Limits lists every rate limit key as the replicas share it, with the
// effects waiting for it.
func (o *Operator) Limits(ctx context.Context) ([]outboxtype.LimitReport, error) {
	return engine.LimitReports(ctx, o.op.Store(), o.op.Pool())
}

// SetLimit sets limit key's rate at run time for every replica (within a
// second), kept over the rates replicas are started with; rate nil leaves
// the key no rate of its own (it slows on 429s only). resume ends a 429's
// pause and, once every replica has seen it end, makes the effects waiting
// for the key due (see ResumeLimit). Audited with actor and reason; it
// returns the rate the key had.
func (o *Operator) SetLimit(ctx context.Context, key string, rate *float64, actor, reason string, resume bool) (*float64, error) {
	if rate != nil {
		if err := outboxtype.CheckRate(*rate); err != nil {
			return nil, fmt.Errorf("limit %s: rate %g: %w", key, *rate, err)
		}
	}
	before, err := o.op.Store().SetLimit(ctx, o.op.Pool(), key, rate, actor, reason, resume)
	if err != nil || !resume {
		return before, err
	}
	_, err = o.op.WakeWaiting(ctx, []string{key})
	return before, err
}

// ResumeLimit ends the pause and the lowered rate of limit key (a 429's,
// or a destination that held its effects back, such as a disabled
// endpoint) for every replica, and makes the effects waiting for it due
// now (at most engine's MaxResumeWakes at once; the rest at the time they
// were given). Audited with actor and reason; it returns how many effects
// it woke.
func (o *Operator) ResumeLimit(ctx context.Context, key, actor, reason string) (int, error) {
	return o.op.ResumeLimit(ctx, key, actor, reason)
}

// ResumeLimits is ResumeLimit for each of keys (an operator lifting every
// hold at once), and returns how many effects it woke for each.
func (o *Operator) ResumeLimits(ctx context.Context, keys []string, actor, reason string) (map[string]int, error) {
	return o.op.ResumeLimits(ctx, keys, actor, reason)
}

// LimitHistory lists the run-time changes of key's rate ("" every key),
// newest first, at most limit.
func (o *Operator) LimitHistory(ctx context.Context, key string, limit int) ([]outboxtype.LimitChange, error) {
	return o.op.Store().LimitHistory(ctx, o.op.Pool(), key, limit)
}

// StartReplay starts a paced replay: the effects that failed since
// spec.FailedSince (not acknowledged; of spec.Kind, Provider and Host when
// set) are retried in the background by outboxd at spec.Pace a second, each
// with Retry's refusals and an audit row naming the replay. With
// opts.DryRun it writes nothing and reports how many it would select. A
// restart of outboxd resumes it; CancelReplay stops it (docs/replays.md).
func (o *Operator) StartReplay(ctx context.Context, spec outboxtype.ReplaySpec, opts ActionOpts) (outboxtype.Replay, error) {
	return o.op.StartReplay(ctx, spec, opts)
}

// Replays lists the newest replays, newest first, at most limit.
func (o *Operator) Replays(ctx context.Context, limit int) ([]outboxtype.Replay, error) {
	return o.op.Replays(ctx, limit)
}

// Replay is replay id as it stands; ErrReplayNotFound when there is none.
func (o *Operator) Replay(ctx context.Context, id int64) (outboxtype.Replay, error) {
	return o.op.Replay(ctx, id)
}

// ReplaySkips lists up to limit effects replay id did not retry, and why.
func (o *Operator) ReplaySkips(ctx context.Context, id int64, limit int) ([]outboxtype.ReplaySkip, error) {
	return o.op.ReplaySkips(ctx, id, limit)
}

// CancelReplay stops replay id before its next step; what it retried stays
// retried. It reports false when the replay was not running.
func (o *Operator) CancelReplay(ctx context.Context, id int64, actor, reason string) (bool, error) {
	return o.op.CancelReplay(ctx, id, actor, reason)
}

// ResumeReplay gives a running replay whose River job is gone a new one; it
// reports false when a live job runs it already.
func (o *Operator) ResumeReplay(ctx context.Context, id int64) (bool, error) {
	return o.op.ResumeReplay(ctx, id)
}

// SetReplayPace changes running replay id's pace (effects a second) from
// its next step, by actor for reason, and returns the pace it had; a
// replay waiting for a slow step is woken. It reports false when the
// replay is not running.
func (o *Operator) SetReplayPace(ctx context.Context, id int64, pace float64, actor, reason string) (float64, bool, error) {
	return o.op.SetReplayPace(ctx, id, pace, actor, reason)
}

// ReplayPaces are the changes of replay id's pace, oldest first.
func (o *Operator) ReplayPaces(ctx context.Context, id int64) ([]outboxtype.ReplayPace, error) {
	return o.op.ReplayPaces(ctx, id)
}

// ErrReplayNotFound is returned for a replay id that does not exist.
var ErrReplayNotFound = store.ErrReplayNotFound

// CheckReplaySpec says what is wrong with spec, naming the field, or nil.
func CheckReplaySpec(spec outboxtype.ReplaySpec) error { return engine.CheckReplaySpec(spec) }

// CheckReplayPace says what is wrong with a replay's pace (effects a
// second), or nil.
func CheckReplayPace(pace float64) error { return engine.CheckReplayPace(pace) }

// Tenants lists the tenants with effects waiting for a place in their
// window or in flight (fair shares), the longest queue first, at most limit.
func (o *Operator) Tenants(ctx context.Context, limit int) ([]outboxtype.TenantReport, error) {
	return o.op.Store().TenantReports(ctx, o.op.Pool(), limit)
}

// TenantTotals sums, by provider, every tenant's effects due and waiting
// for a place in its window: how many tenants, how many effects, the
// oldest.
func (o *Operator) TenantTotals(ctx context.Context) ([]outboxtype.TenantTotal, error) {
	return o.op.Store().TenantTotals(ctx, o.op.Pool())
}

// UnacknowledgedDrift counts the drift records nobody acknowledged.
func (o *Operator) UnacknowledgedDrift(ctx context.Context) (int64, error) {
	return o.op.Store().UnacknowledgedDrift(ctx, o.op.Pool())
}

// Dispatchers lists the dispatchers that recorded their settings, newest
// first, at most limit.
func (o *Operator) Dispatchers(ctx context.Context, limit int) ([]outboxtype.DispatcherRecord, error) {
	return o.op.Store().Dispatchers(ctx, o.op.Pool(), limit)
}

// RunningJobs counts the dispatch jobs River marks running, by the
// dispatcher that holds them (a DispatcherRecord's ID): jobs held by a
// dispatcher that stopped or stopped reporting were left by a process that
// died, and wait for River's rescue.
func (o *Operator) RunningJobs(ctx context.Context) ([]outboxtype.RunningJobs, error) {
	return o.op.Store().RunningJobs(ctx, o.op.Pool())
}

// Purge deletes terminal effects that ended before cutoff, and the events
// they leave without effects, in batches at full speed (the dispatcher's
// retention job yields between batches instead). dryRun counts only.
func (o *Operator) Purge(ctx context.Context, cutoff time.Time, dryRun bool) (outboxtype.PurgeResult, error) {
	return o.op.Store().Purge(ctx, o.op.Pool(), cutoff, dryRun)
}

// Policy is the in-doubt policy of effects of kind at provider, with the
// operator's overrides.
func (o *Operator) Policy(provider, kind string) providers.InDoubtPolicy {
	return o.op.Policy(provider, kind)
}

// ByProviderRef returns the effects whose provider reference is ref (a
// Stripe object id such as pi_… or re_…, a SendGrid X-Message-Id or an
// event's sg_message_id, the reference a manual confirmation recorded),
// newest first, at most limit.
func (o *Operator) ByProviderRef(ctx context.Context, ref string, limit int) ([]*EffectRow, error) {
	return o.op.Store().ByProviderRef(ctx, o.op.Pool(), ref, limit)
}

// ByKeyPrefix returns the effects whose idempotency key begins with prefix
// (12 to 64 lowercase hex digits, as outboxctl prints keys), at most limit.
func (o *Operator) ByKeyPrefix(ctx context.Context, prefix string, limit int) ([]*EffectRow, error) {
	return o.op.Store().ByKeyPrefix(ctx, o.op.Pool(), prefix, limit)
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
	return o.op.Store().BlockedBehind(ctx, o.op.Pool(), id)
}

// BlockedChains counts the ordering keys whose chain waits behind an
// earlier effect, the effects waiting, and the age of the oldest.
func (o *Operator) BlockedChains(ctx context.Context) (outboxtype.BlockedChains, error) {
	return o.op.Store().BlockedChains(ctx, o.op.Pool())
}

// WaitingBehind lists the effects after id on its ordering key that have
// not ended, in the order a release of id sends them (at most limit).
func (o *Operator) WaitingBehind(ctx context.Context, id uuid.UUID, limit int) ([]*EffectRow, error) {
	return o.op.Store().WaitingBehind(ctx, o.op.Pool(), id, limit)
}

// StateGauges counts live and failed effects by state and kind, with the
// age of the oldest of each.
func (o *Operator) StateGauges(ctx context.Context) ([]outboxtype.StateGauge, error) {
	return o.op.Store().StateGauges(ctx, o.op.Pool())
}

// FailureReasons groups the newest unacknowledged failed effects, at most
// of of them, by kind and reason, most frequent first, at most limit
// groups.
func (o *Operator) FailureReasons(ctx context.Context, limit, of int) ([]outboxtype.ReasonCount, error) {
	return o.op.Store().FailureReasons(ctx, o.op.Pool(), limit, of)
}

// Throughput counts effects confirmed and failed per minute since since.
func (o *Operator) Throughput(ctx context.Context, since time.Time) ([]outboxtype.MinuteCount, error) {
	return o.op.Store().Throughput(ctx, o.op.Pool(), since)
}

// EventsOfAggregate lists the events of one aggregate, newest first, with
// their effects. An empty aggType finds aggID under any aggregate type (an
// order id pasted without saying it is an order).
func (o *Operator) EventsOfAggregate(ctx context.Context, aggType, aggID string, limit int) ([]outboxtype.EventEffects, error) {
	return o.op.Store().EventsOfAggregate(ctx, o.op.Pool(), aggType, aggID, limit)
}

// EffectsOfEvent lists the effects of event id.
func (o *Operator) EffectsOfEvent(ctx context.Context, id uuid.UUID) ([]*EffectRow, error) {
	return o.op.Store().EffectsOfEvent(ctx, o.op.Pool(), id)
}

// ApplyProviderEvent applies a verified provider event in tx (the inbox's,
// so that the event is applied once): it confirms the effect the event
// proves done, records a mail's delivery status, and records drift.
func (o *Operator) ApplyProviderEvent(ctx context.Context, tx pgx.Tx, ev providers.EventReport) (EventResult, error) {
	return o.op.Store().ApplyProviderEvent(ctx, tx, ev)
}

// PurgeInBatches is Purge at the given pace: Yield pauses after each batch
// for as long as the batch took, as the dispatcher's retention job does
// beside live traffic.
func (o *Operator) PurgeInBatches(ctx context.Context, cutoff time.Time, opts outboxtype.PurgeOptions) (outboxtype.PurgeResult, error) {
	return o.op.Store().PurgeInBatches(ctx, o.op.Pool(), cutoff, opts)
}

// ExplainReads returns the JSON query plans of the statements behind
// Stuck (effects unchanged since notSince), Stats (window from since), the
// list of failed effects and the retention purge, keyed by name, for
// checking at scale that each reads its index and no table.
func (o *Operator) ExplainReads(ctx context.Context, notSince, since time.Time) (map[string]string, error) {
	return o.op.Store().ExplainAdmin(ctx, o.op.Pool(), notSince, since)
}

// JobParams are the River insert parameters of the job that dispatches
// effect id at provider, scheduled for notBefore (nil: at once): for tools
// that write side_effects rows without outbox.Enqueue and insert their
// jobs at once (otherwise the sweeper gives each a job within
// Config.SweepInterval).
func JobParams(id uuid.UUID, provider string, notBefore *time.Time) river.InsertManyParams {
	return engine.JobParams(id, provider, notBefore)
}

func profileOf(provider string) providers.Profile {
	p, _ := providers.ProfileOf(provider)
	return p
}
