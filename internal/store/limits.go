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

// LimitRow is one limit key as stored.
type LimitRow struct {
	Key            string     `json:"key"`
	Rate           *float64   `json:"rate"`
	RateSource     string     `json:"rate_source"`
	CurrentRate    *float64   `json:"current_rate,omitempty"`
	CurrentAt      time.Time  `json:"-"`
	Tokens         float64    `json:"-"`
	RefilledAt     time.Time  `json:"-"`
	PausedUntil    *time.Time `json:"paused_until,omitempty"`
	ThrottledInRow int        `json:"throttled_in_a_row"`
	Throttles      int64      `json:"throttles"`
	LastThrottleAt *time.Time `json:"last_throttle_at,omitempty"`
	Granted        int64      `json:"granted"`
	// SlowStart: the key's current rate was guessed at its first 429;
	// it climbs fast until the next.
	SlowStart bool `json:"slow_start,omitempty"`
	// InAnySecond: the rate is held as at most that many requests in any
	// second, not as an average (no burst, a margin for late requests).
	InAnySecond bool      `json:"in_any_second,omitempty"`
	UpdatedAt   time.Time `json:"updated_at"`
	// Now is the database's time when the row was read.
	Now time.Time `json:"-"`
}

const limitColumns = `key, rate, rate_source, current_rate, current_at, tokens, refilled_at, paused_until,
	throttled_in_a_row, throttles, last_throttle_at, granted, slow_start, in_any_second, updated_at`

var (
	sqlLimitForUpdate = `SELECT ` + limitColumns + `, coalesce($2::timestamptz, now()) FROM /*schema*/outboxd_limits WHERE key = $1 FOR UPDATE`
	sqlLimits         = `SELECT ` + limitColumns + `, now() FROM /*schema*/outboxd_limits ORDER BY key`
	sqlLimit          = `SELECT ` + limitColumns + `, now() FROM /*schema*/outboxd_limits WHERE key = $1`
	sqlLimitLease     = `UPDATE /*schema*/outboxd_limits SET tokens = $2, refilled_at = $3, granted = granted + $4,
	current_rate = $5, updated_at = $6 WHERE key = $1`
	sqlLimitThrottle = `UPDATE /*schema*/outboxd_limits SET tokens = 0, refilled_at = greatest(refilled_at, $2), paused_until = $3,
	current_rate = $4, current_at = $5, throttled_in_a_row = $6, throttles = throttles + 1, last_throttle_at = $7, updated_at = $2,
	slow_start = $8
WHERE key = $1`
	sqlLimitInsert = `INSERT INTO /*schema*/outboxd_limits (key, rate, rate_source) VALUES ($1, $2, $3) ON CONFLICT (key) DO NOTHING`
	// A hold on outboxd's side ($2 its length): the key pauses until then
	// (or later, if it already was), counting no 429 and keeping its rate.
	// Returns how long the pause has left.
	sqlLimitHold = `INSERT INTO /*schema*/outboxd_limits AS l (key, rate_source, paused_until) VALUES ($1, 'default', now() + $2::interval)
ON CONFLICT (key) DO UPDATE SET paused_until = greatest(l.paused_until, excluded.paused_until), updated_at = now()
RETURNING extract(epoch FROM paused_until - now())::float8`
	// A start-up setting replaces any rate but an operator's.
	sqlLimitConfigure = `INSERT INTO /*schema*/outboxd_limits (key, rate, rate_source, in_any_second) VALUES ($1, $2, $3, $4)
ON CONFLICT (key) DO UPDATE SET rate = excluded.rate, rate_source = excluded.rate_source, in_any_second = excluded.in_any_second,
	updated_at = now()
WHERE outboxd_limits.rate_source NOT LIKE 'operator:%'
	AND (outboxd_limits.rate, outboxd_limits.rate_source, outboxd_limits.in_any_second)
		IS DISTINCT FROM (excluded.rate, excluded.rate_source, excluded.in_any_second)`
	sqlLimitSet = `INSERT INTO /*schema*/outboxd_limits (key, rate, rate_source, in_any_second) VALUES ($1, $2, $3, $5)
ON CONFLICT (key) DO UPDATE SET rate = excluded.rate, rate_source = excluded.rate_source, current_rate = NULL,
	in_any_second = excluded.in_any_second,
	paused_until = CASE WHEN $4 THEN NULL ELSE outboxd_limits.paused_until END, updated_at = now()`
	// Keys of no rate of their own that have not been throttled for a
	// day hold nothing worth keeping.
	sqlLimitsForget = `DELETE FROM /*schema*/outboxd_limits l WHERE (rate IS NULL AND rate_source NOT LIKE 'operator:%'
		AND coalesce(last_throttle_at, updated_at) < now() - interval '1 day')
	-- A replay's pace, once the replay ended and none of the effects it
	-- retried is still to be sent.
	OR (key LIKE 'replay:%' AND rate_source = 'replay' AND updated_at < now() - interval '1 minute'
		AND NOT EXISTS (SELECT 1 FROM /*schema*/outboxd_replays r WHERE 'replay:' || r.id = l.key AND r.state = 'running')
		AND NOT EXISTS (SELECT 1 FROM /*schema*/side_effects e WHERE e.phase = 'live' AND 'replay:' || e.replay_id = l.key))`
	sqlWaitingByLimit = `SELECT waiting_for, count(*), min(waiting_since), min(key_window_from) FROM /*schema*/side_effects
WHERE phase = 'live' AND waiting_for IS NOT NULL AND waiting_for NOT LIKE 'turn:%' GROUP BY waiting_for`
	// How many effects wait for each of the keys, over every replica.
	sqlWaitingFor = `SELECT waiting_for, count(*) FROM /*schema*/side_effects
WHERE phase = 'live' AND state = 'pending' AND waiting_for = ANY($1) GROUP BY waiting_for`
	sqlLimitAudit = `INSERT INTO /*schema*/outboxd_limit_audit (key, actor, reason, from_rate, to_rate, resumed, in_any_second)
VALUES ($1, $2, $3, $4, $5, $6, $7)`
	sqlLimitHistory = `SELECT key, actor, reason, from_rate, to_rate, resumed, coalesce(in_any_second, false), created_at
FROM /*schema*/outboxd_limit_audit
WHERE ($1::text IS NULL OR key = $1) ORDER BY id DESC LIMIT $2`
	sqlMarkWaiting = `UPDATE /*schema*/side_effects SET waiting_for = $2, waiting_since = coalesce(waiting_since, now())
WHERE id = $1 AND state = 'pending' AND waiting_for IS DISTINCT FROM $2`
	// fired -> pending after a 429: the attempt does not count (attempts
	// back by one; total_attempts keeps it, a request was made), and the
	// effect waits for its limit key.
	sqlReleaseThrottled = `UPDATE /*schema*/side_effects
SET state = 'pending', attempts = attempts - 1, in_doubt = $4, last_error = $2, next_attempt_at = $3,
	waiting_for = $5, waiting_since = coalesce(waiting_since, now()), updated_at = now()
WHERE id = $1 AND state = 'fired'`
)

func scanLimit(row pgx.Row) (*LimitRow, error) {
	var r LimitRow
	err := row.Scan(&r.Key, &r.Rate, &r.RateSource, &r.CurrentRate, &r.CurrentAt, &r.Tokens, &r.RefilledAt, &r.PausedUntil,
		&r.ThrottledInRow, &r.Throttles, &r.LastThrottleAt, &r.Granted, &r.SlowStart, &r.InAnySecond, &r.UpdatedAt, &r.Now)
	return &r, err
}

// TxDB is a DB that begins transactions (a pool, or a transaction for a
// savepoint).
type TxDB interface {
	DB
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Hold pauses key for after on every replica without counting a 429 (see
// limiter.held) and returns how long its pause has left.
func (s *Store) Hold(ctx context.Context, db DB, key string, after time.Duration) (time.Duration, error) {
	var left float64
	if err := db.QueryRow(ctx, s.sql(sqlLimitHold), key, after).Scan(&left); err != nil {
		return 0, fmt.Errorf("hold limit %s: %w", key, err)
	}
	return time.Duration(left * float64(time.Second)), nil
}

// WaitingFor counts the effects waiting for each of keys (over every
// replica); a key none waits for is missing.
func (s *Store) WaitingFor(ctx context.Context, db DB, keys []string) (map[string]int, error) {
	rows, err := db.Query(ctx, s.sql(sqlWaitingFor), keys)
	if err != nil {
		return nil, fmt.Errorf("count effects waiting for limits: %w", err)
	}
	out := map[string]int{}
	for rows.Next() {
		var key string
		var n int
		if err := rows.Scan(&key, &n); err != nil {
			rows.Close()
			return nil, err
		}
		out[key] = n
	}
	return out, rows.Err()
}

// Limits lists every limit key's row.
func (s *Store) Limits(ctx context.Context, db DB) ([]*LimitRow, error) {
	rows, err := db.Query(ctx, s.sql(sqlLimits))
	if err != nil {
		return nil, fmt.Errorf("list limits: %w", err)
	}
	defer rows.Close()
	var out []*LimitRow
	for rows.Next() {
		r, err := scanLimit(rows)
		if err != nil {
			return nil, fmt.Errorf("list limits: %w", err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// LimitOf returns key's row, or ErrNotFound.
func (s *Store) LimitOf(ctx context.Context, db DB, key string) (*LimitRow, error) {
	r, err := scanLimit(db.QueryRow(ctx, s.sql(sqlLimit), key))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	return r, err
}

// ConfigureLimit sets key's rate at start-up (source "config" or
// "default"), held in any second or as an average, unless an operator set
// it.
func (s *Store) ConfigureLimit(ctx context.Context, db DB, key string, rate float64, inAnySecond bool, source string) error {
	if _, err := db.Exec(ctx, s.sql(sqlLimitConfigure), key, rate, source, inAnySecond); err != nil {
		return fmt.Errorf("configure limit %s: %w", key, err)
	}
	return nil
}

// SetLimit sets key's rate as operator actor (rate nil: no rate of its
// own, the key slows on 429s only; inAnySecond: held as at most that many
// in any second) and, when resume, ends a 429's pause; audited with
// reason. It returns the rate the key had.
func (s *Store) SetLimit(ctx context.Context, db TxDB, key string, rate *float64, inAnySecond bool, actor, reason string, resume bool) (*float64, error) {
	var before *float64
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		r, err := scanLimit(tx.QueryRow(ctx, s.sql(sqlLimitForUpdate), key, nil))
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return err
		default:
			before = r.Rate
		}
		if _, err := tx.Exec(ctx, s.sql(sqlLimitSet), key, rate, "operator:"+actor, resume, inAnySecond); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, s.sql(sqlLimitAudit), key, actor, reason, before, rate, resume, inAnySecond)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("set limit %s: %w", key, err)
	}
	return before, nil
}

// LimitHistory lists the changes of limits at run time, newest first, of
// key ("" for every key).
func (s *Store) LimitHistory(ctx context.Context, db DB, key string, limit int) ([]outboxtype.LimitChange, error) {
	var k *string
	if key != "" {
		k = &key
	}
	rows, err := db.Query(ctx, s.sql(sqlLimitHistory), k, limit)
	if err != nil {
		return nil, fmt.Errorf("limit history: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (outboxtype.LimitChange, error) {
		var c outboxtype.LimitChange
		err := r.Scan(&c.Key, &c.Actor, &c.Reason, &c.FromRate, &c.ToRate, &c.Resumed, &c.InAnySecond, &c.At)
		return c, err
	})
}

// ReleaseThrottled moves effect id from fired back to pending after a 429:
// the attempt does not count, and the effect waits for limit key until
// next.
func (s *Store) ReleaseThrottled(ctx context.Context, db DB, id uuid.UUID, lastError string, next time.Time, inDoubt bool, key string) (bool, error) {
	return s.exec(ctx, db, "release throttled", s.sql(sqlReleaseThrottled), id, lastError, next, inDoubt, key)
}

// MarkWaiting records that pending effect id waits for limit key.
func (s *Store) MarkWaiting(ctx context.Context, db DB, id any, key string) error {
	_, err := db.Exec(ctx, s.sql(sqlMarkWaiting), id, key)
	return err
}

// Resuming a key: its pause and its lowered rate end, and the effects
// waiting for it get their jobs now.
const (
	sqlLimitResume = `UPDATE /*schema*/outboxd_limits
SET paused_until = NULL, current_rate = NULL, throttled_in_a_row = 0, updated_at = now() WHERE key = $1
RETURNING rate, in_any_second`
	// The jobs of their own (a waiting effect is never in a batch's first
	// attempts) of the effects due that wait for key $1, at most $2.
	sqlJobsWaitingFor = `
SELECT j.id FROM /*schema*/side_effects e
JOIN /*schema*/river_job j ON j.kind = 'outboxd.dispatch' AND j.args @> jsonb_build_object('effect_id', e.id)
WHERE e.phase = 'live' AND e.state = 'pending' AND e.waiting_for = $1 AND (e.not_before IS NULL OR e.not_before <= now())
	AND j.state IN ('scheduled', 'retryable', 'available') AND j.scheduled_at > now()
LIMIT $2`
)

// LockLimit reads key's row for update in tx, with Now at (nil: the
// database's now); nil when the key has no row.
func (s *Store) LockLimit(ctx context.Context, tx pgx.Tx, key string, at *time.Time) (*LimitRow, error) {
	r, err := scanLimit(tx.QueryRow(ctx, s.sql(sqlLimitForUpdate), key, at))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return r, err
}

// EnsureLimit gives key a row with no rate of its own, if it has none.
func (s *Store) EnsureLimit(ctx context.Context, tx pgx.Tx, key string) error {
	_, err := tx.Exec(ctx, s.sql(sqlLimitInsert), key, nil, "default")
	return err
}

// WriteLease records a lease of granted times of key: its schedule given
// out up to refilledAt, its current rate cur, as of now.
func (s *Store) WriteLease(ctx context.Context, tx pgx.Tx, key string, refilledAt time.Time, granted int, cur *float64, now time.Time) error {
	_, err := tx.Exec(ctx, s.sql(sqlLimitLease), key, 0, refilledAt, granted, cur, now)
	return err
}

// WriteThrottle records a 429 of key at now: paused until until, its
// current rate cur climbing back from curAt, inRow episodes in a row, the
// key's last 429 that began or belonged to an episode at lastAt, and
// whether cur was a guess (slowStart).
func (s *Store) WriteThrottle(ctx context.Context, tx pgx.Tx, key string, now, until time.Time, cur *float64, curAt time.Time, inRow int, lastAt time.Time, slowStart bool) error {
	_, err := tx.Exec(ctx, s.sql(sqlLimitThrottle), key, now, until, cur, curAt, inRow, lastAt, slowStart)
	return err
}

// Waiting is how many effects wait for a limit key, since when, and the
// oldest key window among them.
type Waiting struct {
	Effects             int64
	Since               *time.Time
	OldestKeyWindowFrom *time.Time
}

// WaitingByLimit counts the effects waiting for each limit key (tenants'
// turns aside).
func (s *Store) WaitingByLimit(ctx context.Context, db DB) (map[string]Waiting, error) {
	rows, err := db.Query(ctx, s.sql(sqlWaitingByLimit))
	if err != nil {
		return nil, fmt.Errorf("effects waiting for limits: %w", err)
	}
	waits := map[string]Waiting{}
	var key string
	var w Waiting
	if _, err := pgx.ForEachRow(rows, []any{&key, &w.Effects, &w.Since, &w.OldestKeyWindowFrom}, func() error {
		waits[key] = w
		return nil
	}); err != nil {
		return nil, fmt.Errorf("effects waiting for limits: %w", err)
	}
	return waits, nil
}

// ResumeLimit ends key's pause and lowered rate, audited as actor with
// reason, in tx.
func (s *Store) ResumeLimit(ctx context.Context, tx pgx.Tx, key, actor, reason string) error {
	var rate *float64
	var inAnySecond bool
	err := tx.QueryRow(ctx, s.sql(sqlLimitResume), key).Scan(&rate, &inAnySecond)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("resume limit %s: %w", key, err)
	}
	if _, err := tx.Exec(ctx, s.sql(sqlLimitAudit), key, actor, reason, rate, rate, true, inAnySecond); err != nil {
		return fmt.Errorf("resume limit %s: %w", key, err)
	}
	return nil
}

// JobsWaitingFor returns the ids of the jobs of their own of the due
// effects that wait for key, at most limit.
func (s *Store) JobsWaitingFor(ctx context.Context, tx pgx.Tx, key string, limit int) ([]int64, error) {
	rows, err := tx.Query(ctx, s.sql(sqlJobsWaitingFor), key, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}
