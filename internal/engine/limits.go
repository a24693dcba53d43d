package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/outboxtype"
)

// Rate limits shared by every replica (docs/limits.md).
//
// Each limit key (a Stripe account, a SendGrid account, a webhook host) is
// one row of outboxd_limits, kept as a schedule (GCRA, the generic cell
// rate algorithm): refilled_at is the time up to which the key's rate is
// given out. A process leases a block of request times from it, one
// statement per block: the block starts at refilled_at (or a twentieth of
// a second before now, when the key was idle: that is its burst), its
// times are 1/rate apart, and refilled_at moves to the block's end. Blocks
// never overlap, so the sum over all replicas never exceeds the rate by
// more than the burst, however the leases interleave. A block may lie in
// the future, at most leaseAhead: the process's workers wait in process
// for their times, and the replicas take turns, a block each, instead of a
// lock per request. A replica that dies loses at most the block it held:
// the key runs slower for a moment, never faster. (tokens is kept at 0; an
// earlier version counted a bucket there.)
//
// A 429 pauses the key for every replica (for Retry-After, or a pause that
// doubles with each episode in a row) and lowers its current rate (by a
// quarter for a key with a rate of its own, by half for one without),
// which then climbs back by a tenth of its ceiling each second: additive
// increase, multiplicative decrease.

// Limit tuning.
const (
	// burstSeconds is how much of its rate an idle key may spend at once:
	// small, because a provider's bucket must also absorb how much later
	// than its time each request arrives (a claim, a connection).
	burstSeconds = 0.05
	// leaseAhead is how far ahead of now a key's times may be leased:
	// enough for every replica to hold a block while the others spend
	// theirs.
	leaseAhead = 400 * time.Millisecond
	// leaseBlock is the most a process leases at once, in seconds of the
	// key's rate.
	leaseBlock = 0.2
	// leaseTTL is how long after its time a leased request time may still
	// be spent, so that times nobody used are not sent together with
	// those of the next block.
	leaseTTL = 50 * time.Millisecond
	// maxLimitPause bounds a key's pause after a 429 that named no
	// delay: each such episode in a row doubles the first pause
	// (sideeffects.DefaultLimitPause), up to this.
	maxLimitPause = time.Minute
	// minRate is the lowest rate a 429 brings a key to.
	minRate = 0.2
	// adaptiveForget is how long after its last 429 a key with no rate of
	// its own is unlimited again.
	adaptiveForget = 5 * time.Minute
	// limitRefresh is how often a process reads every key's row, to learn
	// of pauses and rates other replicas or operators set.
	limitRefresh = time.Second
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
	UpdatedAt      time.Time  `json:"updated_at"`
	// Now is the database's time when the row was read.
	Now time.Time `json:"-"`
}

// Effective is the rate the key may take at the row's Now: its rate, or the
// rate a 429 lowered it to plus what it has regained since; 0 when it has
// none (the key is not limited).
func (r *LimitRow) Effective() float64 {
	if r.CurrentRate == nil {
		if r.Rate == nil {
			return 0
		}
		return *r.Rate
	}
	if r.Rate == nil && (r.LastThrottleAt == nil || r.Now.Sub(*r.LastThrottleAt) > adaptiveForget) {
		return 0
	}
	return min(r.ceiling(), *r.CurrentRate+r.step()*max(0, r.Now.Sub(r.CurrentAt).Seconds()))
}

// ceiling is the rate a key climbs back to after 429s: its own; for a key
// with none, twice the rate its last 429 lowered it to, about the rate
// that drew that 429. Unbounded, a key climbed through every quiet spell
// (a tenth a second with no request to test it), so each burst after one
// started from a rate the partner had never accepted: 20 requests every
// 90 s to a 5/s receiver took the key to over 2,000,000/s.
func (r *LimitRow) ceiling() float64 {
	if r.Rate != nil {
		return *r.Rate
	}
	if r.CurrentRate == nil {
		return math.Inf(1)
	}
	return 2 * *r.CurrentRate
}

// step is how much a key's lowered rate climbs back each second: a tenth
// of its own rate, or of its current one, at least 1/s. CurrentRate is set.
func (r *LimitRow) step() float64 {
	if r.Rate != nil {
		return max(1, *r.Rate/10)
	}
	return max(1, *r.CurrentRate/10)
}

// Climb is how fast the key's rate climbs back after its 429s, per second,
// and the rate it climbs to (+Inf for a key with no rate of its own): 0
// and its rate when it does not climb.
func (r *LimitRow) Climb() (step, ceiling float64) {
	eff := r.Effective()
	if r.CurrentRate == nil || eff <= 0 || eff >= r.ceiling() {
		return 0, eff
	}
	return r.step(), r.ceiling()
}

// Paused reports whether the key is paused at the row's Now.
func (r *LimitRow) Paused() bool { return r.PausedUntil != nil && r.Now.Before(*r.PausedUntil) }

const limitColumns = `key, rate, rate_source, current_rate, current_at, tokens, refilled_at, paused_until,
	throttled_in_a_row, throttles, last_throttle_at, granted, updated_at`

var (
	sqlLimitForUpdate = `SELECT ` + limitColumns + `, coalesce($2::timestamptz, now()) FROM /*schema*/outboxd_limits WHERE key = $1 FOR UPDATE`
	sqlLimits         = `SELECT ` + limitColumns + `, now() FROM /*schema*/outboxd_limits ORDER BY key`
	sqlLimit          = `SELECT ` + limitColumns + `, now() FROM /*schema*/outboxd_limits WHERE key = $1`
	sqlLimitLease     = `UPDATE /*schema*/outboxd_limits SET tokens = $2, refilled_at = $3, granted = granted + $4,
	current_rate = $5, updated_at = $6 WHERE key = $1`
	sqlLimitThrottle = `UPDATE /*schema*/outboxd_limits SET tokens = 0, refilled_at = greatest(refilled_at, $2), paused_until = $3,
	current_rate = $4, current_at = $5, throttled_in_a_row = $6, throttles = throttles + 1, last_throttle_at = $2, updated_at = $2
WHERE key = $1`
	sqlLimitInsert = `INSERT INTO /*schema*/outboxd_limits (key, rate, rate_source) VALUES ($1, $2, $3) ON CONFLICT (key) DO NOTHING`
	// A hold on outboxd's side ($2 its length): the key pauses until then
	// (or later, if it already was), counting no 429 and keeping its rate.
	// Returns how long the pause has left.
	sqlLimitHold = `INSERT INTO /*schema*/outboxd_limits AS l (key, rate_source, paused_until) VALUES ($1, 'default', now() + $2::interval)
ON CONFLICT (key) DO UPDATE SET paused_until = greatest(l.paused_until, excluded.paused_until), updated_at = now()
RETURNING extract(epoch FROM paused_until - now())::float8`
	// A start-up setting replaces any rate but an operator's.
	sqlLimitConfigure = `INSERT INTO /*schema*/outboxd_limits (key, rate, rate_source) VALUES ($1, $2, $3)
ON CONFLICT (key) DO UPDATE SET rate = excluded.rate, rate_source = excluded.rate_source, updated_at = now()
WHERE outboxd_limits.rate_source NOT LIKE 'operator:%' AND (outboxd_limits.rate, outboxd_limits.rate_source) IS DISTINCT FROM (excluded.rate, excluded.rate_source)`
	sqlLimitSet = `INSERT INTO /*schema*/outboxd_limits (key, rate, rate_source) VALUES ($1, $2, $3)
ON CONFLICT (key) DO UPDATE SET rate = excluded.rate, rate_source = excluded.rate_source, current_rate = NULL,
	paused_until = CASE WHEN $4 THEN NULL ELSE outboxd_limits.paused_until END, updated_at = now()`
	// Keys of no rate of their own that have not been throttled for a
	// day hold nothing worth keeping.
	sqlLimitsForget = `DELETE FROM /*schema*/outboxd_limits WHERE rate IS NULL AND rate_source NOT LIKE 'operator:%'
	AND coalesce(last_throttle_at, updated_at) < now() - interval '1 day'`
	sqlWaitingByLimit = `SELECT waiting_for, count(*), min(waiting_since), min(key_window_from) FROM /*schema*/side_effects
WHERE phase = 'live' AND waiting_for IS NOT NULL AND waiting_for NOT LIKE 'turn:%' GROUP BY waiting_for`
	// How many effects wait for each of the keys, over every replica.
	sqlWaitingFor = `SELECT waiting_for, count(*) FROM /*schema*/side_effects
WHERE phase = 'live' AND state = 'pending' AND waiting_for = ANY($1) GROUP BY waiting_for`
	sqlLimitAudit = `INSERT INTO /*schema*/outboxd_limit_audit (key, actor, reason, from_rate, to_rate, resumed)
VALUES ($1, $2, $3, $4, $5, $6)`
	sqlLimitHistory = `SELECT key, actor, reason, from_rate, to_rate, resumed, created_at FROM /*schema*/outboxd_limit_audit
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
		&r.ThrottledInRow, &r.Throttles, &r.LastThrottleAt, &r.Granted, &r.UpdatedAt, &r.Now)
	return &r, err
}

// TxDB is a DB that begins transactions (a pool, or a transaction for a
// savepoint).
type TxDB interface {
	DB
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Lease is what a process got from a key's schedule: Granted request
// times, the first at Start from the row's now (zero or less: at once),
// the others Every apart.
type Lease struct {
	// At is this process's clock when the lease's transaction had begun,
	// so at or after the row's now: the times read from At are never
	// early, whatever the lease waited for after it.
	At time.Time `json:"-"`
	// Limited is false when the key has no rate (no row, or an adaptive
	// key whose 429s are forgotten): Granted is then all that was asked.
	Limited bool
	Granted int
	Rate    float64
	// Climb and Ceiling are how fast Rate climbs back after 429s, per
	// second, and to what (LimitRow.Climb).
	Climb, Ceiling float64
	Start          time.Duration
	Every          time.Duration
	// PausedFor is how long a 429's pause on the key still lasts.
	PausedFor time.Duration
	// NextIn is how long until the key has a time to lease again, when it
	// granted none.
	NextIn time.Duration
}

// LeaseTokens leases up to want request times of key, and none unless at
// least half of them are free, as of at (nil: the database's now).
func (s *Store) LeaseTokens(ctx context.Context, db TxDB, key string, want int, at *time.Time) (Lease, error) {
	var out Lease
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		// The transaction's now() is when BEGIN ran: before this.
		out.At = time.Now()
		r, err := scanLimit(tx.QueryRow(ctx, s.sql(sqlLimitForUpdate), key, at))
		if errors.Is(err, pgx.ErrNoRows) {
			out = Lease{At: out.At, Granted: want}
			return nil
		}
		if err != nil {
			return err
		}
		rate := r.Effective()
		if rate <= 0 && !r.Paused() {
			out = Lease{At: out.At, Granted: want}
			return nil
		}
		out.Limited, out.Rate = true, rate
		out.Climb, out.Ceiling = r.Climb()
		if r.Paused() {
			out.PausedFor = r.PausedUntil.Sub(r.Now)
			return nil
		}
		// Rounded up: a time given out is never early.
		out.Every = time.Duration(math.Ceil(float64(time.Second) / rate))
		// The schedule only moves forward: now() is when this transaction
		// began, possibly before another that waited less for the row
		// lock moved it, and a time given out is never given again. An
		// idle key starts its burst's worth back; tokens an earlier
		// version left in the row count as that burst.
		burst := time.Duration(max(1, rate*burstSeconds) * float64(out.Every))
		start := latest(r.RefilledAt.Add(-time.Duration(r.Tokens*float64(out.Every))), r.Now.Add(-burst))
		// The times from start that fall before leaseAhead from now, if
		// at least half of those asked for do: replicas that take turns
		// lease a block each, not a time each as soon as one is free.
		room := r.Now.Add(leaseAhead).Sub(start)
		least := max(1, want/2)
		if fit := int((room-1)/out.Every) + 1; room > 0 && fit >= least {
			out.Granted = min(want, fit)
		} else {
			out.NextIn = max(time.Millisecond, time.Duration(least)*out.Every-room)
			return nil
		}
		out.Start = start.Sub(r.Now)
		cur := r.CurrentRate
		if cur != nil && rate == 0 {
			cur = nil // an adaptive key's 429s are forgotten
		}
		_, err = tx.Exec(ctx, s.sql(sqlLimitLease), key, 0, start.Add(time.Duration(out.Granted)*out.Every), out.Granted, cur, r.Now)
		return err
	})
	if err != nil {
		return Lease{}, fmt.Errorf("lease tokens of limit %s: %w", key, err)
	}
	return out, nil
}

// Throttle records a 429 for key at at (nil: the database's now): the key
// is paused for after (or, when the provider named no delay, base doubled
// for each episode in a row), and, once per episode, its current rate is
// halved, though not below observed: the requests a second this process
// saw the provider accept in the last second (a key that had no rate
// starts there). again says this process saw no request of the key
// accepted since its last 429: only then does the pause double. It returns the end of
// the pause, and how long from now that is.
func (s *Store) Throttle(ctx context.Context, db TxDB, key string, after, base time.Duration, observed float64, again bool, at *time.Time) (time.Time, time.Duration, error) {
	var until time.Time
	var left time.Duration
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, s.sql(sqlLimitInsert), key, nil, "default"); err != nil {
			return err
		}
		r, err := scanLimit(tx.QueryRow(ctx, s.sql(sqlLimitForUpdate), key, at))
		if err != nil {
			return err
		}
		inRow, cur, curAt := r.ThrottledInRow, r.CurrentRate, r.CurrentAt
		episode := !r.Paused()
		if episode {
			// A new episode; 429s answering requests sent before the pause
			// began belong to the one that paused it.
			if again && r.LastThrottleAt != nil && r.PausedUntil != nil && r.Now.Sub(*r.PausedUntil) < 2*r.PausedUntil.Sub(*r.LastThrottleAt)+time.Second {
				inRow++
			} else {
				inRow = 1
			}
			// Lowered by a quarter, but never below what the provider was
			// just seen to accept; a key with no rate of its own starts
			// there (at least 1/s), and is halved from then on.
			var next float64
			switch rate := r.Effective(); {
			case rate > 0 && r.Rate != nil:
				next = max(minRate, min(rate, max(rate*0.75, observed)))
			case rate > 0:
				next = max(minRate, min(rate, max(rate/2, observed)))
			default:
				next = max(1, observed)
			}
			cur = &next
		}
		pause := after
		if pause <= 0 && episode {
			// Within a pause only a delay the provider names extends it;
			// a new episode without one waits the doubling pause.
			pause = min(base<<min(max(inRow-1, 0), 10), maxLimitPause)
		}
		until = r.Now.Add(pause)
		if r.PausedUntil != nil && r.PausedUntil.After(until) {
			until = *r.PausedUntil
		}
		if episode || (cur != nil && curAt.Before(until)) {
			// The rate climbs back from the end of the pause.
			curAt = until
		}
		left = until.Sub(r.Now)
		_, err = tx.Exec(ctx, s.sql(sqlLimitThrottle), key, r.Now, until, cur, curAt, inRow)
		return err
	})
	if err != nil {
		return time.Time{}, 0, fmt.Errorf("record 429 of limit %s: %w", key, err)
	}
	return until, left, nil
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
// "default"), unless an operator set it.
func (s *Store) ConfigureLimit(ctx context.Context, db DB, key string, rate float64, source string) error {
	if _, err := db.Exec(ctx, s.sql(sqlLimitConfigure), key, rate, source); err != nil {
		return fmt.Errorf("configure limit %s: %w", key, err)
	}
	return nil
}

// SetLimit sets key's rate as operator actor (rate nil: no rate of its
// own, the key slows on 429s only) and, when resume, ends a 429's pause;
// audited with reason. It returns the rate the key had.
func (s *Store) SetLimit(ctx context.Context, db TxDB, key string, rate *float64, actor, reason string, resume bool) (*float64, error) {
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
		if _, err := tx.Exec(ctx, s.sql(sqlLimitSet), key, rate, "operator:"+actor, resume); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, s.sql(sqlLimitAudit), key, actor, reason, before, rate, resume)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("set limit %s: %w", key, err)
	}
	return before, nil
}

// LimitReports is every limit key with the effects waiting for it (a key
// effects wait for that has no row yet is listed too).
func (s *Store) LimitReports(ctx context.Context, db DB) ([]outboxtype.LimitReport, error) {
	rows, err := s.Limits(ctx, db)
	if err != nil {
		return nil, err
	}
	type waiting struct {
		n           int64
		since, from *time.Time
	}
	waits := map[string]waiting{}
	wr, err := db.Query(ctx, s.sql(sqlWaitingByLimit))
	if err != nil {
		return nil, fmt.Errorf("effects waiting for limits: %w", err)
	}
	for wr.Next() {
		var key string
		var w waiting
		if err := wr.Scan(&key, &w.n, &w.since, &w.from); err != nil {
			wr.Close()
			return nil, err
		}
		waits[key] = w
	}
	wr.Close()
	if err := wr.Err(); err != nil {
		return nil, err
	}
	out := make([]outboxtype.LimitReport, 0, len(rows))
	for _, r := range rows {
		rep := outboxtype.LimitReport{Key: r.Key, Rate: r.Rate, RateSource: r.RateSource, CurrentRate: r.Effective(),
			Throttles: r.Throttles, LastThrottleAt: r.LastThrottleAt, Granted: r.Granted}
		if r.Paused() {
			rep.PausedUntil = r.PausedUntil
		}
		if w, ok := waits[r.Key]; ok {
			rep.WaitingEffects, rep.WaitingSince, rep.OldestKeyWindowFrom = w.n, w.since, w.from
			delete(waits, r.Key)
		}
		out = append(out, rep)
	}
	for key, w := range waits {
		out = append(out, outboxtype.LimitReport{Key: key, WaitingEffects: w.n, WaitingSince: w.since, OldestKeyWindowFrom: w.from})
	}
	slices.SortFunc(out, func(a, b outboxtype.LimitReport) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
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
		err := r.Scan(&c.Key, &c.Actor, &c.Reason, &c.FromRate, &c.ToRate, &c.Resumed, &c.At)
		return c, err
	})
}

// ReleaseThrottled moves effect id from fired back to pending after a 429:
// the attempt does not count, and the effect waits for limit key until
// next.
func (s *Store) ReleaseThrottled(ctx context.Context, db DB, id uuid.UUID, lastError string, next time.Time, inDoubt bool, key string) (bool, error) {
	return s.exec(ctx, db, "release throttled", s.sql(sqlReleaseThrottled), id, lastError, next, inDoubt, key)
}

// OutcomeThrottled is the attempt history's outcome of a request the
// provider refused for rate: it does not count as an attempt.
const OutcomeThrottled = "throttled"

// MarkWaiting records that pending effect id waits for limit key.
func (s *Store) MarkWaiting(ctx context.Context, db DB, id any, key string) error {
	_, err := db.Exec(ctx, s.sql(sqlMarkWaiting), id, key)
	return err
}

// jitterUpTo is a random duration in [0, d).
func jitterUpTo(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return rand.N(d)
}

// Resuming a key: its pause and its lowered rate end, and the effects
// waiting for it get their jobs now.
const (
	sqlLimitResume = `UPDATE /*schema*/outboxd_limits
SET paused_until = NULL, current_rate = NULL, throttled_in_a_row = 0, updated_at = now() WHERE key = $1 RETURNING rate`
	// The jobs of their own (a waiting effect is never in a batch's first
	// attempts) of the effects due that wait for key $1, at most $2.
	sqlJobsWaitingFor = `
SELECT j.id FROM /*schema*/side_effects e
JOIN /*schema*/river_job j ON j.kind = 'outboxd.dispatch' AND j.args @> jsonb_build_object('effect_id', e.id)
WHERE e.phase = 'live' AND e.state = 'pending' AND e.waiting_for = $1 AND (e.not_before IS NULL OR e.not_before <= now())
	AND j.state IN ('scheduled', 'retryable', 'available') AND j.scheduled_at > now()
LIMIT $2`
)

// MaxResumeWakes bounds the jobs one ResumeLimit makes due at once; the
// rest come at the time they were given.
const MaxResumeWakes = 10000

// resumeMargin is how long past a limit refresh ResumeLimit waits before
// it wakes the effects waiting for the key it resumed.
const resumeMargin = 300 * time.Millisecond

// ResumeLimit ends the pause and the lowered rate of key (a 429's, or a
// destination that held its effects back, such as a disabled endpoint)
// for every replica, and makes the effects waiting for it due. Audited
// with actor and reason; it returns how many effects it woke.
func (o *Operator) ResumeLimit(ctx context.Context, key, actor, reason string) (int, error) {
	woken, err := o.ResumeLimits(ctx, []string{key}, actor, reason)
	return woken[key], err
}

// ResumeLimits is ResumeLimit for each of keys, each audited, and returns
// how many effects it woke for each.
func (o *Operator) ResumeLimits(ctx context.Context, keys []string, actor, reason string) (map[string]int, error) {
	err := pgx.BeginFunc(ctx, o.pool, func(tx pgx.Tx) error {
		for _, key := range keys {
			var rate *float64
			err := tx.QueryRow(ctx, o.store.sql(sqlLimitResume), key).Scan(&rate)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("resume limit %s: %w", key, err)
			}
			if _, err := tx.Exec(ctx, o.store.sql(sqlLimitAudit), key, actor, reason, rate, rate, true); err != nil {
				return fmt.Errorf("resume limit %s: %w", key, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return o.WakeWaiting(ctx, keys)
}

// WakeWaiting makes the effects waiting for each of keys due, once every
// replica has read the keys' rows again (limitRefresh, plus a margin): a
// replica that still remembered a pause just ended would send a woken
// effect away for the rest of it. Called after a pause ends or a rate is
// raised; it returns how many effects it woke for each key.
func (o *Operator) WakeWaiting(ctx context.Context, keys []string) (map[string]int, error) {
	select {
	case <-time.After(limitRefresh + resumeMargin):
	case <-ctx.Done():
		return nil, fmt.Errorf("limits %s changed; their waiting effects go at the time they were given: %w", strings.Join(keys, ", "), ctx.Err())
	}
	woken := map[string]int{}
	for _, key := range keys {
		err := pgx.BeginFunc(ctx, o.pool, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, o.store.sql(sqlJobsWaitingFor), key, MaxResumeWakes)
			if err != nil {
				return err
			}
			jobs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
			if err != nil {
				return err
			}
			for _, id := range jobs {
				if _, err := o.river.JobRetryTx(ctx, tx, id); err != nil {
					return fmt.Errorf("make job %d due: %w", id, err)
				}
			}
			woken[key] = len(jobs)
			return nil
		})
		if err != nil {
			return woken, fmt.Errorf("wake the effects waiting for limit %s: %w", key, err)
		}
	}
	return woken, nil
}
