package sideeffects

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/outboxd/outboxd/internal/engine"
	"github.com/outboxd/outboxd/outboxtype"
	"github.com/riverqueue/river"
)

// MaxReplayPace bounds a replay's pace (effects a second): each effect is
// retried in its own transaction with its audit row.
const MaxReplayPace = 1000

// CheckReplaySpec says what is wrong with spec, naming the field, or nil.
func CheckReplaySpec(spec outboxtype.ReplaySpec) error {
	switch {
	case spec.FailedSince.IsZero():
		return errors.New("failed_since is required: replay the effects that failed since when?")
	case spec.FailedSince.After(time.Now()):
		return fmt.Errorf("failed_since %s is in the future", spec.FailedSince.UTC().Format(time.RFC3339))
	}
	return CheckReplayPace(spec.Pace)
}

// CheckReplayPace says what is wrong with a replay's pace, or nil.
func CheckReplayPace(pace float64) error {
	if err := outboxtype.CheckRate(pace); err != nil {
		return fmt.Errorf("pace: %w", err)
	}
	switch {
	case pace > MaxReplayPace:
		return fmt.Errorf("pace %g is over the limit of %d effects a second", pace, MaxReplayPace)
	}
	return nil
}

// StartReplay starts a paced replay of the failed effects spec selects, by
// opts.Actor for opts.Reason: one row and its River job, in one
// transaction. With opts.DryRun it writes nothing and returns how many
// effects it would select.
func (o *Operator) StartReplay(ctx context.Context, spec outboxtype.ReplaySpec, opts outboxtype.ActionOpts) (outboxtype.Replay, error) {
	if err := CheckReplaySpec(spec); err != nil {
		return outboxtype.Replay{}, err
	}
	if opts.Actor == "" || opts.Reason == "" {
		return outboxtype.Replay{}, errors.New("a replay needs an actor and a reason for the audit trail")
	}
	r := outboxtype.Replay{State: outboxtype.ReplayRunning, Actor: opts.Actor, Reason: opts.Reason, Spec: spec}
	if opts.DryRun {
		var err error
		r.Selected, r.FailedBefore, err = o.store.CountReplay(ctx, o.pool, spec)
		return r, err
	}
	err := pgx.BeginFunc(ctx, o.pool, func(tx pgx.Tx) error {
		// Failed before now, by the database's clock: the effects that
		// fail again after their retry are not this replay's.
		var err error
		if r.Selected, r.FailedBefore, err = o.store.CountReplay(ctx, tx, spec); err != nil {
			return err
		}
		if r.ID, err = o.store.InsertReplay(ctx, tx, r); err != nil {
			return err
		}
		res, err := o.river.InsertManyTx(ctx, tx, []river.InsertManyParams{engine.ReplayJob(r.ID)})
		if err == nil && len(res) == 1 {
			r.Job = res[0].Job.ID
		}
		return err
	})
	if err != nil {
		return outboxtype.Replay{}, fmt.Errorf("start replay: %w", err)
	}
	return o.Replay(ctx, r.ID)
}

// Replays are the newest limit replays, newest first.
func (o *Operator) Replays(ctx context.Context, limit int) ([]outboxtype.Replay, error) {
	return o.store.Replays(ctx, o.pool, limit)
}

// Replay is replay id as it stands.
func (o *Operator) Replay(ctx context.Context, id int64) (outboxtype.Replay, error) {
	r, _, err := o.store.Replay(ctx, o.pool, id)
	return r, err
}

// ReplaySkips are up to limit effects replay id did not retry, and why.
func (o *Operator) ReplaySkips(ctx context.Context, id int64, limit int) ([]outboxtype.ReplaySkip, error) {
	return o.store.ReplaySkips(ctx, o.pool, id, limit)
}

// CancelReplay stops replay id before its next step: what it retried stays
// retried. It reports false when the replay was not running.
func (o *Operator) CancelReplay(ctx context.Context, id int64, actor, reason string) (bool, error) {
	if actor == "" || reason == "" {
		return false, errors.New("cancelling a replay needs an actor and a reason")
	}
	if _, err := o.Replay(ctx, id); err != nil {
		return false, err
	}
	return o.store.CancelReplay(ctx, o.pool, id, actor, reason)
}

// SetReplayPace changes running replay id's pace from its next step, by
// actor for reason, and returns the pace it had. A replay whose job waits
// for its next step (a slow pace) is woken, so that a faster pace does not
// wait for the slow one's step. It reports false when the replay is not
// running.
func (o *Operator) SetReplayPace(ctx context.Context, id int64, pace float64, actor, reason string) (float64, bool, error) {
	if err := CheckReplayPace(pace); err != nil {
		return 0, false, err
	}
	if actor == "" || reason == "" {
		return 0, false, errors.New("changing a replay's pace needs an actor and a reason")
	}
	r, err := o.Replay(ctx, id)
	if err != nil {
		return 0, false, err
	}
	var previous float64
	changed := false
	err = pgx.BeginFunc(ctx, o.pool, func(tx pgx.Tx) error {
		var err error
		previous, changed, err = o.store.SetReplayPace(ctx, tx, id, pace, actor, reason)
		if err != nil || !changed || r.Job == 0 {
			return err
		}
		if r.Job == 0 {
			return nil
		}
		// River leaves a running job alone: it reads the new pace at its
		// next step.
		if _, err := o.river.JobRetryTx(ctx, tx, r.Job); err != nil && !errors.Is(err, river.ErrNotFound) {
			return err
		}
		return nil
	})
	if err != nil {
		return 0, false, fmt.Errorf("replay %d: pace: %w", id, err)
	}
	return previous, changed, nil
}

// ReplayPaces are the changes of replay id's pace, oldest first.
func (o *Operator) ReplayPaces(ctx context.Context, id int64) ([]outboxtype.ReplayPace, error) {
	return o.store.ReplayPaces(ctx, o.pool, id)
}

// ResumeReplay gives a running replay whose River job is gone (discarded
// after repeated errors, or removed) a new one. It reports false when the
// replay has a live job already.
func (o *Operator) ResumeReplay(ctx context.Context, id int64) (bool, error) {
	r, err := o.Replay(ctx, id)
	if err != nil {
		return false, err
	}
	if r.State != outboxtype.ReplayRunning {
		return false, fmt.Errorf("replay %d is %s: start a new one", id, r.State)
	}
	res, err := o.river.Insert(ctx, engine.ReplayArgs{ReplayID: id}, engine.ReplayJob(id).InsertOpts)
	if err != nil {
		return false, fmt.Errorf("resume replay %d: %w", id, err)
	}
	return !res.UniqueSkippedAsDuplicate, nil
}
