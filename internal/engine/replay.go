package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/outboxd/outboxd/internal/store"
	"github.com/outboxd/outboxd/outboxtype"
)

// Paced replays (migration 00024, docs/replays.md): the effects that failed
// in a period, retried in the background at an operator's pace, with every
// refusal of Operator.Retry.

type (
	Replay     = outboxtype.Replay
	ReplaySpec = outboxtype.ReplaySpec
	ReplaySkip = outboxtype.ReplaySkip
)

// ReplayQueue runs paced replays, a few at a time per process.
const ReplayQueue = "outboxd_replays"

// replayWorkers is how many replays one process runs at once.
const replayWorkers = 4

// MaxReplayPace bounds a replay's pace (effects a second): each effect is
// retried in its own transaction with its audit row.
const MaxReplayPace = 1000

// How a replay runs: a step of effects every replayStep (or every
// 1/pace when slower), for at most replayRun per River job execution;
// then the job snoozes until its next step and runs again. Waiting for a
// step, it reads the replay again at least every replayRecheck, so that a
// changed pace (or a cancel) takes effect within it.
const (
	replayStep    = 250 * time.Millisecond
	replayRun     = time.Minute
	replayRecheck = 5 * time.Second
)

// ReplayArgs are the arguments of the job that runs replay ReplayID.
type ReplayArgs struct {
	ReplayID int64 `json:"replay_id"`
}

// Kind implements river.JobArgs.
func (ReplayArgs) Kind() string { return "outboxd.replay" }

func replayJob(id int64) river.InsertManyParams {
	return river.InsertManyParams{Args: ReplayArgs{ReplayID: id}, InsertOpts: &river.InsertOpts{
		Queue:       ReplayQueue,
		MaxAttempts: RiverMaxAttempts,
		UniqueOpts:  river.UniqueOpts{ByArgs: true, ByState: uniqueStates},
	}}
}

// CheckReplaySpec says what is wrong with spec, naming the field, or nil.
func CheckReplaySpec(spec ReplaySpec) error {
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
func (o *Operator) StartReplay(ctx context.Context, spec ReplaySpec, opts outboxtype.ActionOpts) (Replay, error) {
	if err := CheckReplaySpec(spec); err != nil {
		return Replay{}, err
	}
	if opts.Actor == "" || opts.Reason == "" {
		return Replay{}, errors.New("a replay needs an actor and a reason for the audit trail")
	}
	r := Replay{State: outboxtype.ReplayRunning, Actor: opts.Actor, Reason: opts.Reason, Spec: spec}
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
		res, err := o.river.InsertManyTx(ctx, tx, []river.InsertManyParams{replayJob(r.ID)})
		if err == nil && len(res) == 1 {
			r.Job = res[0].Job.ID
		}
		return err
	})
	if err != nil {
		return Replay{}, fmt.Errorf("start replay: %w", err)
	}
	return o.Replay(ctx, r.ID)
}

// Replays are the newest limit replays, newest first.
func (o *Operator) Replays(ctx context.Context, limit int) ([]Replay, error) {
	return o.store.Replays(ctx, o.pool, limit)
}

// Replay is replay id as it stands.
func (o *Operator) Replay(ctx context.Context, id int64) (Replay, error) {
	r, _, err := o.store.Replay(ctx, o.pool, id)
	return r, err
}

// ReplaySkips are up to limit effects replay id did not retry, and why.
func (o *Operator) ReplaySkips(ctx context.Context, id int64, limit int) ([]ReplaySkip, error) {
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
	res, err := o.river.Insert(ctx, ReplayArgs{ReplayID: id}, replayJob(id).InsertOpts)
	if err != nil {
		return false, fmt.Errorf("resume replay %d: %w", id, err)
	}
	return !res.UniqueSkippedAsDuplicate, nil
}

// replayWorker runs paced replays: each execution takes steps of effects
// at the replay's pace for up to replayRun, retrying them through the
// Operator (so every refusal of retry applies, and each retry has its audit
// row), then snoozes until its next step.
type replayWorker struct {
	river.WorkerDefaults[ReplayArgs]
	pool   *pgxpool.Pool
	store  *store.Store
	op     *Operator
	logger *slog.Logger
	// step and run, when set by tests, replace replayStep and replayRun.
	step, run time.Duration
}

// Timeout implements river.Worker: a run takes replayRun plus its last
// step.
func (w *replayWorker) Timeout(*river.Job[ReplayArgs]) time.Duration {
	return w.runFor() + time.Minute
}

func (w *replayWorker) runFor() time.Duration {
	if w.run > 0 {
		return w.run
	}
	return replayRun
}

func (w *replayWorker) Work(ctx context.Context, job *river.Job[ReplayArgs]) error {
	id := job.Args.ReplayID
	end := time.Now().Add(w.runFor())
	for {
		r, cur, err := w.store.Replay(ctx, w.pool, id)
		if errors.Is(err, store.ErrReplayNotFound) {
			return river.JobCancel(err)
		}
		if err != nil {
			return err
		}
		if r.State != outboxtype.ReplayRunning {
			return nil
		}
		if cur.Due != nil {
			if wait := time.Until(*cur.Due); wait > 0 {
				// Not due yet: wait, reading the replay again at least
				// every replayRecheck (its pace may change, or it may be
				// cancelled), here or, past this run, snoozed.
				wait = min(wait, replayRecheck)
				if time.Now().Add(wait).After(end) {
					return snooze(wait)
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(wait):
				}
				continue
			}
		}
		n, every := replayBatch(r.Spec.Pace, w.step)
		outcome, err := w.takeStep(ctx, r, cur, n)
		if err != nil {
			w.recordError(ctx, id, err)
			return err
		}
		switch outcome {
		case stepDone:
			if err := w.store.ReplayDone(ctx, w.pool, id); err != nil {
				return err
			}
			w.logger.Info("replay done", "replay", id, "selected", r.Selected)
			return nil
		case stepWait:
			// Only effects to look at again remain, none due yet.
			every = max(every, time.Second)
		}
		// Steps keep their cadence (the next is due one interval after
		// this one was), but a step far behind (a slow step, a process
		// that stopped) does not make the next ones burst to catch up.
		now := time.Now()
		next := now.Add(every)
		if cur.Due != nil && cur.Due.Add(every).After(now.Add(-every)) {
			next = cur.Due.Add(every)
		}
		if err := w.store.ReplayNextStep(ctx, w.pool, id, next); err != nil {
			return err
		}
	}
}

// replayBatch is how many effects a step of a replay at pace takes, and
// how often steps come: every step (replayStep by default), or every
// 1/pace for a slower pace.
func replayBatch(pace float64, step time.Duration) (int, time.Duration) {
	if step <= 0 {
		step = replayStep
	}
	n := int(math.Round(pace * step.Seconds()))
	if n < 1 {
		return 1, time.Duration(float64(time.Second) / pace)
	}
	return n, time.Duration(float64(n) / pace * float64(time.Second))
}

// What a step found.
type stepOutcome int

const (
	stepMore stepOutcome = iota // effects were retried or skipped; there may be more
	stepWait                    // only effects to look at again remain, not due yet
	stepDone                    // nothing is left
)

// takeStep retries the next n effects of replay r after cur and records
// its progress. Once the pass is over, it looks again at the effects
// refused for a passing reason. (A process killed between a step's
// retries and its progress leaves those retries uncounted: each effect is
// still retried once, since a retried effect is no longer failed.)
func (w *replayWorker) takeStep(ctx context.Context, r Replay, cur store.ReplayCursor, n int) (stepOutcome, error) {
	// A step started is finished and counted, whatever happens to the job
	// (a shutdown): its retries and its progress are written together.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bookkeepingTimeout+time.Duration(n)*time.Second)
	defer cancel()
	found, err := w.store.ReplayNext(ctx, w.pool, r, cur, n)
	if err != nil {
		return 0, err
	}
	if len(found) == 0 {
		return w.lookAgain(ctx, r, n)
	}
	ids := make([]uuid.UUID, len(found))
	for i, x := range found {
		ids[i] = x.ID
	}
	changes, err := w.retry(ctx, r, ids)
	if err != nil {
		return 0, err
	}
	last := found[len(found)-1]
	err = pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		retried, err := w.recordChanges(ctx, tx, r.ID, changes)
		if err != nil {
			return err
		}
		return w.store.ReplayStep(ctx, tx, r.ID, last.EndedAt, last.ID, retried)
	})
	return stepMore, err
}

// lookAgain retries up to n effects of replay r that were refused for a
// passing reason at least a second ago.
func (w *replayWorker) lookAgain(ctx context.Context, r Replay, n int) (stepOutcome, error) {
	ids, err := w.store.ReplayAgain(ctx, w.pool, r.ID, n)
	if err != nil {
		return 0, err
	}
	if len(ids) == 0 {
		left, err := w.store.ReplayAgainLeft(ctx, w.pool, r.ID)
		if err != nil || !left {
			return stepDone, err
		}
		return stepWait, nil
	}
	changes, err := w.retry(ctx, r, ids)
	if err != nil {
		return 0, err
	}
	err = pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		retried, err := w.recordChanges(ctx, tx, r.ID, changes)
		if err != nil {
			return err
		}
		return w.store.ReplayAgainStep(ctx, tx, r.ID, retried)
	})
	return stepMore, err
}

// retry retries ids for replay r, through the Operator: each in its own
// transaction, with its audit row naming the replay.
func (w *replayWorker) retry(ctx context.Context, r Replay, ids []uuid.UUID) ([]outboxtype.Change, error) {
	return w.op.Retry(ctx, ids, outboxtype.ActionOpts{
		Actor: fmt.Sprintf("%s (replay %d)", r.Actor, r.ID), Reason: r.Reason, AllowDuplicate: r.Spec.AllowDuplicate,
	})
}

// recordChanges records, in tx, what a step did to each effect of replay
// id, and returns how many it retried.
func (w *replayWorker) recordChanges(ctx context.Context, tx pgx.Tx, id int64, changes []outboxtype.Change) (int, error) {
	retried := 0
	for _, ch := range changes {
		if ch.Applied {
			retried++
			if err := w.store.ReplayRetried(ctx, tx, id, ch.Effect.ID); err != nil {
				return 0, err
			}
			continue
		}
		if err := w.store.ReplaySkipped(ctx, tx, id, ch.Effect.ID, ch.Skipped, ch.Transient); err != nil {
			return 0, err
		}
	}
	return retried, nil
}

func (w *replayWorker) recordError(ctx context.Context, id int64, err error) {
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bookkeepingTimeout)
	defer cancel()
	if xerr := w.store.ReplayError(ectx, w.pool, id, err.Error()); xerr != nil {
		w.logger.Warn("could not record a replay's error", "replay", id, "error", err, "record_error", xerr)
	}
}
