package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/outboxd/outboxd/outboxtype"
)

const (
	sqlReplayCount = `SELECT count(*), now() FROM /*schema*/side_effects e ` + replaySelection

	// The next $9 effects of a replay after ($7, $8) in (ended_at, id)
	// order, through side_effects_failed_idx.
	sqlReplayNext = `SELECT e.id, e.ended_at FROM /*schema*/side_effects e ` + replaySelection + `
	AND ($7::timestamptz IS NULL OR (e.ended_at, e.id) > ($7, $8))
ORDER BY e.ended_at, e.id LIMIT $9`

	// A new replay, and its pace as its limit key (replay:<id>), which
	// every request of the effects it retries takes a time of.
	sqlInsertReplay = `
WITH r AS (
	INSERT INTO /*schema*/outboxd_replays (actor, reason, failed_since, failed_before, kind, provider, host, tenant, pace, allow_duplicate, selected)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
	RETURNING id, pace
), k AS (
	INSERT INTO /*schema*/outboxd_limits (key, rate, rate_source) SELECT 'replay:' || id, pace, 'replay' FROM r
	ON CONFLICT (key) DO UPDATE SET rate = excluded.rate, rate_source = excluded.rate_source, updated_at = now()
)
SELECT id FROM r`

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
u AS (UPDATE /*schema*/outboxd_replays x SET pace = $2, next_step_at = now(), updated_at = now() FROM r WHERE x.id = r.id RETURNING r.pace AS previous),
k AS (
	INSERT INTO /*schema*/outboxd_limits (key, rate, rate_source) SELECT 'replay:' || $1::bigint, $2, 'replay' FROM u
	ON CONFLICT (key) DO UPDATE SET rate = excluded.rate, rate_source = excluded.rate_source, updated_at = now()
)
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

// replaySelection is the WHERE clause of a replay's effects: $1 failed
// since, $2 failed before, $3 kind, $4 provider, $5 host, $6 tenant
// (NULL: any).
// Acknowledged failures (reviewed as correctly failed) are not replayed.
const replaySelection = `
WHERE e.phase = 'failed' AND e.ended_at >= $1 AND e.ended_at < $2
	AND ($3::text IS NULL OR e.kind = $3) AND ($4::text IS NULL OR e.provider = $4)
	AND ($5::text IS NULL OR EXISTS (SELECT 1 FROM /*schema*/side_effect_attempts a WHERE a.effect_id = e.id AND a.host = $5))
	AND ($6::text IS NULL OR e.tenant = $6)`

// ErrReplayNotFound is returned for a replay id that does not exist.
var ErrReplayNotFound = errors.New("no such replay")

func replaySelectionArgs(spec outboxtype.ReplaySpec, before time.Time) []any {
	return []any{spec.FailedSince, before, nullIfEmpty(spec.Kind), nullIfEmpty(spec.Provider), nullIfEmpty(spec.Host), nullIfEmpty(spec.Tenant)}
}

func scanReplay(row pgx.Row, extra ...any) (outboxtype.Replay, error) {
	var r outboxtype.Replay
	dest := append([]any{&r.ID, &r.State, &r.Actor, &r.Reason, &r.Spec.FailedSince, &r.FailedBefore, &r.Spec.Kind, &r.Spec.Provider,
		&r.Spec.Host, &r.Spec.Tenant, &r.Spec.Pace, &r.Spec.AllowDuplicate, &r.Selected, &r.Retried, &r.Skipped, &r.Again, &r.LastError,
		&r.CreatedAt, &r.UpdatedAt, &r.FinishedAt, &r.CancelledBy, &r.Job}, extra...)
	err := row.Scan(dest...)
	return r, err
}

// farFuture stands for "no upper bound" where a statement needs one.
var farFuture = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// ReplayCursor is where a replay's pass stands: the last effect it took
// (nil: none yet), and when its next step is due (nil: at once).
type ReplayCursor struct {
	At  *time.Time
	ID  *uuid.UUID
	Due *time.Time
}

// Replay reads replay id with its cursor.
func (s *Store) Replay(ctx context.Context, db DB, id int64) (outboxtype.Replay, ReplayCursor, error) {
	var c ReplayCursor
	r, err := scanReplay(db.QueryRow(ctx, s.sql(sqlReplay), id), &c.At, &c.ID, &c.Due)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, c, fmt.Errorf("replay %d: %w", id, ErrReplayNotFound)
	}
	if err != nil {
		return r, c, fmt.Errorf("replay %d: %w", id, err)
	}
	return r, c, nil
}

// CountReplay counts the effects spec selects that failed before now, and
// returns now, by the database's clock.
func (s *Store) CountReplay(ctx context.Context, db DB, spec outboxtype.ReplaySpec) (n int, now time.Time, err error) {
	err = db.QueryRow(ctx, s.sql(sqlReplayCount), replaySelectionArgs(spec, farFuture)...).Scan(&n, &now)
	return n, now, err
}

// InsertReplay records replay r (its spec, actor, reason, selection) and
// returns its id.
func (s *Store) InsertReplay(ctx context.Context, db DB, r outboxtype.Replay) (int64, error) {
	spec := r.Spec
	var id int64
	err := db.QueryRow(ctx, s.sql(sqlInsertReplay), r.Actor, r.Reason, spec.FailedSince, r.FailedBefore,
		nullIfEmpty(spec.Kind), nullIfEmpty(spec.Provider), nullIfEmpty(spec.Host), nullIfEmpty(spec.Tenant), spec.Pace, spec.AllowDuplicate, r.Selected).Scan(&id)
	return id, err
}

// Replays are the newest limit replays, newest first.
func (s *Store) Replays(ctx context.Context, db DB, limit int) ([]outboxtype.Replay, error) {
	rows, err := db.Query(ctx, s.sql(sqlReplays), limit)
	if err != nil {
		return nil, fmt.Errorf("replays: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (outboxtype.Replay, error) {
		return scanReplay(r)
	})
	if err != nil {
		return nil, fmt.Errorf("replays: %w", err)
	}
	return out, nil
}

// ReplaySkips are up to limit effects replay id did not retry, and why.
func (s *Store) ReplaySkips(ctx context.Context, db DB, id int64, limit int) ([]outboxtype.ReplaySkip, error) {
	rows, err := db.Query(ctx, s.sql(sqlReplaySkips), id, limit)
	if err != nil {
		return nil, fmt.Errorf("replay %d: %w", id, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (outboxtype.ReplaySkip, error) {
		var k outboxtype.ReplaySkip
		err := r.Scan(&k.EffectID, &k.Kind, &k.Reason, &k.Transient, &k.At)
		return k, err
	})
	if err != nil {
		return nil, fmt.Errorf("replay %d: %w", id, err)
	}
	return out, nil
}

// CancelReplay marks running replay id cancelled by actor for reason; it
// reports false when the replay was not running.
func (s *Store) CancelReplay(ctx context.Context, db DB, id int64, actor, reason string) (bool, error) {
	tag, err := db.Exec(ctx, s.sql(sqlCancelReplay), id, actor, reason)
	if err != nil {
		return false, fmt.Errorf("cancel replay %d: %w", id, err)
	}
	return tag.RowsAffected() == 1, nil
}

// SetReplayPace sets running replay id's pace, audited, and returns the
// pace it had; false when the replay is not running.
func (s *Store) SetReplayPace(ctx context.Context, db DB, id int64, pace float64, actor, reason string) (float64, bool, error) {
	var previous float64
	err := db.QueryRow(ctx, s.sql(sqlSetReplayPace), id, pace, actor, reason).Scan(&previous)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	return previous, err == nil, err
}

// ReplayPaces are the changes of replay id's pace, oldest first.
func (s *Store) ReplayPaces(ctx context.Context, db DB, id int64) ([]outboxtype.ReplayPace, error) {
	rows, err := db.Query(ctx, s.sql(sqlReplayPaces), id)
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

// ReplayDone marks running replay id done.
func (s *Store) ReplayDone(ctx context.Context, db DB, id int64) error {
	_, err := db.Exec(ctx, s.sql(sqlReplayDone), id)
	return err
}

// ReplayNextStep sets when replay id's next step is due.
func (s *Store) ReplayNextStep(ctx context.Context, db DB, id int64, next time.Time) error {
	_, err := db.Exec(ctx, s.sql(sqlReplayNextStep), id, next)
	return err
}

// ReplayTarget is an effect a replay's step takes, and when it failed.
type ReplayTarget struct {
	ID      uuid.UUID
	EndedAt time.Time
}

// ReplayNext returns the next n effects of replay r after cur, in the
// order they failed.
func (s *Store) ReplayNext(ctx context.Context, db DB, r outboxtype.Replay, cur ReplayCursor, n int) ([]ReplayTarget, error) {
	args := append(replaySelectionArgs(r.Spec, r.FailedBefore), cur.At, cur.ID, n)
	rows, err := db.Query(ctx, s.sql(sqlReplayNext), args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (ReplayTarget, error) {
		var x ReplayTarget
		err := row.Scan(&x.ID, &x.EndedAt)
		return x, err
	})
}

// ReplayStep records a step of replay id: its pass now stands at (at,
// last), and it retried retried more.
func (s *Store) ReplayStep(ctx context.Context, db DB, id int64, at time.Time, last uuid.UUID, retried int) error {
	_, err := db.Exec(ctx, s.sql(sqlReplayStep), id, at, last, retried)
	return err
}

// ReplayAgain returns up to n effects replay id skipped for a passing
// reason at least a second ago.
func (s *Store) ReplayAgain(ctx context.Context, db DB, id int64, n int) ([]uuid.UUID, error) {
	rows, err := db.Query(ctx, s.sql(sqlReplayAgain), id, n)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
}

// ReplayAgainLeft reports whether replay id has effects skipped for a
// passing reason left to look at again.
func (s *Store) ReplayAgainLeft(ctx context.Context, db DB, id int64) (bool, error) {
	var left bool
	err := db.QueryRow(ctx, s.sql(sqlReplayAgainLeft), id).Scan(&left)
	return left, err
}

// ReplayAgainStep records that a look again of replay id retried retried.
func (s *Store) ReplayAgainStep(ctx context.Context, db DB, id int64, retried int) error {
	_, err := db.Exec(ctx, s.sql(sqlReplayAgainStep), id, retried)
	return err
}

// ReplayRetried records that replay id retried effect now.
func (s *Store) ReplayRetried(ctx context.Context, db DB, id int64, effect uuid.UUID) error {
	_, err := db.Exec(ctx, s.sql(sqlReplayUnskip), id, effect)
	return err
}

// ReplaySkipped records that replay id skipped effect for reason, to look
// at again when transient.
func (s *Store) ReplaySkipped(ctx context.Context, db DB, id int64, effect uuid.UUID, reason string, transient bool) error {
	_, err := db.Exec(ctx, s.sql(sqlReplaySkip), id, effect, reason, transient)
	return err
}

// ReplayError records the error of replay id's last step.
func (s *Store) ReplayError(ctx context.Context, db DB, id int64, msg string) error {
	_, err := db.Exec(ctx, s.sql(sqlReplayError), id, msg)
	return err
}
