package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/outboxd/outboxd/internal/store"
	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/providers"
)

// Worker is the River worker that fires one side effect per job.
type Worker struct {
	river.WorkerDefaults[DispatchArgs]

	pool      *pgxpool.Pool
	store     *store.Store
	providers map[string]providers.Provider
	// providerNames are the keys of providers, for SQL.
	providerNames []string
	inDoubt       map[string]providers.InDoubtPolicy
	// secrets are every provider's credentials, removed from error texts
	// before they are logged or stored (last_error, River's job errors).
	secrets []string
	retry   outboxtype.RetryPolicy
	// maxDelay bounds what a provider's answer may ask outboxd to wait;
	// boundedAt is when this process last raised the event of a bounded
	// delay, by limit key (once per maxDelay and key: a 429 storm is one
	// alert, not one per effect).
	maxDelay  time.Duration
	boundedAt sync.Map // limit key -> time.Time
	logger    *slog.Logger
	metrics   outboxtype.Observer
	// tracer, when set, traces each dispatch and provider call;
	// traceparents hands the trace context of an effect's event from the
	// batched claim to its dispatch (effect id -> traceparent).
	tracer       outboxtype.Tracer
	traceparents sync.Map
	// client inserts the job of the next effect of an ordering key in the
	// transaction that confirms the one before it.
	client *river.Client[pgx.Tx]

	// retryAt hands the time chosen in Work to NextRetry, which River calls
	// right after Work returns an error for the same job (or to the batch
	// that hands the effect to a job of its own). Keyed by effect: an
	// effect has one live job at a time.
	retryAt sync.Map // effect id -> time.Time

	// claims and confirms group the first claims and the confirmations of
	// concurrent workers into one statement and commit each.
	claims   *batcher[uuid.UUID, *outboxtype.Effect]
	confirms *batcher[confirmReq, outboxtype.State]
	// events groups the reads of the events that brokers publish.
	events *batcher[uuid.UUID, *outboxtype.Event]

	// limits are the rate limits shared with every replica;
	// accountLimits the limit key every request of a provider counts
	// against (its account), by provider.
	limits        *limiter
	accountLimits map[string]string
	// accountWait is how long a worker waits for its account's token
	// before its job is snoozed (accountWaitFor).
	accountWait time.Duration
	// tenants is poked when an effect with a tenant is done with here:
	// its tenant's window may have a place for the next.
	tenants *tenantFeeder

	// beforeConfirm, when set by tests, runs between the provider's
	// acknowledgement and the confirming transaction.
	beforeConfirm func(ctx context.Context) error
}

// confirmReq is one acknowledgement waiting to be recorded.
type confirmReq struct {
	effect *outboxtype.Effect
	res    providers.Result
	jobID  int64
}

func (w *Worker) startBatchers() {
	if w.claims == nil {
		w.claims = newBatcher(w.claimFirstMany)
		w.confirms = newBatcher(w.confirmMany)
		w.events = newBatcher(w.eventsMany)
	}
	w.claims.start()
	w.confirms.start()
	w.events.start()
}

func (w *Worker) stopBatchers() {
	if w.claims != nil {
		w.claims.stopBatcher()
		w.confirms.stopBatcher()
		w.events.stopBatcher()
	}
}

// claimFirstMany claims the first attempt of every effect in ids that is
// due one, in one statement; the others get nil.
func (w *Worker) claimFirstMany(ctx context.Context, ids []uuid.UUID) ([]*outboxtype.Effect, error) {
	var claimed map[uuid.UUID]*outboxtype.Effect
	var err error
	if w.tracer != nil {
		// The events' trace contexts come with the claim, for the
		// dispatch spans (startDispatch).
		var tps map[uuid.UUID]string
		claimed, tps, err = w.store.ClaimFirstManyTraced(ctx, w.pool, ids, w.providerNames)
		for id, tp := range tps {
			w.traceparents.Store(id, tp)
		}
	} else {
		claimed, err = w.store.ClaimFirstMany(ctx, w.pool, ids, w.providerNames)
	}
	if err != nil {
		return nil, err
	}
	// An effect asked for twice in one statement (its own job and a batch
	// it is in, in this process) is claimed once: only the first asking
	// gets it, so only one of them fires it.
	out := make([]*outboxtype.Effect, len(ids))
	for i, id := range ids {
		if e, ok := claimed[id]; ok {
			out[i] = e
			delete(claimed, id)
		}
	}
	return out, nil
}

// eventsMany reads the events of many effects (by their source ids) in
// one statement; nil for an id with none.
func (w *Worker) eventsMany(ctx context.Context, ids []uuid.UUID) ([]*outboxtype.Event, error) {
	byID, err := w.store.EventsByID(ctx, w.pool, ids)
	if err != nil {
		return nil, err
	}
	out := make([]*outboxtype.Event, len(ids))
	for i, id := range ids {
		out[i] = byID[id]
	}
	return out, nil
}

// confirmMany records many acknowledgements in one transaction; see
// confirm for what each result means.
func (w *Worker) confirmMany(ctx context.Context, reqs []confirmReq) ([]outboxtype.State, error) {
	out := make([]outboxtype.State, len(reqs))
	acks := make([]store.Ack, len(reqs))
	for i, r := range reqs {
		acks[i] = store.Ack{ID: r.effect.ID, Ref: r.res.Ref, Replayed: r.res.Replayed}
	}
	err := pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		// A transaction that gives the next effects of their keys their
		// jobs (nextInChains) says so: the end trigger need not wake them.
		chained := w.client != nil && slices.ContainsFunc(reqs, func(r confirmReq) bool { return r.effect.OrderingKey != nil })
		confirmed, err := w.store.ConfirmMany(ctx, tx, acks, chained)
		if err != nil {
			return err
		}
		if err := w.nextInChains(ctx, tx, reqs, confirmed); err != nil {
			return err
		}
		for i, r := range reqs {
			cf, ok := confirmed[r.effect.ID]
			out[i] = cf.State
			if ok && cf.State == outboxtype.StateFired {
				continue
			}
			details := map[string]any{"provider_ref": r.res.Ref, "replayed": r.res.Replayed, "attempt": r.effect.Attempts, "job_id": r.jobID}
			if !ok {
				if _, err := w.store.RecordLateAck(ctx, tx, r.effect.ID, r.res.Ref, details,
					"acknowledged by the provider after an operator's action: the provider did act; state kept"); err != nil {
					return err
				}
				continue
			}
			details["cleared_error"] = cf.LastError
			if err := w.store.RecordAudit(ctx, tx, r.effect.ID, outboxtype.ActionLateAck, actorOutboxd,
				"acknowledged by the provider after an operator moved it to "+string(cf.State)+": the provider did act",
				cf.State, outboxtype.StateConfirmed, details); err != nil {
				return err
			}
		}
		return nil
	})
	return out, err
}

// nextInChains gives the next effect of each ordering key whose effect this
// batch confirmed its dispatch job, in the confirming transaction: a chain
// moves without waiting for the intake to read the wake the confirmation
// left (it still does, and finds the job there).
func (w *Worker) nextInChains(ctx context.Context, tx pgx.Tx, reqs []confirmReq, confirmed map[uuid.UUID]store.ConfirmedFrom) error {
	var keys []string
	for _, r := range reqs {
		if _, ok := confirmed[r.effect.ID]; ok && r.effect.OrderingKey != nil && w.client != nil {
			keys = append(keys, *r.effect.OrderingKey)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	return nextInChains(ctx, w.store, tx, w.client, keys)
}

// Work implements river.Worker.
func (w *Worker) Work(ctx context.Context, job *river.Job[DispatchArgs]) error {
	return forRiver(w.work(ctx, job, false))
}

// forRiver is what River receives of a provider's error: its summary
// (class and status, keys cut), not the receiver's body. River logs it at
// INFO, keeps it in river_job.errors and otelriver puts it in a span's
// status; the whole answer, redacted, is in last_error and the attempt
// history. Other errors (the database's) reach River as they are.
func forRiver(err error) error {
	var pe *providers.Error
	if err == nil || !errors.As(err, &pe) {
		return err
	}
	var cancel *rivertype.JobCancelError
	if errors.As(err, &cancel) {
		return river.JobCancel(errors.New(providers.Summary(cancel.Unwrap())))
	}
	var snoozed *rivertype.JobSnoozeError
	if errors.As(err, &snoozed) {
		return err
	}
	return errors.New(providers.Summary(err))
}

// errNotFirst is what work returns, in a batch, for an effect that was not
// due its first attempt: it is handed to a job of its own (batchWorker).
var errNotFirst = errors.New("not due a first attempt")

// work makes the attempt job's effect is due. In a batch (firstOnly) it
// makes only a first attempt, and returns errNotFirst for an effect that
// is not due one: every other claim is made by the effect's own job.
func (w *Worker) work(ctx context.Context, job *river.Job[DispatchArgs], firstOnly bool) error {
	id := job.Args.EffectID
	// A provider's account limit is taken before the claim: a worker that
	// waits for a token holds no effect (the queue is the provider's own,
	// so its workers waiting delay no other provider).
	var due time.Time
	if key := w.accountLimits[job.Queue]; key != "" {
		var ok bool
		var wait time.Duration
		var err error
		due, ok, wait, err = w.limits.takeDue(ctx, key, w.accountWait, false)
		if err != nil {
			return err
		}
		if !ok {
			w.markWaiting(ctx, id, key)
			return snooze(wait)
		}
	}
	// Most jobs are an effect's first attempt: claimed together with the
	// first attempts of other workers, in one statement.
	claimed, err := w.claims.do(ctx, id)
	if err != nil {
		return err
	}
	// before is the effect as it was before the claim, to undo it.
	before := &outboxtype.Effect{ID: id, State: outboxtype.StatePending}
	if claimed == nil && firstOnly {
		return errNotFirst
	}
	if claimed == nil {
		if claimed, before, err = w.claimAgain(ctx, id); claimed == nil {
			return err
		}
	}
	if claimed.Tenant != nil {
		defer w.tenants.poke()
	}
	// While the account's limit binds, the request goes out a moment
	// after its time, however long the claim took (sendDue).
	if err := sendDue(ctx, due); err != nil {
		if _, uerr := w.store.Unclaim(context.WithoutCancel(ctx), w.pool, before); uerr != nil {
			return uerr
		}
		return err
	}
	if w.tracer == nil {
		return w.fire(ctx, job, claimed, before, nil)
	}
	ctx, span := w.startDispatch(ctx, claimed)
	err = w.fire(ctx, job, claimed, before, span)
	span.End(err)
	return err
}

// fire makes one attempt of claimed, which this worker has just claimed
// (before is the effect as it was before the claim, to undo it), and
// records its outcome; span, when tracing, is the dispatch's span.
func (w *Worker) fire(ctx context.Context, job *river.Job[DispatchArgs], claimed, before *outboxtype.Effect, span outboxtype.Span) error {
	id := claimed.ID
	// Both claims take only effects of providers this process has.
	p := w.providers[claimed.Provider]
	a := admission{limitKey: w.limitKey(p, claimed), release: func(error) {}}
	if r := w.admit(ctx, p, claimed, &a); r != nil {
		a.release(providers.ErrNotAttempted)
		return w.comeBackLater(ctx, before, r)
	}
	event, release, limitKey := a.event, a.release, a.limitKey
	// The destination's slot is held for the request only, not for the
	// bookkeeping after it: freed as soon as Send returns, or on the way
	// out if Send was never reached (or panicked).
	slotFreed := false
	defer func() {
		if !slotFreed {
			release(providers.ErrNotAttempted)
		}
	}()
	log := effectLogger(w.logger, id, claimed)
	w.metrics.Observe(outboxtype.Transitioned{Effect: claimed, To: outboxtype.StateFired})
	callCtx, call := ctx, outboxtype.Span(nil)
	if span != nil {
		log = log.With(span.LogAttrs()...)
		callCtx, call = w.startCall(ctx, claimed)
	}

	start := time.Now()
	var tenant string
	if claimed.Tenant != nil {
		tenant = *claimed.Tenant
	}
	res, sendErr := p.Send(callCtx, providers.Request{
		EffectID: id.String(),
		Kind:     claimed.Kind,
		Key:      claimed.IdempotencyKey,
		Payload:  claimed.Payload,
		Attempt:  claimed.Attempts,
		EventID:  claimed.SourceID.String(),
		Event:    event,
		Tenant:   tenant,
	})
	sendErr = providers.Redact(sendErr, w.secrets)
	if call != nil {
		endCall(call, span, res, sendErr)
	}
	slotFreed = true
	release(sendErr)
	w.metrics.Observe(outboxtype.ProviderCalled{Effect: claimed, Duration: time.Since(start), Err: sendErr, Result: res})

	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bookkeepingTimeout)
	defer cancel()
	if limitKey != "" && !providers.IsThrottled(sendErr) && !providers.IsOverloaded(sendErr) {
		// Not refused for rate nor overloaded: the key took it.
		w.limits.accepted(limitKey)
	}
	if sendErr == nil {
		return w.acknowledged(bctx, log, job, claimed, res, w.policy(claimed.Kind, p.Guarantees()))
	}
	return w.attemptFailed(bctx, log, job, p, claimed, before, start, sendErr, limitKey)
}

// admission is what the admitters found before a request may be sent:
// the event a broker relays, the release of the destination's slot, and
// the limit key the request counts against.
type admission struct {
	event    *providers.SourceEvent
	release  func(error)
	limitKey string
}

// refusal is an admitter's "not now": the claim is undone (no request was
// made, no attempt counts) and the job comes back after wait, waiting for
// key when one is named; or err, returned to River.
type refusal struct {
	wait time.Duration
	key  string
	err  error
}

// admit runs the admitters in order, each on what the ones before it
// found; the first refusal ends it. (An account's token was taken before
// the claim.)
func (w *Worker) admit(ctx context.Context, p providers.Provider, claimed *outboxtype.Effect, a *admission) *refusal {
	for _, step := range []func(context.Context, providers.Provider, *outboxtype.Effect, *admission) *refusal{
		w.admitEvent, w.admitGate, w.admitLimits,
	} {
		if r := step(ctx, p, claimed, a); r != nil {
			return r
		}
	}
	return nil
}

// admitEvent reads the event of claimed for a provider that relays it
// itself (a broker).
func (w *Worker) admitEvent(ctx context.Context, p providers.Provider, claimed *outboxtype.Effect, a *admission) *refusal {
	ep, ok := p.(providers.EventPublisher)
	if !ok || !ep.PublishesEvents() {
		return nil
	}
	ev, err := w.events.do(ctx, claimed.SourceID)
	if err == nil && ev == nil {
		err = fmt.Errorf("event %s of effect %s: %w", claimed.SourceID, claimed.ID, pgx.ErrNoRows)
	}
	if err != nil {
		return &refusal{err: err}
	}
	a.event = &providers.SourceEvent{ID: ev.ID.String(), Type: ev.Type, AggregateType: ev.AggregateType, AggregateID: ev.AggregateID, Payload: ev.Payload, OccurredAt: ev.CreatedAt}
	return nil
}

// admitGate takes a slot of the destination, for a provider that caps
// calls per destination (and breaks the circuit of one that hangs).
func (w *Worker) admitGate(ctx context.Context, p providers.Provider, claimed *outboxtype.Effect, a *admission) *refusal {
	gate, ok := p.(providers.Gate)
	if !ok {
		return nil
	}
	release, wait, ok := gate.Admit(ctx, claimed.Payload)
	if !ok {
		return &refusal{wait: wait}
	}
	a.release = release
	return nil
}

// admitLimits takes a token of the destination's limit, of the tenant's
// own rate, when one is set (tenant:<name>; a key with no rate costs
// nothing), and of the pace of the replay that retried the effect
// (replay:<id>), so that its retries keep that pace too. A destination
// is known from the payload only: the worker waits for a token briefly
// (the webhook queue serves every destination), then the job waits its
// turn.
func (w *Worker) admitLimits(ctx context.Context, _ providers.Provider, claimed *outboxtype.Effect, a *admission) *refusal {
	var waitFor []string
	if a.limitKey != "" && a.limitKey != w.accountLimits[claimed.Provider] {
		waitFor = append(waitFor, a.limitKey)
	}
	if claimed.Tenant != nil && w.limits != nil {
		waitFor = append(waitFor, TenantLimitPrefix+*claimed.Tenant)
	}
	if claimed.ReplayID != nil && w.limits != nil {
		waitFor = append(waitFor, ReplayLimitKey(*claimed.ReplayID))
	}
	for _, key := range waitFor {
		ok, wait, err := w.limits.take(ctx, key, destinationWait, true)
		if err != nil {
			return &refusal{err: err}
		}
		if !ok {
			return &refusal{wait: wait, key: key}
		}
	}
	return nil
}

// comeBackLater is the one way out of a refused admission: the claim of
// before is undone, and the job waits as r says.
func (w *Worker) comeBackLater(ctx context.Context, before *outboxtype.Effect, r *refusal) error {
	if r.err == nil && r.key != "" {
		// Turned away by a limit key: it waits for it, said in the same
		// statement, whether it goes back to pending or (its last
		// request in doubt) to fired.
		if _, err := w.store.UnclaimWaiting(context.WithoutCancel(ctx), w.pool, before, r.key); err != nil {
			return err
		}
		return snooze(r.wait)
	}
	if _, err := w.store.Unclaim(context.WithoutCancel(ctx), w.pool, before); err != nil {
		return err
	}
	if r.err != nil {
		return r.err
	}
	return snooze(r.wait)
}

// acknowledged records the provider's acknowledgement of claimed.
func (w *Worker) acknowledged(bctx context.Context, log *slog.Logger, job *river.Job[DispatchArgs], claimed *outboxtype.Effect, res providers.Result, policy providers.InDoubtPolicy) error {
	from, err := w.confirm(bctx, job, claimed, res)
	if err != nil {
		// Still fired: the next attempt applies the in-doubt policy.
		log.Warn(confirmFailedNote(policy), "error", err, "provider_ref", res.Ref)
		return err
	}
	switch from {
	case outboxtype.StateFired:
		w.metrics.Observe(outboxtype.Transitioned{Effect: claimed, To: outboxtype.StateConfirmed})
		log.Debug("effect confirmed", "provider_ref", res.Ref, "replayed", res.Replayed)
	case "":
		log.Warn("provider acknowledged an effect an operator had cancelled or confirmed meanwhile; acknowledgement recorded in its audit trail, state kept",
			"provider_ref", res.Ref)
	default:
		w.metrics.Observe(outboxtype.Transitioned{Effect: claimed, To: outboxtype.StateConfirmed})
		log.Warn("provider acknowledged an effect an operator had moved meanwhile; confirmed, recorded in its audit trail",
			"from", from, "provider_ref", res.Ref)
	}
	return nil
}

// attemptFailed records a failed attempt of claimed (started at start) and
// decides what follows: fail it, or retry it later with the same key.
// before is the effect as it was before the claim; limitKey the limit its
// request counted against ("" for none).
func (w *Worker) attemptFailed(bctx context.Context, log *slog.Logger, job *river.Job[DispatchArgs], p providers.Provider,
	claimed, before *outboxtype.Effect, start time.Time, sendErr error, limitKey string) error {
	id := claimed.ID
	g := p.Guarantees()
	policy := w.policy(claimed.Kind, g)
	class, after := providers.Classify(sendErr)
	after = w.boundDelay(bctx, log, claimed, limitKey, after)
	if limitKey != "" && providers.IsThrottled(sendErr) {
		return w.throttled(bctx, log, p, claimed, before, start, sendErr, limitKey, after)
	}
	if limitKey != "" && providers.IsOverloaded(sendErr) {
		after = w.overloaded(bctx, log, claimed, start, sendErr, limitKey, after)
	}
	host, outcome := "", class.String()
	if h, ok := p.(providers.Hoster); ok {
		host = h.Host(claimed.Payload)
	}
	if providers.IsRefused(sendErr) {
		// No request was made: no host was called.
		host, outcome = "", "refused"
	}
	if err := w.store.RecordAttempt(bctx, w.pool, outboxtype.Attempt{EffectID: id, Attempt: claimed.TotalAttempts, StartedAt: start,
		Duration: time.Since(start), Outcome: outcome, Error: sendErr.Error(), Host: host}); err != nil {
		log.Warn("could not record the attempt in its history", "record_error", err)
	}
	// Logs say the class and status; the answer's body is in last_error
	// and the attempt history, for operators.
	log = log.With("class", class.String(), "error", providers.Summary(sendErr))
	// The answer proves this attempt was not applied (a refusal, a 429);
	// the effect stays in doubt only if an earlier request with the key may
	// have been.
	priorDoubt := before.InDoubt || before.State == outboxtype.StateFired
	proven := class == providers.ClassPermanent || class == providers.ClassRetryable
	switch {
	case class == providers.ClassPermanent:
		return w.failProven(bctx, log, claimed, sendErr.Error(), sendErr, priorDoubt)
	case class == providers.ClassInDoubt && policy == providers.AtMostOnce:
		return w.fail(bctx, log, claimed, outboxtype.ReasonInDoubt+": "+unclassified(sendErr), sendErr)
	case claimed.Attempts >= w.retry.MaxAttempts:
		reason := fmt.Sprintf("retries exhausted after %d attempts: %v", claimed.Attempts, sendErr)
		if proven {
			return w.failProven(bctx, log, claimed, reason, sendErr, priorDoubt)
		}
		return w.fail(bctx, log, claimed, reason, sendErr)
	}

	next := time.Now().Add(max(after, w.retry.Delay(claimed.Attempts)))
	if deadline := keyDeadline(claimed, g); !deadline.IsZero() && next.After(deadline) {
		return w.fail(bctx, log, claimed, fmt.Sprintf("%s (last error: %v)", outboxtype.ReasonKeyWindow, sendErr), sendErr)
	}
	var err error
	if class == providers.ClassRetryable {
		var released bool
		released, err = w.store.Release(bctx, w.pool, id, sendErr.Error(), next, priorDoubt)
		if released {
			w.metrics.Observe(outboxtype.Transitioned{Effect: claimed, To: outboxtype.StatePending})
		}
	} else {
		_, err = w.store.RecordInDoubt(bctx, w.pool, id, sendErr.Error(), next)
	}
	if err != nil {
		log.Error("recording attempt failed", "record_error", err)
	}
	log.Warn("attempt failed; will retry", "next_attempt_at", next)
	w.retryAt.Store(id, next)
	return sendErr
}

// snooze is every "come back later" of a job: River's JobSnooze, which
// panics on a negative wait, with the wait at least zero. A wait computed
// as "until a time" is negative as soon as that time has passed, which it
// may have between the check and the computation.
func snooze(wait time.Duration) error { return river.JobSnooze(max(wait, 0)) }

// boundDelay is the delay a provider named (after), bounded by maxDelay: a
// Retry-After of years, an HTTP date in year 9999 or milliseconds sent as
// seconds would otherwise pause a limit key that every replica and every
// effect to that destination share, with nothing failing and so nothing
// alerting. A bounded delay is logged and raised as the operational event
// outboxd.provider.delay_bounded (per limit key, at most once per maxDelay
// by this process).
func (w *Worker) boundDelay(ctx context.Context, log *slog.Logger, claimed *outboxtype.Effect, limitKey string, after time.Duration) time.Duration {
	if w.maxDelay <= 0 || after <= w.maxDelay {
		return after
	}
	log.Warn("the provider asked outboxd to wait longer than --max-provider-delay: it waits that long instead",
		"asked", after, "bound", w.maxDelay, "limit", limitKey)
	if limitKey != "" {
		now := time.Now()
		if last, ok := w.boundedAt.Load(limitKey); ok && now.Sub(last.(time.Time)) < w.maxDelay {
			return w.maxDelay
		}
		w.boundedAt.Store(limitKey, now)
	}
	if err := w.store.DelayBounded(ctx, w.pool, claimed, limitKey, after, w.maxDelay); err != nil {
		log.Warn("could not raise the operational event of a bounded delay", "record_error", err)
	}
	return w.maxDelay
}

// overloaded slows limit key down for every replica because its
// destination said it is overloaded (a 503): paused for after (or the base
// pause) and its rate lowered, as after a 429, so that retries and the
// deliveries behind them stop adding to the load. The attempt keeps its
// class; it returns the delay before claimed's own retry, at least until
// the pause ends.
func (w *Worker) overloaded(bctx context.Context, log *slog.Logger, claimed *outboxtype.Effect, start time.Time, sendErr error, key string, after time.Duration) time.Duration {
	until, first, err := w.limits.throttled(bctx, key, after, start)
	if err != nil {
		log.Warn("could not slow the limit of an overloaded destination", "limit", key, "record_error", err)
		return after
	}
	w.metrics.Observe(outboxtype.Throttled{Effect: claimed, Key: key, Until: until})
	if first {
		log.Info("limit paused on the destination's answer (a 503, overloaded): every replica waits", "limit", key, "until", until, "error", providers.Summary(sendErr))
	}
	return max(after, time.Until(until))
}

// throttled handles a provider's 429 for claimed, whose request counts
// against limit key: the key pauses for every replica and slows down, and
// the effect waits for it, pending, without the attempt counting.
func (w *Worker) throttled(bctx context.Context, log *slog.Logger, p providers.Provider, claimed, before *outboxtype.Effect,
	start time.Time, sendErr error, key string, after time.Duration) error {
	held := providers.IsHeld(sendErr)
	pause := w.limits.throttled
	if held {
		pause = w.limits.held
	}
	until, first, err := pause(bctx, key, after, start)
	if err != nil {
		return err
	}
	w.metrics.Observe(outboxtype.Throttled{Effect: claimed, Key: key, Until: until})
	switch {
	case first && providers.IsUnreachable(sendErr):
		log.Info("destination out of reach, nothing sent: what goes to it waits, spending no attempt, and goes out at its full rate once it answers", "limit", key, "until", until, "error", providers.Summary(sendErr))
	case first && held:
		log.Info("destination held on outboxd's side (a disabled endpoint): its deliveries wait, spending no attempt", "limit", key, "until", until, "error", providers.Summary(sendErr))
	case first:
		log.Info("limit paused on the provider's answer (a 429): every replica waits", "limit", key, "until", until, "error", providers.Summary(sendErr))
	default:
		log.Debug("refused for rate during a pause of its limit", "limit", key, "error", providers.Summary(sendErr))
	}
	if held {
		// Nothing was sent: the claim is undone (attempts, key window and
		// doubt as they were) and the effect waits, pending, for the hold
		// to end or be lifted.
		if _, err := w.store.ReleaseHeld(context.WithoutCancel(bctx), w.pool, before, sendErr.Error(), key); err != nil {
			return err
		}
		return snooze(time.Until(until.Add(jitterUpTo(time.Second))))
	}
	host := ""
	if h, ok := p.(providers.Hoster); ok {
		host = h.Host(claimed.Payload)
	}
	if err := w.store.RecordAttempt(bctx, w.pool, outboxtype.Attempt{EffectID: claimed.ID, Attempt: claimed.TotalAttempts, StartedAt: start,
		Duration: time.Since(start), Outcome: OutcomeThrottled, Error: "limit " + key + ": " + sendErr.Error(), Host: host}); err != nil {
		log.Warn("could not record the attempt in its history", "record_error", err)
	}
	next := until.Add(jitterUpTo(time.Second))
	if deadline := keyDeadline(claimed, p.Guarantees()); !deadline.IsZero() && next.After(deadline) {
		return w.fail(bctx, log, claimed, fmt.Sprintf("%s (waiting for limit %s; last error: %v)", outboxtype.ReasonKeyWindow, key, sendErr), sendErr)
	}
	priorDoubt := before.InDoubt || before.State == outboxtype.StateFired
	released, err := w.store.ReleaseThrottled(bctx, w.pool, claimed.ID, sendErr.Error(), next, priorDoubt, key)
	if err != nil {
		return err
	}
	if released {
		w.metrics.Observe(outboxtype.Transitioned{Effect: claimed, To: outboxtype.StatePending})
	}
	return snooze(time.Until(next))
}

// limitKey is the limit claimed's request counts against: its provider's
// account, or its destination (read from the payload); "" when none.
func (w *Worker) limitKey(p providers.Provider, claimed *outboxtype.Effect) string {
	if key := w.accountLimits[claimed.Provider]; key != "" {
		return key
	}
	if lp, ok := p.(providers.Limited); ok && w.limits != nil {
		return lp.Limit(claimed.Payload).Key
	}
	return ""
}

// markWaiting records, best effort, that effect id waits for limit key.
func (w *Worker) markWaiting(ctx context.Context, id uuid.UUID, key string) {
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bookkeepingTimeout)
	defer cancel()
	if err := w.store.MarkWaiting(mctx, w.pool, id, key); err != nil {
		w.logger.Debug("could not record that an effect waits for its limit", "effect_id", id, "limit", key, "error", err)
	}
}

// claimAgain handles every claim but the first: a retry, an in-doubt
// re-fire, or an effect that must not be fired. It returns the claimed
// effect and the effect as it was before, or nil with the error Work should
// return.
func (w *Worker) claimAgain(ctx context.Context, id uuid.UUID) (claimed, before *outboxtype.Effect, err error) {
	e, err := w.store.Get(ctx, w.pool, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil, river.JobCancel(err)
	}
	if err != nil {
		return nil, nil, err
	}
	if e.State.Terminal() {
		// Confirmed, failed and cancelled effects are never fired again.
		w.logger.Info("effect already "+string(e.State)+", not fired", "effect_id", id, "kind", e.Kind, "provider", e.Provider)
		return nil, nil, nil
	}
	if e.State == outboxtype.StateFired {
		// Fired by a batch that is still running: its call may be in
		// flight. The batch hands the effect over if it dies (a rescued
		// batch gives its effects jobs of their own); until then this job
		// waits. An effect's own job and a batch meet when two wakes of
		// its ordering key are taken at once, or when an operator's
		// requeue races the intake.
		batch, err := w.store.RunningBatchOf(ctx, w.pool, id)
		if err != nil {
			return nil, nil, err
		}
		if batch != 0 {
			w.logger.Info("effect fired by a batch job still running: its own job waits", "effect_id", id, "batch_job", batch)
			return nil, nil, snooze(batchWait)
		}
	}
	p, ok := w.providers[e.Provider]
	if !ok {
		return nil, nil, fmt.Errorf("effect %s: provider %q is not configured on this outboxd", id, e.Provider)
	}
	if e.NotBefore != nil && time.Now().Before(*e.NotBefore) {
		// A job that runs before the effect is due (its schedule moved, or
		// a sweep or redrive inserted it) waits for it.
		return nil, nil, snooze(time.Until(*e.NotBefore))
	}
	g := p.Guarantees()
	log := effectLogger(w.logger, id, e)
	if (e.State == outboxtype.StateFired || e.InDoubt) && w.policy(e.Kind, g) == providers.AtMostOnce {
		// An earlier request never reported back (a crash, a rescued job, or
		// an operator's redrive of an effect in doubt).
		why := "previous attempt did not finish"
		if e.State != outboxtype.StateFired {
			why = "an earlier request's outcome is unknown"
		}
		return nil, nil, w.fail(ctx, log, e, outboxtype.ReasonInDoubt+": "+why, nil)
	}
	if deadline := keyDeadline(e, g); !deadline.IsZero() && !time.Now().Before(deadline) {
		return nil, nil, w.fail(ctx, log, e, outboxtype.ReasonKeyWindow, nil)
	}
	claimed, err = w.store.Claim(ctx, w.pool, id, e.State)
	if err != nil {
		return nil, nil, err
	}
	if claimed == nil && e.OrderingKey != nil {
		head, err := w.store.BlockedBehind(ctx, w.pool, id)
		if err != nil {
			return nil, nil, err
		}
		if head != nil {
			// An earlier effect of its ordering key has not ended. The job
			// waits; when the chain moves, the intake makes it available at
			// once (WakeChains), and the snooze only bounds a missed wake.
			log.Info("effect waits behind an earlier effect of its ordering key", "ordering_key", *e.OrderingKey, "behind", *head)
			return nil, nil, snooze(blockedSnooze(e))
		}
	}
	if claimed == nil {
		log.Info("effect changed state before it was fired; not firing")
	}
	return claimed, e, nil
}

// confirmFailedNote says what happens to an effect the provider acknowledged
// but whose confirmation could not be recorded: it is still fired, and its
// next attempt applies policy.
func confirmFailedNote(policy providers.InDoubtPolicy) string {
	if policy == providers.AtMostOnce {
		return "provider acknowledged but confirm failed; at_most_once: the next attempt parks it in doubt for review, not re-sent (the provider did act: confirm it with its reference)"
	}
	return "provider acknowledged but confirm failed; will re-fire with the same key (the provider answers from its idempotency record)"
}

// blockedSnooze is how long a job whose effect waits behind its ordering
// key sleeps before it looks again: a quarter of the effect's age, between
// a second and five minutes.
func blockedSnooze(e *outboxtype.Effect) time.Duration {
	return min(max(time.Since(e.CreatedAt)/4, time.Second), 5*time.Minute)
}

func (w *Worker) policy(kind string, g providers.Guarantees) providers.InDoubtPolicy {
	if pol, ok := w.inDoubt[kind]; ok {
		return pol
	}
	return g.InDoubt
}

// confirm records the provider's acknowledgement, together with those of
// other workers, in one transaction committed before the job counts as
// done (River completes it afterwards; a job that runs again for a
// confirmed effect does nothing). It returns the state the effect left:
// fired normally; pending or failed when an operator moved it while the
// call was in flight (it is confirmed all the same: the provider acted); ""
// when it was cancelled or confirmed meanwhile, and the acknowledgement is
// kept in its audit trail.
func (w *Worker) confirm(ctx context.Context, job *river.Job[DispatchArgs], e *outboxtype.Effect, res providers.Result) (outboxtype.State, error) {
	if w.beforeConfirm != nil {
		if err := w.beforeConfirm(ctx); err != nil {
			return "", err
		}
	}
	return w.confirms.do(ctx, confirmReq{effect: e, res: res, jobID: job.ID})
}

// fail moves the effect to failed and cancels the River job: failure is
// outboxd's decision, and River must not retry past it.
func (w *Worker) fail(ctx context.Context, log *slog.Logger, e *outboxtype.Effect, reason string, cause error) error {
	failed, err := w.store.Fail(ctx, w.pool, e.ID, reason)
	return w.failed(log, e, reason, cause, failed, err)
}

// failProven fails an effect whose last attempt the provider proved it
// did not act on; inDoubt is whether an earlier request may have been.
func (w *Worker) failProven(ctx context.Context, log *slog.Logger, e *outboxtype.Effect, reason string, cause error, inDoubt bool) error {
	failed, err := w.store.FailProven(ctx, w.pool, e.ID, reason, inDoubt)
	return w.failed(log, e, reason, cause, failed, err)
}

func (w *Worker) failed(log *slog.Logger, e *outboxtype.Effect, reason string, cause error, failed bool, err error) error {
	if err != nil {
		return err
	}
	if failed {
		w.metrics.Observe(outboxtype.Transitioned{Effect: e, To: outboxtype.StateFailed})
	}
	log.Error("effect failed", "reason", reason)
	if cause == nil {
		cause = errors.New(reason)
	}
	return river.JobCancel(cause)
}

// NextRetry implements river.Worker: the time Work chose, or for a job River
// rescued from a crashed worker, the first step of the schedule so that the
// in-doubt effect is re-fired promptly.
func (w *Worker) NextRetry(job *river.Job[DispatchArgs]) time.Time {
	return w.retryTime(job.Args.EffectID)
}

// unclassified is err's text without its class prefix ("in_doubt: …"),
// for reasons that name the class themselves.
func unclassified(err error) string {
	var pe *providers.Error
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// keyDeadline is the last moment effect e may be fired, or zero when its
// provider has no key window or it was never fired.
func keyDeadline(e *outboxtype.Effect, g providers.Guarantees) time.Time {
	if g.KeyWindow <= 0 || e.KeyWindowFrom == nil {
		return time.Time{}
	}
	return e.KeyWindowFrom.Add(g.Refirable())
}

// batchWait is how long an effect's own job waits, before it looks again,
// while a batch job that fired the effect still runs.
const batchWait = 5 * time.Second

// retryTime is when the effect whose attempt just failed is retried: the
// time the attempt chose, or the schedule's first step.
//
// Never a time before now: River replaces a retry time in the past with
// its own default schedule (errors^4 seconds: 21 minutes after six), which
// left effects waiting long after their cause had ended. A time chosen in
// Work may have passed by the time River asks (a short delay and slow
// bookkeeping), and one left by a run River did not ask about (its last
// attempt) is stale.
func (w *Worker) retryTime(id uuid.UUID) time.Time {
	now := time.Now()
	if t, ok := w.retryAt.LoadAndDelete(id); ok {
		return latest(t.(time.Time), now)
	}
	return now.Add(w.retry.Delay(1))
}

// startDispatch starts the span of one attempt of claimed, continuing the
// trace stored with its event: a re-fire after a crash, a retry or a
// redrive, by whichever dispatcher, joins the trace of the request that
// enqueued it. The span River's middleware started for the job, if any,
// is linked.
func (w *Worker) startDispatch(ctx context.Context, claimed *outboxtype.Effect) (context.Context, outboxtype.Span) {
	var parent string
	if tp, ok := w.traceparents.LoadAndDelete(claimed.ID); ok {
		parent = tp.(string)
	} else {
		// Claimed on its own (a retry, a re-fire): one more lookup.
		var err error
		if parent, err = w.store.EventTraceparent(ctx, w.pool, claimed.SourceID); err != nil {
			w.logger.Debug("dispatch span starts a new trace", "effect_id", claimed.ID, "error", err)
		}
	}
	attrs := effectAttrs(claimed)
	attrs = append(attrs, outboxtype.Attr{Key: "outboxd.total_attempts", Value: claimed.TotalAttempts})
	return w.tracer.Start(ctx, outboxtype.SpanStart{Name: spanDispatch, Kind: outboxtype.SpanConsumer, Parent: parent, Attrs: attrs})
}

// startCall starts the client span of the provider call for claimed.
func (w *Worker) startCall(ctx context.Context, claimed *outboxtype.Effect) (context.Context, outboxtype.Span) {
	return w.tracer.Start(ctx, outboxtype.SpanStart{Name: spanCall, Kind: outboxtype.SpanClient, Attrs: effectAttrs(claimed)})
}
