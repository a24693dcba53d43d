package engine

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/internal/store"
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
// quarter for a key with a rate of its own, by half for one without). A
// key with a rate climbs back by a tenth of it each second; one without
// climbs while its requests fill its schedule, by a tenth of a request a
// second for each request (limitRow.climbed): additive increase,
// multiplicative decrease.

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
	// anySecondMargin is how much more than a second any rate + 1
	// request times of a key held "in any second" span: a request leaves
	// at its time, or up to leaseTTL after it when its worker came late,
	// and a second's worth of later ones may leave on time.
	anySecondMargin = leaseTTL
	// maxLimitPause bounds a key's pause after a 429 that named no
	// delay: each such episode in a row doubles the first pause
	// (sideeffects.DefaultLimitPause), up to this.
	maxLimitPause = time.Minute
	// minRate is the lowest rate a 429 brings a key to.
	minRate = 0.2
	// adaptiveForget is how long after its last 429 a key with no rate of
	// its own is unlimited again, once its requests stop filling its
	// schedule for adaptiveIdle.
	adaptiveForget = 5 * time.Minute
	adaptiveIdle   = time.Second
	// LimitRefresh is how often a process reads every key's row, to learn
	// of pauses and rates other replicas or operators set.
	LimitRefresh = time.Second
)

// limitRow is a limit key's row with the rules that read it.
type limitRow struct{ *store.LimitRow }

// Effective is the rate the key may take at the row's Now: its rate, or the
// rate a 429 lowered it to plus what it has regained since; 0 when it has
// none (the key is not limited).
func (r limitRow) Effective() float64 {
	if r.CurrentRate == nil {
		if r.Rate == nil {
			return 0
		}
		return *r.Rate
	}
	if r.Rate == nil {
		if r.forgotten() {
			return 0
		}
		return *r.CurrentRate
	}
	return min(*r.Rate, *r.CurrentRate+r.step()*max(0, r.Now.Sub(r.CurrentAt).Seconds()))
}

// forgotten reports whether a key with no rate of its own is unlimited
// again: its last 429 is adaptiveForget old and no request time was given
// out in the last adaptiveIdle. A key forgotten while its requests still
// filled its schedule sent its whole line at once (a 10 s window at 362%
// of a 50/s receiver's rate, five minutes into a drain).
func (r limitRow) forgotten() bool {
	return (r.LastThrottleAt == nil || r.Now.Sub(*r.LastThrottleAt) > adaptiveForget) &&
		r.Now.Sub(r.RefilledAt) > adaptiveIdle
}

// climbed is the current rate of a key with no rate of its own after
// granting n more request times: each time given out right after the one
// before (its schedule full: the key binds) raises the rate by a tenth of
// a request a second, and by at least 1/s for every second's worth of its
// rate, so a key that binds climbs by a tenth of its rate a second, at
// least 1/s. A key whose requests do not fill its schedule stays where it
// is: nothing tests a higher rate. Climbing by the clock instead, a key
// climbed through every quiet spell (20 requests every 90 s to a 5/s
// receiver took it past 2,000,000/s); bounded by what it had taken since
// its 429, it stayed near 1/s while its waiting jobs were snoozed for
// minutes, and a 50/s receiver's 750 deliveries took 319 s.
//
// A rate guessed at a key's first 429 (SlowStart: nothing told what the
// partner accepts, and a fleet starting on a backlog gets its 429s before
// it has seen much accepted) climbs as TCP's slow start does until the
// next 429: each request raises it by 1/s, doubling it each second the key
// binds. From 1/s the drain of 1,500 deliveries to a 50/s receiver took
// 1.94x the ideal climbing by a tenth a second.
func (r limitRow) climbed(n int) float64 {
	cur := *r.CurrentRate
	if r.SlowStart {
		return cur + float64(n)
	}
	return cur + float64(n)*max(1/cur, 0.1)
}

// full reports whether the key's schedule was given out up to (or beyond)
// start: the lease follows on from the one before.
func (r limitRow) full(start time.Time) bool { return !r.RefilledAt.Before(start) }

// step is how much a key's lowered rate climbs back each second: a tenth
// of its own rate, or of its current one, at least 1/s (for a key with no
// rate of its own, each second its requests fill its schedule). CurrentRate
// is set.
func (r limitRow) step() float64 {
	if r.Rate != nil {
		return max(1, *r.Rate/10)
	}
	return max(1, *r.CurrentRate/10)
}

// Climb is how fast the key's rate climbs back after its 429s, per second,
// and the rate it climbs to (+Inf for a key with no rate of its own, which
// climbs while its requests use it): 0 and its rate when it does not
// climb.
func (r limitRow) Climb() (step, ceiling float64) {
	eff := r.Effective()
	if r.CurrentRate == nil || eff <= 0 {
		return 0, eff
	}
	if r.Rate == nil && r.SlowStart {
		return eff, math.Inf(1)
	}
	if r.Rate == nil {
		return r.step(), math.Inf(1)
	}
	if eff >= *r.Rate {
		return 0, eff
	}
	return r.step(), *r.Rate
}

// Paused reports whether the key is paused at the row's Now.
func (r limitRow) Paused() bool { return r.PausedUntil != nil && r.Now.Before(*r.PausedUntil) }

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
	// second, and to what (limitRow.Climb).
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
func LeaseTokens(ctx context.Context, s *store.Store, db store.TxDB, key string, want int, at *time.Time) (Lease, error) {
	var out Lease
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		// The transaction's now() is when BEGIN ran: before this.
		out.At = time.Now()
		row, err := s.LockLimit(ctx, tx, key, at)
		if err != nil {
			return err
		}
		if row == nil {
			out = Lease{At: out.At, Granted: want}
			return nil
		}
		r := limitRow{row}
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
		out.Every = spacing(rate, false)
		// The schedule only moves forward: now() is when this transaction
		// began, possibly before another that waited less for the row
		// lock moved it, and a time given out is never given again. An
		// idle key starts its burst's worth back; tokens an earlier
		// version left in the row count as that burst.
		burst := time.Duration(max(1, rate*burstSeconds) * float64(out.Every))
		if r.InAnySecond {
			// At most rate in any second: no burst (and spacing's times).
			out.Every, burst = spacing(rate, true), 0
		}
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
		switch {
		case cur != nil && rate == 0:
			cur = nil // an adaptive key's 429s are forgotten
		case cur != nil && r.Rate == nil && r.full(start):
			next := r.climbed(out.Granted)
			cur = &next
		}
		return s.WriteLease(ctx, tx, key, start.Add(time.Duration(out.Granted)*out.Every), out.Granted, cur, r.Now)
	})
	if err != nil {
		return Lease{}, fmt.Errorf("lease tokens of limit %s: %w", key, err)
	}
	return out, nil
}

// spacing is how far apart a key's request times are at rate: 1/rate,
// rounded up (a time given out is never early), or, for a key held in
// any second, far enough that any rate + 1 of them span a second and
// anySecondMargin, so that requests that leave up to that margin after
// their time still keep it.
func spacing(rate float64, inAnySecond bool) time.Duration {
	if inAnySecond {
		return time.Duration(math.Ceil(float64(time.Second+anySecondMargin) / rate))
	}
	return time.Duration(math.Ceil(float64(time.Second) / rate))
}

// A429 is one refusal for rate (an HTTP 429) of a request of a key.
type A429 struct {
	// After is the delay the provider named (0: none).
	After time.Duration
	// Base is the first pause of an episode when the provider named no
	// delay; it doubles for each episode in a row.
	Base time.Duration
	// Observed is the requests a second this process saw the provider
	// accept in the last second.
	Observed float64
	// Again says this process saw no request of the key accepted since
	// its last 429: only then does the pause double.
	Again bool
	// Sent is when the refused request was sent (zero: unknown). A 429 of
	// a request sent before the key's last 429 belongs to the episode that
	// 429 began or joined: it neither starts another nor lowers the rate
	// again, whenever it arrives.
	Sent time.Time
	// At is when to record it (nil: the database's now).
	At *time.Time
}

// Throttle records a 429 for key: the key is paused for its After (or,
// when the provider named no delay, Base doubled for each episode in a
// row), and, once per episode, its current rate is lowered, though not
// below Observed (a key that had no rate starts there). It returns the
// end of the pause, and how long from now that is.
func Throttle(ctx context.Context, s *store.Store, db store.TxDB, key string, t A429) (time.Time, time.Duration, error) {
	after, base, observed, again, at := t.After, t.Base, t.Observed, t.Again, t.At
	var until time.Time
	var left time.Duration
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if err := s.EnsureLimit(ctx, tx, key); err != nil {
			return err
		}
		row, err := s.LockLimit(ctx, tx, key, at)
		if err != nil {
			return err
		}
		r := limitRow{row}
		inRow, cur, curAt, slowStart := r.ThrottledInRow, r.CurrentRate, r.CurrentAt, r.SlowStart
		// Many requests in flight when a provider starts refusing get
		// their 429s together, some after the pause they caused has
		// ended: those belong to that episode. Counted as new ones, each
		// doubled the pause (a fleet of workers stopped for ~20 s after 8
		// early 429s).
		stale := !t.Sent.IsZero() && r.LastThrottleAt != nil && t.Sent.Before(*r.LastThrottleAt)
		lastAt := r.Now
		if stale {
			lastAt = *r.LastThrottleAt
		}
		episode := !r.Paused() && !stale
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
			// there (at least 1/s), and is halved from then on. An episode
			// in a row (nothing accepted since the last one: the probe
			// after a pause was refused too) keeps the rate it had: a
			// provider that refuses everything for a while says nothing
			// about how fast it accepts, and halving at every probe left a
			// 349/s key at 25/s after 30 s of 429s, its backlog crawling
			// out long after the provider was back.
			var next float64
			slowStart = false
			switch rate := r.Effective(); {
			case inRow > 1 && cur != nil && rate > 0:
				next, slowStart = rate, r.SlowStart
			case rate > 0 && r.Rate != nil:
				next = max(minRate, min(rate, max(rate*0.75, observed)))
			case rate > 0:
				next = max(minRate, min(rate, max(rate/2, observed)))
			default:
				next, slowStart = max(1, observed), true
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
		if episode || (cur != nil && curAt.Before(until) && until.After(r.Now)) {
			// The rate climbs back from the end of the pause (a late 429
			// that paused nothing leaves it climbing).
			curAt = until
		}
		left = until.Sub(r.Now)
		return s.WriteThrottle(ctx, tx, key, r.Now, until, cur, curAt, inRow, lastAt, slowStart)
	})
	if err != nil {
		return time.Time{}, 0, fmt.Errorf("record 429 of limit %s: %w", key, err)
	}
	return until, left, nil
}

// ReplayLimitPrefix starts the limit key of a paced replay's pace
// ("replay:3"): every request of an effect the replay retried, retries
// included, takes a time of it (Effect.ReplayID), so the replay's pace
// covers all the traffic it causes.
const ReplayLimitPrefix = "replay:"

// ReplayLimitKey is replay id's limit key.
func ReplayLimitKey(id int64) string { return ReplayLimitPrefix + strconv.FormatInt(id, 10) }

// SharedLimits is where the limit keys are kept when the dispatchers of
// more than one database (shards) share them: a database migrated for
// outboxd (one of the shards, or one of its own) and its schema's store.
// A replay's pace (replay:<id>) stays with its own database.
type SharedLimits struct {
	Pool  *pgxpool.Pool
	Store *store.Store
}

// LimitsPlace returns where key's row is kept: shared (if set), but a
// replay's pace in db and s, the database the replay ran in.
func LimitsPlace(shared *SharedLimits, db *pgxpool.Pool, s *store.Store, key string) (*pgxpool.Pool, *store.Store) {
	if shared == nil || strings.HasPrefix(key, ReplayLimitPrefix) {
		return db, s
	}
	return shared.Pool, shared.Store
}

// LimitRows reads every limit key's row: the shared place's and, when
// there is one, the replays' paces kept in db and s.
func LimitRows(ctx context.Context, shared *SharedLimits, db *pgxpool.Pool, s *store.Store) ([]*store.LimitRow, error) {
	if shared == nil {
		return s.Limits(ctx, db)
	}
	rows, err := shared.Store.Limits(ctx, shared.Pool)
	if err != nil {
		return nil, err
	}
	rows = slices.DeleteFunc(rows, func(r *store.LimitRow) bool { return strings.HasPrefix(r.Key, ReplayLimitPrefix) })
	local, err := s.Limits(ctx, db)
	if err != nil {
		return nil, err
	}
	for _, r := range local {
		if strings.HasPrefix(r.Key, ReplayLimitPrefix) {
			rows = append(rows, r)
		}
	}
	slices.SortFunc(rows, func(a, b *store.LimitRow) int { return strings.Compare(a.Key, b.Key) })
	return rows, nil
}

// LimitNow is what key row allows at its Now: the rate it may take (its
// own, or the one a 429 lowered it to plus what it has regained since) and
// whether a 429's pause still holds it.
func LimitNow(row *store.LimitRow) (rate float64, paused bool) {
	r := limitRow{row}
	return r.Effective(), r.Paused()
}

// OutcomeThrottled is the attempt history's outcome of a request the
// provider refused for rate: it does not count as an attempt.
const OutcomeThrottled = "throttled"

// jitterUpTo is a random duration in [0, d).
func jitterUpTo(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return rand.N(d)
}
