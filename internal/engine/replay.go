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

// replaySelection is the WHERE clause of a replay's effects: $1 failed
// since, $2 failed before, $3 kind, $4 provider, $5 host, $6 tenant
// (NULL: any).
// Acknowledged failures (reviewed as correctly failed) are not replayed.
const replaySelection = `
WHERE e.phase = 'failed' AND e.ended_at >= $1 AND e.ended_at < $2
	AND ($3::text IS NULL OR e.kind = $3) AND ($4::text IS NULL OR e.provider = $4)
	AND ($5::text IS NULL OR EXISTS (SELECT 1 FROM /*schema*/side_effect_attempts a WHERE a.effect_id = e.id AND a.host = $5))
	AND ($6::text IS NULL OR e.tenant = $6)`

const (
	sqlReplayCount = `SELECT count(*), now() FROM /*schema*/side_effects e ` + replaySelection

	// The next $9 effects of a replay after ($7, $8) in (ended_at, id)
	// order, through side_effects_failed_idx.
	sqlReplayNext = `SELECT e.id, e.ended_at FROM /*schema*/side_effects e ` + replaySelection + `
	AND ($7::timestamptz IS NULL OR (e.ended_at, e.id) > ($7, $8))
ORDER BY e.ended_at, e.id LIMIT $9`

	sqlInsertReplay = `
INSERT INTO /*schema*/outboxd_replays (actor, reason, failed_since, failed_before, kind, provider, host, tenant, pace, allow_duplicate, selected)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
RETURNING id`

	replayColumns = `r.id, r.state, r.actor, r.reason, r.failed_since, r.failed_before, coalesce(r.kind, ''), coalesce(r.provider, ''),
	coalesce(r.host, ''), coalesce(r.tenant, ''), r.pace, r.allow_duplicate, r.selected, r.retried,
	(SELECT count(*) FILTER (WHERE NOT k.transient) FROM /*schema*/outboxd_replay_skips k WHERE k.replay_id = r.id),
	(SELECT count(*) FILTER (WHERE k.transient) FROM /*schema*/outboxd_replay_skips k WHERE k.replay_id = r.id),
	coalesce(r.last_error, ''),
	r.created_at, r.updated_at, r.finished_at, coalesce(r.cancelled_by, ''),
	coalesce((SELECT max(j.id) FROM /*schema*/river_job j WHERE j.kind = 'outboxd.replay'
		AND j.state IN ('available', 'pending', 'retryable', 'running', 'scheduled')
		AND j.args @> jsonb_build_object('replay_id', r.id)), 0)`

	sqlReplays = `SELECT ` + replayColumns + ` FROM /*schema*/outboxd_replays r ORDER BY r.id DESC LIMIT $1`

	sqlReplay = `SELECT ` + replayColumns + `, r.cursor_at, r.cursor_id, r.next_step_at FROM /*schema*/outboxd_replays r WHERE r.id = $1`

	sqlReplayNextStep = `UPDATE /*schema*/outboxd_replays SET next_step_at = $2 WHERE id = $1`

	sqlReplaySkips = `
SELECT k.effect_id, coalesce(e.kind, ''), k.reason, k.transient, k.created_at
FROM /*schema*/outboxd_replay_skips k LEFT JOIN /*schema*/side_effects e ON e.id = k.effect_id
WHERE k.replay_id = $1 ORDER BY k.created_at, k.effect_id LIMIT $2`

	sqlCancelReplay = `
UPDATE /*schema*/outboxd_replays SET state = 'cancelled', cancelled_by = $2, cancel_reason = $3,
	finished_at = now(), updated_at = now()
WHERE id = $1 AND state = 'running'`

	// A running replay's new pace, and the change's record; the previous
	// pace comes back, nothing when the replay is not running.
	sqlSetReplayPace = `
WITH r AS (SELECT id, pace FROM /*schema*/outboxd_replays WHERE id = $1 AND state = 'running' FOR UPDATE),
u AS (UPDATE /*schema*/outboxd_replays x SET pace = $2, next_step_at = now(), updated_at = now() FROM r WHERE x.id = r.id RETURNING r.pace AS previous)
INSERT INTO /*schema*/outboxd_replay_paces (replay_id, pace, previous, actor, reason)
SELECT $1, $2, previous, $3, $4 FROM u RETURNING previous`

	sqlReplayPaces = `
SELECT pace, previous, actor, reason, created_at FROM /*schema*/outboxd_replay_paces
WHERE replay_id = $1 ORDER BY created_at, pace`

	sqlReplaySkip = `
INSERT INTO /*schema*/outboxd_replay_skips (replay_id, effect_id, reason, transient) VALUES ($1, $2, $3, $4)
ON CONFLICT (replay_id, effect_id) DO UPDATE SET reason = EXCLUDED.reason, transient = EXCLUDED.transient, created_at = now()`

	sqlReplayUnskip = `DELETE FROM /*schema*/outboxd_replay_skips WHERE replay_id = $1 AND effect_id = $2`

	// The effects of replay $1 refused for a passing reason at least a
	// second ago, at most $2; and whether any such effect remains.
	sqlReplayAgain = `
SELECT effect_id FROM /*schema*/outboxd_replay_skips
WHERE replay_id = $1 AND transient AND created_at <= now() - interval '1 second'
ORDER BY created_at LIMIT $2`
	sqlReplayAgainLeft = `SELECT EXISTS (SELECT 1 FROM /*schema*/outboxd_replay_skips WHERE replay_id = $1 AND transient)`

	// The progress of a step that looked again.
	sqlReplayAgainStep = `UPDATE /*schema*/outboxd_replays SET retried = retried + $2, last_error = NULL, updated_at = now() WHERE id = $1`

	// A step's progress; the counts move whatever the state (a cancel
	// during a step still counts what the step did). Skips are counted
	// from their rows: a step taken again after a crash records each once.
	sqlReplayStep = `
UPDATE /*schema*/outboxd_replays SET cursor_at = $2, cursor_id = $3, retried = retried + $4, last_error = NULL, updated_at = now()
WHERE id = $1`

	sqlReplayDone = `
UPDATE /*schema*/outboxd_replays SET state = 'done', finished_at = now(), updated_at = now()
WHERE id = $1 AND state = 'running'`

	sqlReplayError = `UPDATE /*schema*/outboxd_replays SET last_error = $2, updated_at = now() WHERE id = $1`
)

// ErrReplayNotFound is returned for a replay id that does not exist.
var ErrReplayNotFound = errors.New("no such replay")

func replaySelectionArgs(spec ReplaySpec, before time.Time) []any {
	return []any{spec.FailedSince, before, nullIfEmpty(spec.Kind), nullIfEmpty(spec.Provider), nullIfEmpty(spec.Host), nullIfEmpty(spec.Tenant)}
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
		err := o.pool.QueryRow(ctx, o.store.sql(sqlReplayCount), replaySelectionArgs(spec, farFuture)...).Scan(&r.Selected, &r.FailedBefore)
		return r, err
	}
	err := pgx.BeginFunc(ctx, o.pool, func(tx pgx.Tx) error {
		// Failed before now, by the database's clock: the effects that
		// fail again after their retry are not this replay's.
		if err := tx.QueryRow(ctx, o.store.sql(sqlReplayCount), replaySelectionArgs(spec, farFuture)...).Scan(&r.Selected, &r.FailedBefore); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, o.store.sql(sqlInsertReplay), opts.Actor, opts.Reason, spec.FailedSince, r.FailedBefore,
			nullIfEmpty(spec.Kind), nullIfEmpty(spec.Provider), nullIfEmpty(spec.Host), nullIfEmpty(spec.Tenant), spec.Pace, spec.AllowDuplicate, r.Selected).Scan(&r.ID); err != nil {
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

// farFuture stands for "no upper bound" where a statement needs one.
var farFuture = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// Replays are the newest limit replays, newest first.
func (o *Operator) Replays(ctx context.Context, limit int) ([]Replay, error) {
	rows, err := o.pool.Query(ctx, o.store.sql(sqlReplays), limit)
	if err != nil {
		return nil, fmt.Errorf("replays: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Replay, error) {
		return scanReplay(r)
	})
	if err != nil {
		return nil, fmt.Errorf("replays: %w", err)
	}
	return out, nil
}

func scanReplay(row pgx.Row, extra ...any) (Replay, error) {
	var r Replay
	dest := append([]any{&r.ID, &r.State, &r.Actor, &r.Reason, &r.Spec.FailedSince, &r.FailedBefore, &r.Spec.Kind, &r.Spec.Provider,
		&r.Spec.Host, &r.Spec.Tenant, &r.Spec.Pace, &r.Spec.AllowDuplicate, &r.Selected, &r.Retried, &r.Skipped, &r.Again, &r.LastError,
		&r.CreatedAt, &r.UpdatedAt, &r.FinishedAt, &r.CancelledBy, &r.Job}, extra...)
	err := row.Scan(dest...)
	return r, err
}

// Replay is replay id as it stands.
func (o *Operator) Replay(ctx context.Context, id int64) (Replay, error) {
	r, _, err := o.store.replay(ctx, o.pool, id)
	return r, err
}

// replay reads replay id with its cursor.
func (s *Store) replay(ctx context.Context, db DB, id int64) (Replay, replayCursor, error) {
	var c replayCursor
	r, err := scanReplay(db.QueryRow(ctx, s.sql(sqlReplay), id), &c.at, &c.id, &c.due)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, c, fmt.Errorf("replay %d: %w", id, ErrReplayNotFound)
	}
	if err != nil {
		return r, c, fmt.Errorf("replay %d: %w", id, err)
	}
	return r, c, nil
}

type replayCursor struct {
	at *time.Time
	id *uuid.UUID
	// due is when the next step is (nil: at once).
	due *time.Time
}

// ReplaySkips are up to limit effects replay id did not retry, and why.
func (o *Operator) ReplaySkips(ctx context.Context, id int64, limit int) ([]ReplaySkip, error) {
	rows, err := o.pool.Query(ctx, o.store.sql(sqlReplaySkips), id, limit)
	if err != nil {
		return nil, fmt.Errorf("replay %d: %w", id, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ReplaySkip, error) {
		var k ReplaySkip
		err := r.Scan(&k.EffectID, &k.Kind, &k.Reason, &k.Transient, &k.At)
		return k, err
	})
	if err != nil {
		return nil, fmt.Errorf("replay %d: %w", id, err)
	}
	return out, nil
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
	tag, err := o.pool.Exec(ctx, o.store.sql(sqlCancelReplay), id, actor, reason)
	if err != nil {
		return false, fmt.Errorf("cancel replay %d: %w", id, err)
	}
	return tag.RowsAffected() == 1, nil
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
		err := tx.QueryRow(ctx, o.store.sql(sqlSetReplayPace), id, pace, actor, reason).Scan(&previous)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		changed = true
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
	rows, err := o.pool.Query(ctx, o.store.sql(sqlReplayPaces), id)
	if err != nil {
		return nil, fmt.Errorf("replay %d: paces: %w", id, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (outboxtype.ReplayPace, error) {
		var p outboxtype.ReplayPace
		err := r.Scan(&p.Pace, &p.Previous, &p.Actor, &p.Reason, &p.At)
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("replay %d: paces: %w", id, err)
	}
	return out, nil
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
	store  *Store
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
		r, cur, err := w.store.replay(ctx, w.pool, id)
		if errors.Is(err, ErrReplayNotFound) {
			return river.JobCancel(err)
		}
		if err != nil {
			return err
		}
		if r.State != outboxtype.ReplayRunning {
			return nil
		}
		if cur.due != nil {
			if wait := time.Until(*cur.due); wait > 0 {
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
			if _, err := w.pool.Exec(ctx, w.store.sql(sqlReplayDone), id); err != nil {
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
		if cur.due != nil && cur.due.Add(every).After(now.Add(-every)) {
			next = cur.due.Add(every)
		}
		if _, err := w.pool.Exec(ctx, w.store.sql(sqlReplayNextStep), id, next); err != nil {
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
func (w *replayWorker) takeStep(ctx context.Context, r Replay, cur replayCursor, n int) (stepOutcome, error) {
	// A step started is finished and counted, whatever happens to the job
	// (a shutdown): its retries and its progress are written together.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bookkeepingTimeout+time.Duration(n)*time.Second)
	defer cancel()
	args := append(replaySelectionArgs(r.Spec, r.FailedBefore), cur.at, cur.id, n)
	rows, err := w.pool.Query(ctx, w.store.sql(sqlReplayNext), args...)
	if err != nil {
		return 0, err
	}
	type next struct {
		id uuid.UUID
		at time.Time
	}
	found, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (next, error) {
		var x next
		err := row.Scan(&x.id, &x.at)
		return x, err
	})
	if err != nil {
		return 0, err
	}
	if len(found) == 0 {
		return w.lookAgain(ctx, r, n)
	}
	ids := make([]uuid.UUID, len(found))
	for i, x := range found {
		ids[i] = x.id
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
		_, err = tx.Exec(ctx, w.store.sql(sqlReplayStep), r.ID, last.at, last.id, retried)
		return err
	})
	return stepMore, err
}

// lookAgain retries up to n effects of replay r that were refused for a
// passing reason at least a second ago.
func (w *replayWorker) lookAgain(ctx context.Context, r Replay, n int) (stepOutcome, error) {
	rows, err := w.pool.Query(ctx, w.store.sql(sqlReplayAgain), r.ID, n)
	if err != nil {
		return 0, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return 0, err
	}
	if len(ids) == 0 {
		var left bool
		if err := w.pool.QueryRow(ctx, w.store.sql(sqlReplayAgainLeft), r.ID).Scan(&left); err != nil || !left {
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
		_, err = tx.Exec(ctx, w.store.sql(sqlReplayAgainStep), r.ID, retried)
		return err
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
			if _, err := tx.Exec(ctx, w.store.sql(sqlReplayUnskip), id, ch.Effect.ID); err != nil {
				return 0, err
			}
			continue
		}
		if _, err := tx.Exec(ctx, w.store.sql(sqlReplaySkip), id, ch.Effect.ID, ch.Skipped, ch.Transient); err != nil {
			return 0, err
		}
	}
	return retried, nil
}

func (w *replayWorker) recordError(ctx context.Context, id int64, err error) {
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bookkeepingTimeout)
	defer cancel()
	if _, xerr := w.pool.Exec(ectx, w.store.sql(sqlReplayError), id, err.Error()); xerr != nil {
		w.logger.Warn("could not record a replay's error", "replay", id, "error", err, "record_error", xerr)
	}
}
