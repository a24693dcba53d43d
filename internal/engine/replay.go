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

// ReplayJob is the job that runs replay id (one live job per replay).
func ReplayJob(id int64) river.InsertManyParams {
	return river.InsertManyParams{Args: ReplayArgs{ReplayID: id}, InsertOpts: &river.InsertOpts{
		Queue:       ReplayQueue,
		MaxAttempts: RiverMaxAttempts,
		UniqueOpts:  river.UniqueOpts{ByArgs: true, ByState: uniqueStates},
	}}
}

// replayWorker runs paced replays: each execution takes steps of effects
// at the replay's pace for up to replayRun, retrying them through the
// Operator (so every refusal of retry applies, and each retry has its audit
// row), then snoozes until its next step.
type replayWorker struct {
	river.WorkerDefaults[ReplayArgs]
	pool  *pgxpool.Pool
	store *store.Store
	// retryEach is the operator's Retry (Wiring.Retry).
	retryEach func(ctx context.Context, ids []uuid.UUID, opts outboxtype.ActionOpts) ([]outboxtype.Change, error)
	logger    *slog.Logger
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
	changes, err := w.retryThrough(ctx, r, ids)
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
	changes, err := w.retryThrough(ctx, r, ids)
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

// retryThrough retries ids for replay r by the operator's rules: each in
// its own transaction, with its audit row naming the replay.
func (w *replayWorker) retryThrough(ctx context.Context, r Replay, ids []uuid.UUID) ([]outboxtype.Change, error) {
	return w.retryEach(ctx, ids, outboxtype.ActionOpts{
		Actor: fmt.Sprintf("%s (replay %d)", r.Actor, r.ID), Reason: r.Reason, AllowDuplicate: r.Spec.AllowDuplicate,
		Replay: r.ID,
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
