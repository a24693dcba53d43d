package sideeffects

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/outboxd/outboxd/internal/engine"
	"github.com/outboxd/outboxd/internal/store"
	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/providers"
	"github.com/riverqueue/river"
)

// RedriveReserve is the part of a key window a retry must leave: a retry
// with less of the window left (or none) needs Force, because the provider
// may forget the key before the new round of attempts ends. It is
// min(2h, a quarter of the window).
func RedriveReserve(window time.Duration) time.Duration { return min(2*time.Hour, window/4) }

// Policy is the in-doubt policy that applies to effects of kind at provider,
// as this operator's settings know it (at_most_once for a provider they do
// not name).
func (o *Operator) Policy(provider, kind string) providers.InDoubtPolicy {
	return policyOf(o.inDoubt, o.told[provider], kind)
}

// policyOf is the in-doubt policy of kind at a provider with guarantees g:
// the kind's own, else the provider's, else at_most_once.
func policyOf(inDoubt map[string]providers.InDoubtPolicy, g providers.Guarantees, kind string) providers.InDoubtPolicy {
	if p, ok := inDoubt[kind]; ok {
		return p
	}
	if g.InDoubt != "" {
		return g.InDoubt
	}
	return providers.AtMostOnce
}

// guarantees are provider's guarantees as this operator's settings give
// them, or else as a dispatcher running the provider last reported them
// (a provider an application built into its own dispatcher); known is
// false when neither has them.
func (o *Operator) guarantees(ctx context.Context, db store.DB, provider string) (g providers.Guarantees, known bool, err error) {
	if g, ok := o.told[provider]; ok {
		return g, true, nil
	}
	return o.store.ProviderGuarantees(ctx, db, provider)
}

// Retry moves failed or cancelled effects (and, with Force, fired ones) back
// to pending with a fresh round of attempts, and inserts a River job for
// each. The idempotency key, the key window, the total attempts and the
// doubt about earlier requests carry over, so the worker applies the same
// in-doubt policy and window as before. Refused, per effect, while a River
// job for it is running; for an at_most_once effect in doubt without
// AllowDuplicate; and near or past the key window without Force.
func (o *Operator) Retry(ctx context.Context, ids []uuid.UUID, opts outboxtype.ActionOpts) ([]outboxtype.Change, error) {
	allowed := []outboxtype.State{outboxtype.StateFailed, outboxtype.StateCancelled}
	if opts.Force {
		allowed = append(allowed, outboxtype.StateFired)
	}
	check := func(ctx context.Context, db store.DB, e *outboxtype.Effect, ch *outboxtype.Change) (string, error) {
		return o.retryCheck(ctx, db, e, ch, opts)
	}
	return o.each(ctx, ids, opts, outboxtype.ActionRetry, outboxtype.StatePending, allowed, check, func(ctx context.Context, tx pgx.Tx, e *outboxtype.Effect, ch *outboxtype.Change) (*outboxtype.Effect, error) {
		before, err := o.store.Redrive(ctx, tx, e.ID, opts.Force, ch.ClearsDoubt, ch.RestartsKeyWindow, opts.Replay)
		if err != nil || before == nil {
			return before, err
		}
		res, err := o.river.InsertManyTx(ctx, tx, []river.InsertManyParams{engine.JobParams(e.ID, e.Provider, e.NotBefore)})
		if err != nil {
			return nil, fmt.Errorf("insert dispatch job for %s: %w", e.ID, err)
		}
		ch.JobInserted = len(res) == 1 && !res[0].UniqueSkippedAsDuplicate
		return before, nil
	})
}

// retryCheck says why effect e must not be retried with opts, or "" when
// it may, noting on ch what the retry will do.
func (o *Operator) retryCheck(ctx context.Context, db store.DB, e *outboxtype.Effect, ch *outboxtype.Change, opts outboxtype.ActionOpts) (string, error) {
	job, err := o.store.RunningJob(ctx, db, e.ID)
	if err != nil {
		return "", err
	}
	if job != 0 {
		ch.Transient = true
		return fmt.Sprintf("River job %d is running for it: a call may be in flight. Wait for it to end (or for River to rescue it after the dispatchers' rescue-after), then look again", job), nil
	}
	var warnings []string
	g, known, err := o.guarantees(ctx, db, e.Provider)
	if err != nil {
		return "", err
	}
	if !known {
		if !opts.Force {
			ch.Override = outboxtype.OverrideForce
			return fmt.Sprintf("outboxd does not know how long %s remembers an idempotency key: these settings do not name the provider, "+
				"and no dispatcher running it has reported its key window. A re-fire after the provider forgot key %s could act twice. "+
				"Check at the provider whether it was done; if so, confirm it; if not, a forced retry fires it again",
				e.Provider, e.IdempotencyKey), nil
		}
		warnings = append(warnings, "the provider's key window is unknown: forced, fired again without a window check")
	}
	if e.InDoubt && policyOf(o.inDoubt, g, e.Kind) == providers.AtMostOnce {
		if !opts.AllowDuplicate {
			ch.Override = outboxtype.OverrideAllowDuplicate
			return fmt.Sprintf("in doubt and at_most_once: an earlier request may have been delivered, and %s has no idempotency key to stop a second one. "+
				"Check the provider for key %s; if it was done, confirm it with the provider's reference; to re-send anyway, accepting a possible duplicate, "+
				"retry allowing a duplicate",
				e.Provider, e.IdempotencyKey), nil
		}
		ch.ClearsDoubt = true
		warnings = append(warnings, "re-sent although an earlier request may have been delivered: the recipient may get it twice")
	}
	if window := g.Refirable(); window != 0 && e.KeyWindowFrom != nil {
		closes := e.KeyWindowFrom.Add(window)
		left := time.Until(closes)
		if left < RedriveReserve(window) {
			state := "closes in " + left.Round(time.Minute).String()
			if left <= 0 {
				state = "closed " + (-left).Round(time.Minute).String() + " ago"
			}
			if !opts.Force {
				ch.Override = outboxtype.OverrideForce
				return fmt.Sprintf("key window %s (first request with the key at %s): %s may forget key %s before a new round of attempts ends, and a re-fire could then act twice. "+
					"Check at the provider whether it was done; if so, confirm it with the provider's reference; if not, a forced retry "+
					"fires it again under a new key window",
					state, e.KeyWindowFrom.UTC().Format(time.RFC3339), e.Provider, e.IdempotencyKey), nil
			}
			ch.RestartsKeyWindow = true
			warnings = append(warnings, "key window "+state+": forced, the next request starts a new key window")
		}
	}
	ch.Warning = strings.Join(warnings, "; ")
	return "", nil
}

// Requeue gives pending and fired effects that have no live River job (rows
// written by SQL, jobs discarded or cleaned up) a new one, as the sweeper
// would, without waiting for it. The state does not change; a fired
// effect's re-fire applies its in-doubt policy as any re-fire does. An
// effect that has a live job is skipped.
func (o *Operator) Requeue(ctx context.Context, ids []uuid.UUID, opts outboxtype.ActionOpts) ([]outboxtype.Change, error) {
	check := func(ctx context.Context, db store.DB, e *outboxtype.Effect, _ *outboxtype.Change) (string, error) {
		job, err := o.store.LiveJob(ctx, db, e.ID)
		if err != nil || job == 0 {
			return "", err
		}
		return fmt.Sprintf("River job %d is live for it already: nothing to requeue", job), nil
	}
	return o.each(ctx, ids, opts, outboxtype.ActionRequeue, "", []outboxtype.State{outboxtype.StatePending, outboxtype.StateFired}, check,
		func(ctx context.Context, tx pgx.Tx, e *outboxtype.Effect, ch *outboxtype.Change) (*outboxtype.Effect, error) {
			res, err := o.river.InsertManyTx(ctx, tx, []river.InsertManyParams{engine.JobParams(e.ID, e.Provider, e.NotBefore)})
			if err != nil {
				return nil, fmt.Errorf("insert dispatch job for %s: %w", e.ID, err)
			}
			ch.JobInserted = len(res) == 1 && !res[0].UniqueSkippedAsDuplicate
			return e, nil
		})
}

// EditPayload replaces the payload of a failed effect that no provider
// acted on, and sends it back to pending with a new River job, as Retry
// does, keeping its key: v (the provider's Validator) must accept the new
// payload. Refused unless the effect's attempts prove that nothing was
// done and that the provider keeps no result for its key: every attempt
// refused before any request (an invalid payload outboxd's own checks
// caught), or a last answer that was a validation refusal (Stripe's
// invalid_request_error with HTTP 400, which Stripe keeps no idempotent
// result for; a 400 or 422 from a webhook receiver or SendGrid) after
// only refusals. Anything else a provider may have acted on, or holds a
// result for under the key: its payload is fixed where it was enqueued,
// as a new event. The audit row keeps both payloads.
func (o *Operator) EditPayload(ctx context.Context, id uuid.UUID, payload json.RawMessage, v providers.Validator, opts outboxtype.ActionOpts) (outboxtype.Change, error) {
	if v == nil {
		return outboxtype.Change{}, errors.New("edit payload: no payload validator for the effect's provider")
	}
	check := func(ctx context.Context, db store.DB, e *outboxtype.Effect, ch *outboxtype.Change) (string, error) {
		ch.PayloadBefore, ch.PayloadAfter = e.Payload, payload
		if v.Name() != e.Provider {
			return fmt.Sprintf("the payload validator is %s's, the effect is %s's", v.Name(), e.Provider), nil
		}
		if err := v.ValidatePayload(e.Kind, payload); err != nil {
			return "the new payload is invalid: " + err.Error(), nil
		}
		// Compared as Postgres compares what it stores (jsonb): key order
		// and spacing do not make a payload new.
		same, err := o.store.SamePayload(ctx, db, e.Payload, payload)
		if err != nil {
			return "", err
		}
		if same {
			return "the new payload is the same as the old: nothing to edit", nil
		}
		if job, err := o.store.RunningJob(ctx, db, e.ID); err != nil || job != 0 {
			if job != 0 {
				ch.Transient = true
				return fmt.Sprintf("River job %d is running for it: look again when it ends", job), err
			}
			return "", err
		}
		attempts, err := o.store.Attempts(ctx, db, e.ID)
		if err != nil {
			return "", err
		}
		if why := unsentProof(e, attempts, o.Profile(e.Provider)); why != "" {
			return why, nil
		}
		return "", nil
	}
	chs, err := o.each(ctx, []uuid.UUID{id}, opts, outboxtype.ActionEditPayload, outboxtype.StatePending, []outboxtype.State{outboxtype.StateFailed}, check,
		func(ctx context.Context, tx pgx.Tx, e *outboxtype.Effect, ch *outboxtype.Change) (*outboxtype.Effect, error) {
			before, err := o.store.EditPayload(ctx, tx, e.ID, payload)
			if err != nil || before == nil {
				return before, err
			}
			before.Payload = ch.PayloadBefore
			res, err := o.river.InsertManyTx(ctx, tx, []river.InsertManyParams{engine.JobParams(e.ID, e.Provider, e.NotBefore)})
			if err != nil {
				return nil, fmt.Errorf("insert dispatch job for %s: %w", e.ID, err)
			}
			ch.JobInserted = len(res) == 1 && !res[0].UniqueSkippedAsDuplicate
			return before, nil
		})
	if err != nil || len(chs) != 1 {
		return outboxtype.Change{}, err
	}
	return chs[0], nil
}

// unsentProof says why effect e's history does not prove that no provider
// acted on it and that none keeps a result for its key ("" when it does).
func unsentProof(e *outboxtype.Effect, attempts []outboxtype.Attempt, profile providers.Profile) string {
	const fix = ": fix the payload where the effect was enqueued and enqueue it as a new event, then cancel this one"
	if e.InDoubt {
		return "an earlier request may have been delivered (in doubt)" + fix
	}
	if n := max(e.TotalAttempts, e.Attempts); len(attempts) < n {
		return fmt.Sprintf("%d of its %d attempts have no recorded outcome, so nothing proves they made no request%s", n-len(attempts), n, fix)
	}
	for _, a := range attempts {
		switch {
		case a.Outcome == "refused":
		// An answer the provider's profile reads as a refusal of the
		// request's fields: a webhook receiver's 400 or 422 is classed
		// retryable (the receiver may accept it later) and may come back
		// on every retry, and none of them acted.
		case (a.Outcome == providers.ClassPermanent.String() || a.Outcome == providers.ClassRetryable.String()) &&
			profile.RefusedWithoutActing(a.Error):
		default:
			return fmt.Sprintf("attempt %d reached %s (%s: %s), which may have acted on it or keep a result for its key%s",
				a.Attempt, e.Provider, a.Outcome, a.Error, fix)
		}
	}
	return ""
}

// Acknowledge records that failed effects were reviewed and are correctly
// failed (a card decline, a retired endpoint): they stay failed, with who
// and why in the audit trail, and leave "stuck" and the failed-effects
// gauge. A later retry clears the acknowledgement.
func (o *Operator) Acknowledge(ctx context.Context, ids []uuid.UUID, opts outboxtype.ActionOpts) ([]outboxtype.Change, error) {
	if opts.Reason == "" {
		return nil, errors.New("acknowledge needs a reason")
	}
	check := func(_ context.Context, _ store.DB, e *outboxtype.Effect, _ *outboxtype.Change) (string, error) {
		if e.AcknowledgedAt != nil {
			return "acknowledged already at " + e.AcknowledgedAt.UTC().Format(time.RFC3339), nil
		}
		return "", nil
	}
	return o.each(ctx, ids, opts, outboxtype.ActionAcknowledge, outboxtype.StateFailed, []outboxtype.State{outboxtype.StateFailed}, check,
		func(ctx context.Context, tx pgx.Tx, e *outboxtype.Effect, _ *outboxtype.Change) (*outboxtype.Effect, error) {
			return o.store.Acknowledge(ctx, tx, e.ID)
		})
}

// Release lets the effects after each of ids on its ordering key go on,
// whatever becomes of it: for the head of a chain that will never complete
// (a capture the customer settled by other means) when cancelling it would
// lose what it records. Its state does not change; it can still be
// redriven, cancelled or resolved, and it no longer holds its key.
func (o *Operator) Release(ctx context.Context, ids []uuid.UUID, opts outboxtype.ActionOpts) ([]outboxtype.Change, error) {
	if opts.Reason == "" {
		return nil, errors.New("release needs a reason")
	}
	check := func(_ context.Context, _ store.DB, e *outboxtype.Effect, _ *outboxtype.Change) (string, error) {
		switch {
		case e.OrderingKey == nil:
			return "has no ordering key: nothing waits behind it", nil
		case e.OrderingReleasedAt != nil:
			return "released already at " + e.OrderingReleasedAt.UTC().Format(time.RFC3339), nil
		}
		return "", nil
	}
	return o.each(ctx, ids, opts, outboxtype.ActionRelease, "", []outboxtype.State{outboxtype.StatePending, outboxtype.StateFired, outboxtype.StateFailed}, check,
		func(ctx context.Context, tx pgx.Tx, e *outboxtype.Effect, _ *outboxtype.Change) (*outboxtype.Effect, error) {
			return o.store.ReleaseChain(ctx, tx, e.ID)
		})
}

// Cancel moves pending, fired or failed effects to cancelled: no worker will
// fire them again. A fired effect may have a call in flight; if the provider
// acknowledges it, the acknowledgement is recorded in the audit trail.
func (o *Operator) Cancel(ctx context.Context, ids []uuid.UUID, opts outboxtype.ActionOpts) ([]outboxtype.Change, error) {
	return o.each(ctx, ids, opts, outboxtype.ActionCancel, outboxtype.StateCancelled, []outboxtype.State{outboxtype.StatePending, outboxtype.StateFired, outboxtype.StateFailed}, nil,
		func(ctx context.Context, tx pgx.Tx, e *outboxtype.Effect, _ *outboxtype.Change) (*outboxtype.Effect, error) {
			return o.store.Cancel(ctx, tx, e.ID)
		})
}

// Confirm records that effect id was performed, as checked at the provider,
// with the provider's reference. A provider whose profile has no
// references (webhooks) needs none: without opts.Ref the effect is recorded
// with WebhookRef (the webhook-id the receiver saw and logged); any other
// effect without opts.Ref is skipped, saying so.
func (o *Operator) Confirm(ctx context.Context, id uuid.UUID, opts outboxtype.ActionOpts) (outboxtype.Change, error) {
	chs, err := o.each(ctx, []uuid.UUID{id}, opts, outboxtype.ActionConfirm, outboxtype.StateConfirmed,
		[]outboxtype.State{outboxtype.StatePending, outboxtype.StateFired, outboxtype.StateFailed, outboxtype.StateCancelled},
		func(_ context.Context, _ store.DB, e *outboxtype.Effect, _ *outboxtype.Change) (string, error) {
			if opts.Ref == "" && o.Profile(e.Provider).Refs {
				return fmt.Sprintf("a %s effect is confirmed with its provider's reference (the provider's id for what it did)", e.Provider), nil
			}
			return "", nil
		},
		func(ctx context.Context, tx pgx.Tx, e *outboxtype.Effect, _ *outboxtype.Change) (*outboxtype.Effect, error) {
			return o.store.ResolveConfirmed(ctx, tx, e.ID, cmp.Or(opts.Ref, WebhookRef(e)))
		})
	if err != nil {
		return outboxtype.Change{}, err
	}
	return chs[0], nil
}

// WebhookRef is what confirming a webhook by hand records as its
// reference: the webhook-id the receiver saw and logged, its key.
func WebhookRef(e *outboxtype.Effect) string { return "webhook-id " + store.Key(e.SourceID, e.Kind) }

type (
	applyFunc func(ctx context.Context, tx pgx.Tx, e *outboxtype.Effect, ch *outboxtype.Change) (before *outboxtype.Effect, err error)
	// checkFunc says why an action must not apply to e ("" when it may).
	checkFunc func(ctx context.Context, db store.DB, e *outboxtype.Effect, ch *outboxtype.Change) (skip string, err error)
)

// each applies one transition per effect, each in its own transaction with
// its audit row. The row is locked and checked again inside the
// transaction; an effect not in an allowed state, or refused by check, is
// skipped, not changed.
func (o *Operator) each(ctx context.Context, ids []uuid.UUID, opts outboxtype.ActionOpts, action string, to outboxtype.State, allowed []outboxtype.State, check checkFunc, apply applyFunc) ([]outboxtype.Change, error) {
	if opts.Actor == "" {
		return nil, errors.New("an actor is required for the audit trail")
	}
	out := make([]outboxtype.Change, 0, len(ids))
	for _, id := range ids {
		e, err := o.store.Get(ctx, o.pool, id)
		if err != nil {
			return out, err
		}
		ch := outboxtype.Change{Effect: e, From: e.State, To: cmp.Or(to, e.State)}
		if !stateIn(e.State, allowed) {
			ch.Skipped = fmt.Sprintf("%s effects cannot be %s", e.State, pastTense(action))
			if action == outboxtype.ActionRetry && e.State == outboxtype.StateFired {
				ch.Skipped += " unless forced (a call may be in flight; River re-fires it by itself)"
				ch.Override = outboxtype.OverrideForce
			}
			out = append(out, ch)
			continue
		}
		if action == outboxtype.ActionCancel && e.State == outboxtype.StateFired {
			ch.Warning = "was fired: a call may be in flight and still reach the provider; its acknowledgement would be recorded in the audit trail"
		}
		if opts.DryRun {
			if check != nil {
				if ch.Skipped, err = check(ctx, o.pool, e, &ch); err != nil {
					return out, err
				}
			}
			ch.Applied = ch.Skipped == ""
			out = append(out, ch)
			continue
		}
		var skipped string
		err = pgx.BeginFunc(ctx, o.pool, func(tx pgx.Tx) error {
			locked, err := o.store.LockEffect(ctx, tx, id)
			if err != nil {
				return err
			}
			if locked == nil || !stateIn(locked.State, allowed) {
				return errConcurrentChange
			}
			if to == "" {
				ch.To = locked.State
			}
			if check != nil {
				if skipped, err = check(ctx, tx, locked, &ch); err != nil || skipped != "" {
					return err
				}
			}
			before, err := apply(ctx, tx, locked, &ch)
			if err != nil {
				return err
			}
			if before == nil {
				return errConcurrentChange
			}
			ch.Effect, ch.From = before, before.State
			details := map[string]any{
				"attempts": before.Attempts, "total_attempts": before.TotalAttempts, "last_error": before.LastError,
				"in_doubt": before.InDoubt, "first_fired_at": before.FirstFiredAt, "key_window_from": before.KeyWindowFrom,
				"provider_ref": opts.Ref, "warning": ch.Warning, "job_inserted": ch.JobInserted,
				"clears_doubt": ch.ClearsDoubt, "restarts_key_window": ch.RestartsKeyWindow,
			}
			if ch.PayloadAfter != nil {
				details["payload_before"], details["payload_after"] = ch.PayloadBefore, ch.PayloadAfter
			}
			return o.store.RecordAudit(ctx, tx, id, action, opts.Actor, opts.Reason, before.State, ch.To, details)
		})
		switch {
		case errors.Is(err, errConcurrentChange):
			ch.Skipped, ch.Transient = "changed state meanwhile; look again", true
		case err != nil:
			return out, fmt.Errorf("%s effect %s: %w", action, id, err)
		case skipped != "":
			ch.Skipped = skipped
		default:
			ch.Applied = true
		}
		out = append(out, ch)
	}
	return out, nil
}

var errConcurrentChange = errors.New("state changed concurrently")

func stateIn(s outboxtype.State, set []outboxtype.State) bool {
	for _, x := range set {
		if s == x {
			return true
		}
	}
	return false
}

func pastTense(action string) string {
	switch action {
	case outboxtype.ActionRetry:
		return "retried"
	case outboxtype.ActionCancel:
		return "cancelled"
	case outboxtype.ActionRequeue:
		return "requeued"
	case outboxtype.ActionAcknowledge:
		return "acknowledged"
	case outboxtype.ActionRelease:
		return "released"
	default:
		return "confirmed"
	}
}
