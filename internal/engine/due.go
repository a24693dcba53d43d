package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/outboxd/outboxd/internal/store"
)

// A snoozed or retried River job is `scheduled` (or `retryable`) until
// River's scheduler makes it `available`; only available jobs are fetched.
// River runs its scheduler on its elected leader alone, every 5 s, and
// after the leader dies another takes over once its lease (15 s) has run
// out: a limited drain whose leader was SIGKILLed sent next to nothing for
// 10–15 s while hundreds of jobs snoozed for their place in a limit's line
// were past their time (TestChaosLimitedDrainKnownLimits, `make
// test-chaos`). So every dispatcher also makes its due dispatch jobs
// available, every dueInterval, looking dueInterval ahead as River's
// scheduler looks its own interval ahead (a job made available early is
// still fetched at its time). It skips the rows another transaction holds
// (store.MakeDue): River's JobSchedule, which waits for them, run by every
// replica beside River's own scheduler queued the statements behind one
// another until River's timed out after 30 s and three shards sent nothing
// for a minute (TestChaosShards).
const (
	dueInterval = time.Second
	// dueBatch bounds one statement; a longer list takes more in turn.
	dueBatch = 1000
)

// The same holds for the jobs of a process that was killed: River's
// rescuer, on the leader, hands them back once they have run
// --rescue-after, but looks only every 30 s (not configurable), so a
// SIGKILL cost --rescue-after plus up to 30 s; the last effects of the
// limited drains were those jobs. Every dispatcher also rescues, every
// dueInterval, the dispatch jobs River's rescuer would (running longer
// than --rescue-after), with River's own statements (riverdriver's
// JobGetStuck and JobRescueMany, whose update holds only for a job still
// running since before the horizon, so two replicas rescue a job once)
// and River's decisions: cancelled if an operator asked, discarded when
// out of attempts, else retried at the time the worker's NextRetry gives
// a rescued job (a dispatch job the retry schedule's first step, a batch
// at once). Other jobs are River's rescuer's alone.
const stuckBatch = 1000

// dueKeeper makes due River jobs available, and rescues stuck dispatch
// jobs, on every dispatcher.
type dueKeeper struct {
	pool   *pgxpool.Pool
	store  *store.Store
	logger *slog.Logger
	// queues are the providers' queues, whose jobs it makes due
	queues []string
	// rescue: River's statements, its schema, --rescue-after (0: River's
	// rescuer alone) and the retry schedule's first step
	exec        riverdriver.Executor
	schema      string
	rescueAfter time.Duration
	firstRetry  time.Duration

	stop context.CancelFunc
	done chan struct{}
}

func newDueKeeper(pool *pgxpool.Pool, st *store.Store, logger *slog.Logger, queues []string, schema string, rescueAfter, firstRetry time.Duration) *dueKeeper {
	return &dueKeeper{pool: pool, store: st, logger: logger, queues: queues, exec: riverpgxv5.New(pool).GetExecutor(), schema: schema,
		rescueAfter: rescueAfter, firstRetry: firstRetry}
}

func (k *dueKeeper) start() {
	ctx, cancel := context.WithCancel(context.Background())
	k.stop, k.done = cancel, make(chan struct{})
	go func() {
		defer close(k.done)
		t := time.NewTicker(dueInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if n, err := k.rescue(ctx, time.Now().Add(-k.rescueAfter)); err != nil && ctx.Err() == nil {
				k.logger.Warn("could not rescue stuck dispatch jobs; River's rescuer still does, every 30 s", "error", err)
			} else if n > 0 {
				k.logger.Info("rescued dispatch jobs that ran longer than --rescue-after (their process is gone)", "jobs", n)
			}
			if _, err := k.makeDue(ctx, time.Now().Add(dueInterval)); err != nil && ctx.Err() == nil {
				k.logger.Warn("could not make due jobs available; River's scheduler still does, every 5 s", "error", err)
			}
		}
	}()
}

func (k *dueKeeper) stopKeeper() {
	if k.stop != nil {
		k.stop()
		<-k.done
	}
}

// makeDue makes available the scheduled and retryable jobs due by until
// and returns how many it made available.
func (k *dueKeeper) makeDue(ctx context.Context, until time.Time) (int, error) {
	total := 0
	for {
		n, err := k.store.MakeDue(ctx, k.pool, k.queues, until, dueBatch)
		total += n
		if err != nil || n < dueBatch {
			return total, err
		}
	}
}

// rescue hands back the dispatch jobs still running that were attempted
// before horizon, as River's rescuer would, and returns how many.
func (k *dueKeeper) rescue(ctx context.Context, horizon time.Time) (int, error) {
	if k.rescueAfter <= 0 {
		return 0, nil
	}
	total := 0
	var afterID int64
	for {
		jobs, err := k.exec.JobGetStuck(ctx, &riverdriver.JobGetStuckParams{AfterID: afterID, Max: stuckBatch, Schema: k.schema, StuckHorizon: horizon})
		if err != nil {
			return total, fmt.Errorf("find stuck jobs: %w", err)
		}
		now := time.Now().UTC()
		p := &riverdriver.JobRescueManyParams{Schema: k.schema, StuckHorizon: horizon}
		for _, j := range jobs {
			if j.Kind != JobKind && j.Kind != BatchJobKind {
				continue
			}
			var meta struct {
				CancelAttemptedAt time.Time `json:"cancel_attempted_at"`
			}
			if err := json.Unmarshal(j.Metadata, &meta); err != nil {
				return total, fmt.Errorf("job %d: metadata: %w", j.ID, err)
			}
			attemptErr, err := json.Marshal(rivertype.AttemptError{At: now, Attempt: max(j.Attempt, 0),
				Error: "Stuck job rescued by outboxd: it ran longer than --rescue-after"})
			if err != nil {
				return total, err
			}
			state, finalized, at := rivertype.JobStateRetryable, (*time.Time)(nil), now
			switch {
			case !meta.CancelAttemptedAt.IsZero():
				state, finalized, at = rivertype.JobStateCancelled, &now, j.ScheduledAt
			case j.Attempt >= j.MaxAttempts:
				state, finalized, at = rivertype.JobStateDiscarded, &now, j.ScheduledAt
			case j.Kind == JobKind:
				at = now.Add(k.firstRetry)
			}
			p.ID = append(p.ID, j.ID)
			p.Error = append(p.Error, attemptErr)
			p.FinalizedAt = append(p.FinalizedAt, finalized)
			p.ScheduledAt = append(p.ScheduledAt, at)
			p.State = append(p.State, string(state))
		}
		if len(p.ID) > 0 {
			if _, err := k.exec.JobRescueMany(ctx, p); err != nil {
				return total, fmt.Errorf("rescue %d stuck jobs: %w", len(p.ID), err)
			}
			total += len(p.ID)
		}
		if len(jobs) < stuckBatch {
			return total, nil
		}
		afterID = jobs[len(jobs)-1].ID
	}
}
