package engine

import (
	"cmp"
	"context"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/internal/store"
	"github.com/outboxd/outboxd/outboxtype"
)

// How long a worker waits in process for a token before its job waits
// without holding the worker: an account's requests have a River queue of
// their own, so its workers may wait longer than those of a destination,
// whose queue other destinations share. Waiting in process costs nothing;
// a job that gives up is snoozed and fetched again, a write each way: with
// several replicas' workers queued for one account (3 × 100 for 100/s wait
// 3 s each) a short wait turned into a stream of snoozes that slowed the
// drain to half the limit (docs/performance.md, "Limits at 20,000"). So an
// account's worker waits up to half the job timeout (accountWaitFor).
const (
	accountWait     = 30 * time.Second
	destinationWait = 250 * time.Millisecond
)

// accountWaitFor is how long a worker waits for its account's token under
// jobTimeout: accountWait, at most half the timeout.
func accountWaitFor(jobTimeout time.Duration) time.Duration {
	if jobTimeout <= 0 {
		return accountWait
	}
	return min(accountWait, jobTimeout/2)
}

// limiter is one process's side of the shared rate limits (limits.go): the
// tokens it leased, the pauses it knows of, and the workers waiting. A key
// that has no row (no rate, never throttled) costs no statement at all.
type limiter struct {
	pool  *pgxpool.Pool
	store *store.Store
	// shared, when set, is where every limit key's row is kept but a
	// replay's (SharedLimits): the dispatchers of every database that
	// names it share the keys.
	shared    *SharedLimits
	logger    *slog.Logger
	pauseBase time.Duration
	// clock, when set by tests, is the time the buckets refill up to
	// (production: the database's now, one clock for every replica).
	clock func() *time.Time

	mu   sync.Mutex
	keys map[string]*keyState
	// pending are the rates set at start not yet written to their rows
	// (the database may be down at start: each refresh tries again).
	pending []configured

	stop chan struct{}
	done chan struct{}
}

type keyState struct {
	// limited: tokens must be leased (a rate, or a pause); from the last
	// lease, throttle or refresh.
	limited bool
	rate    float64
	// climb and ceiling: how fast rate climbs back after 429s, per
	// second, and to what (0 and rate when it does not).
	climb, ceiling float64
	configured     *float64
	pausedUntil    time.Time
	// pausedAt is when a 429 here last paused the key.
	pausedAt time.Time
	// pauseChecked: a request about to be sent away for the whole pause
	// read the key's row since the last refresh.
	pauseChecked bool
	// writing counts this process's 429s of the key whose pause is being
	// written: the row does not show their pause yet.
	writing int
	// slots request times leased and not yet taken: the next at slotAt,
	// the others every apart, each good until leaseTTL after it or after
	// leasedAt (the burst of an idle key lies before the lease). nextAt
	// is when the key has times to lease again after a lease that got
	// none.
	slots    int
	slotAt   time.Time
	every    time.Duration
	leasedAt time.Time
	nextAt   time.Time
	// scarce: the last lease got fewer times than asked (the key binds).
	scarce bool
	// line is how many effects wait for the key over every replica, read
	// each LimitRefresh while a destination's key binds here.
	line  int
	lined bool
	// leasing is closed when the lease in flight returns.
	leasing chan struct{}
	waiting int
	// accepted counts the requests the provider took (answered other
	// than 429): a 429 never brings the key below what it was just seen
	// to take. okSince counts those since the key's last 429.
	accepted perSecond
	okSince  int
	// spent counts leased times taken: how many to lease at once; leased
	// counts times leased: this process's share of the key.
	spent   perSecond
	leased  perSecond
	lastUse time.Time
	// fleetShare is the part of the key's times, over every process
	// leasing it, that this process leased between the last two
	// refreshes that saw it move (0: not known): what it keeps to while
	// the shared place cannot be reached (fallback). mine counts the
	// times it leased, minedAt and grantedAt the counts at the last
	// refresh (grantedAt 0: no baseline).
	fleetShare    float64
	mine, minedAt int64
	grantedAt     int64
	inAnySecond   bool
	fallbackNext  time.Time
	fallingBack   bool
}

func newLimiter(pool *pgxpool.Pool, store *store.Store, logger *slog.Logger, pauseBase time.Duration) *limiter {
	return &limiter{pool: pool, store: store, logger: logger, pauseBase: pauseBase, keys: map[string]*keyState{}}
}

// place is LimitsPlace for this limiter.
func (l *limiter) place(key string) (*pgxpool.Pool, *store.Store) {
	return LimitsPlace(l.shared, l.pool, l.store, key)
}

// state returns key's state; l.mu is held.
func (l *limiter) state(key string) *keyState {
	st := l.keys[key]
	if st == nil {
		st = &keyState{}
		l.keys[key] = st
	}
	return st
}

type configured struct {
	key         string
	rate        float64
	inAnySecond bool
	source      string
}

// ensure records a rate set at start for key (source "config" or
// "default"), held in any second or as an average: the key leases tokens
// from its first request on, and its row is written when the limiter
// starts.
func (l *limiter) ensure(key string, rate float64, inAnySecond bool, source string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.state(key)
	st.limited, st.rate, st.configured = true, rate, &rate
	l.pending = append(l.pending, configured{key, rate, inAnySecond, source})
}

// writePending writes the rates set at start that are not written yet.
func (l *limiter) writePending(ctx context.Context) error {
	l.mu.Lock()
	todo := slices.Clone(l.pending)
	l.mu.Unlock()
	for i, c := range todo {
		pool, st := l.place(c.key)
		if err := st.ConfigureLimit(ctx, pool, c.key, c.rate, c.inAnySecond, c.source); err != nil {
			l.mu.Lock()
			l.pending = l.pending[i:]
			l.mu.Unlock()
			return err
		}
	}
	l.mu.Lock()
	l.pending = l.pending[len(todo):]
	l.mu.Unlock()
	return nil
}

func (st *keyState) count(now time.Time) { st.lastUse = now }

// perSecond counts events in the current and the previous second.
type perSecond struct {
	second    time.Time
	cur, prev int
}

// add counts one event at now.
func (c *perSecond) add(now time.Time) { c.addN(now, 1) }

// addN counts n events at now.
func (c *perSecond) addN(now time.Time, n int) {
	c.roll(now)
	c.cur += n
}

// last is the count of the second before now's.
func (c *perSecond) last(now time.Time) int {
	c.roll(now)
	return c.prev
}

func (c *perSecond) roll(now time.Time) {
	sec := now.Truncate(time.Second)
	switch {
	case sec.Equal(c.second):
	case sec.Sub(c.second) == time.Second:
		c.prev, c.cur, c.second = c.cur, 0, sec
	default:
		c.prev, c.cur, c.second = 0, 0, sec
	}
}

// accepted records that a request of key was not refused for rate (any
// outcome but a 429).
func (l *limiter) accepted(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.keys[key]
	if st == nil {
		return
	}
	st.accepted.add(time.Now())
	st.okSince++
}

// take waits up to maxWait for a request time of key. When none comes it
// returns false and how long the request should wait before it asks
// again (the pause, or its place behind the other waiters, with jitter).
// With short, a request does not wait at all when more wait already than
// this process's share of the key serves within maxWait: a destination's
// waiters hold workers other destinations need.
func (l *limiter) take(ctx context.Context, key string, maxWait time.Duration, short bool) (bool, time.Duration, error) {
	_, ok, wait, err := l.takeDue(ctx, key, maxWait, short)
	return ok, wait, err
}

// takeDue is take, and also returns, while the key binds, the time the
// request was given (zero otherwise): a request that has work to do
// between its time and its call (an account's claim) goes out at that
// time plus sendLag (sendDue), so that how long that work took does not
// bunch requests together.
func (l *limiter) takeDue(ctx context.Context, key string, maxWait time.Duration, short bool) (time.Time, bool, time.Duration, error) {
	deadline := time.Now().Add(maxWait)
	l.mu.Lock()
	st := l.state(key)
	if short {
		st.lined = true
	}
	if now := time.Now(); short && st.limited && st.waiting >= max(2, int(st.share(now)*maxWait.Seconds())) {
		wait := st.behind(now) + st.spread()
		l.mu.Unlock()
		return time.Time{}, false, wait, nil
	}
	st.waiting++
	defer func() {
		st.waiting--
		l.mu.Unlock()
	}()
	for {
		now := time.Now()
		if now.Before(st.pausedUntil) {
			if st.pausedUntil.After(deadline) {
				if !st.pauseChecked && l.pauseEnded(ctx, key, st) {
					continue
				}
				return time.Time{}, false, st.pausedUntil.Sub(now) + st.behind(now) + jitterUpTo(time.Second), nil
			}
			if err := l.sleepUntil(ctx, st.pausedUntil, nil); err != nil {
				return time.Time{}, false, 0, err
			}
			continue
		}
		if !st.limited {
			st.count(now)
			return time.Time{}, true, 0, nil
		}
		st.dropStale(now)
		if st.slots > 0 {
			at := st.slotAt
			if at.After(deadline) {
				return time.Time{}, false, at.Sub(now) + st.behind(now) + st.spread(), nil
			}
			// This request's time: the next one, even if it is still
			// ahead; it sleeps until then.
			st.slots--
			st.slotAt = at.Add(st.every)
			st.count(now)
			st.spent.add(now)
			if at.After(now) {
				if err := l.sleepUntil(ctx, at, nil); err != nil {
					return time.Time{}, false, 0, err
				}
				if time.Now().Before(st.pausedUntil) {
					continue // a 429 paused the key meanwhile: the time is lost
				}
			}
			if !st.scarce {
				at = time.Time{}
			}
			return at, true, 0, nil
		}
		if st.leasing != nil {
			if err := l.sleepUntil(ctx, deadline, st.leasing); err != nil {
				return time.Time{}, false, 0, err
			}
			if !time.Now().Before(deadline) {
				return time.Time{}, false, st.behind(time.Now()) + st.spread(), nil
			}
			continue
		}
		if now.Before(st.nextAt) {
			if st.nextAt.After(deadline) {
				return time.Time{}, false, st.nextAt.Sub(now) + st.behind(now) + st.spread(), nil
			}
			if err := l.sleepUntil(ctx, st.nextAt, nil); err != nil {
				return time.Time{}, false, 0, err
			}
			continue
		}
		// As many as wait now, or as this process took in a quarter of a
		// second lately, whichever is more: a key whose rate does not
		// bind costs a statement per block, not per few requests. At most
		// leaseBlock (a fifth of a second) of the key's rate.
		want := max(1, st.waiting, st.spent.last(now)/4)
		if st.rate > 0 {
			want = min(want, max(1, int(st.rate*leaseBlock)))
		}
		ch := make(chan struct{})
		st.leasing = ch
		var at *time.Time
		if l.clock != nil {
			at = l.clock()
		}
		l.mu.Unlock()
		pool, lst := l.place(key)
		lease, err := LeaseTokens(ctx, lst, pool, key, want, at)
		l.mu.Lock()
		st.leasing = nil
		close(ch)
		if err != nil {
			fb, ok := l.fallback(ctx, key, st, want, err)
			if !ok {
				return time.Time{}, false, 0, err
			}
			lease = fb
		}
		st.mine += int64(lease.Granted)
		now = time.Now()
		st.limited, st.rate = lease.Limited, lease.Rate
		st.climb, st.ceiling = lease.Climb, lease.Ceiling
		if lease.PausedFor > 0 {
			st.pausedUntil = latest(st.pausedUntil, now.Add(lease.PausedFor))
		}
		st.slots, st.nextAt = 0, time.Time{}
		st.scarce = lease.Limited && lease.Granted < want
		switch {
		case !lease.Limited:
		case lease.Granted > 0:
			st.slots, st.slotAt, st.every, st.leasedAt = lease.Granted, lease.At.Add(lease.Start), lease.Every, now
			st.leased.addN(now, lease.Granted)
		case lease.NextIn > 0:
			st.nextAt = now.Add(lease.NextIn)
		}
	}
}

// fallback leases want times of key from this process's own schedule
// when the shared place (SharedLimits) cannot be reached (err): at the
// part of the key's rate this process was leasing before (fleetShare),
// so that the processes that were sending keep sending, together within
// the rate, and none that was not starts. It says so once per spell.
// False when it does not apply: no shared place, a key of this database,
// no rate or no share known, or ctx ended. l.mu is held.
func (l *limiter) fallback(ctx context.Context, key string, st *keyState, want int, err error) (Lease, bool) {
	if l.shared == nil || strings.HasPrefix(key, ReplayLimitPrefix) || ctx.Err() != nil || st.rate <= 0 || st.fleetShare <= 0 {
		return Lease{}, false
	}
	now := time.Now()
	rate := st.rate * st.fleetShare
	out := Lease{At: now, Limited: true, Rate: rate, Every: spacing(rate, st.inAnySecond)}
	start := latest(st.fallbackNext, now)
	room := now.Add(leaseAhead).Sub(start)
	if fit := int((room-1)/out.Every) + 1; room > 0 && fit >= 1 {
		out.Granted = min(want, fit)
		out.Start = start.Sub(now)
		st.fallbackNext = start.Add(time.Duration(out.Granted) * out.Every)
	} else {
		out.NextIn = max(time.Millisecond, out.Every-room)
	}
	if !st.fallingBack {
		st.fallingBack = true
		l.logger.Warn("the shared limits cannot be reached: this process keeps to its part of the key's rate until they can",
			"limit", key, "rate", rate, "share", st.fleetShare, "error", err)
	}
	// Its own times are not in the shared row: the share is measured
	// afresh once the place is back.
	st.grantedAt = 0
	return out, true
}

// sendLag is how long after its time an account's request goes out: the
// claim between the two takes milliseconds, and a provider's bucket holds
// a fifth of a second or less; requests whose claims were slow would
// otherwise go out together with those that were not.
const sendLag = 100 * time.Millisecond

// sendDue waits until due plus sendLag (due zero: not at all).
func sendDue(ctx context.Context, due time.Time) error {
	if due.IsZero() {
		return nil
	}
	return waitUntil(ctx, due.Add(sendLag), nil)
}

// dropStale forgets the leased times that passed more than leaseTTL ago
// unused (and more than leaseTTL after they were leased); l.mu is held.
func (st *keyState) dropStale(now time.Time) {
	late := now.Sub(st.slotAt) - leaseTTL
	if st.slots == 0 || late <= 0 || st.every <= 0 || now.Sub(st.leasedAt) <= leaseTTL {
		return
	}
	n := min(st.slots, int(late/st.every)+1)
	st.slots -= n
	st.slotAt = st.slotAt.Add(time.Duration(n) * st.every)
}

// share is the rate this process gets of the key: while the key binds,
// what it leased in the last second (at least a sixteenth of the rate);
// otherwise the key's rate. l.mu is held.
func (st *keyState) share(now time.Time) float64 {
	if !st.scarce {
		return st.rate
	}
	return min(st.rate, max(st.rate/16, float64(st.leased.last(now))))
}

// spread is how long after those ahead of it in this process a request
// turned away comes back: at random within three quarters of the time the
// whole line (every replica's effects waiting for the key) takes at the
// key's rate, climbing back as it does after 429s, so that the jobs turned
// away come back a little faster than the key serves them (a time with no
// worker waiting for it is lost), not all together again (at least
// 100 ms); l.mu is held.
func (st *keyState) spread() time.Duration {
	d := 100 * time.Millisecond
	if st.rate > 0 && st.line > 0 {
		d = max(d, time.Duration(0.75*serveTime(float64(st.line), st.rate, st.climb, st.ceiling)*float64(time.Second)))
	}
	return jitterUpTo(d)
}

// serveTime is how many seconds n requests take at rate, climbing by
// climb a second up to ceiling (climb 0: at rate throughout). A key at
// 1/s after 429s, with no rate of its own, serves 1,500 in 54 s, not in
// 1,500 s.
func serveTime(n, rate, climb, ceiling float64) float64 {
	if climb <= 0 || rate >= ceiling {
		return n / rate
	}
	// Until the ceiling: n = rate t + climb t²/2.
	reach := (ceiling - rate) / climb
	served := rate*reach + climb*reach*reach/2
	if math.IsInf(ceiling, 1) || n <= served {
		return (math.Sqrt(rate*rate+2*climb*n) - rate) / climb
	}
	return reach + (n-served)/ceiling
}

// behind is how long the waiters ahead of a new one take at this
// process's share of the key; l.mu is held.
func (st *keyState) behind(now time.Time) time.Duration {
	share := st.share(now)
	if share <= 0 {
		return 0
	}
	return time.Duration(float64(st.waiting) / share * float64(time.Second))
}

// sleepUntil releases l.mu until t, ch closing or ctx ending, then takes
// it again.
func (l *limiter) sleepUntil(ctx context.Context, t time.Time, ch chan struct{}) error {
	l.mu.Unlock()
	defer l.mu.Lock()
	return waitUntil(ctx, t, ch)
}

// waitUntil waits until t, ch closing (nil: never) or ctx ending.
func waitUntil(ctx context.Context, t time.Time, ch chan struct{}) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ch:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// throttled records a 429 for key for every replica and returns the end
// of the pause it put on the key.
func (l *limiter) throttled(ctx context.Context, key string, after time.Duration, sent time.Time) (time.Time, bool, error) {
	l.mu.Lock()
	st := l.state(key)
	// What the provider was seen to accept in a second: the last whole
	// one, or this one so far (a drain's first 429s come within its first
	// second, when the last one saw nothing).
	observed := float64(max(st.accepted.last(time.Now()), st.accepted.cur))
	again := st.okSince == 0
	st.okSince = 0
	now := time.Now()
	wasPaused := now.Before(st.pausedUntil)
	// Until the pause is written for every replica, this process sends the
	// key nothing more: its other workers' requests would meet the same
	// refusal (a host's whole cap of them, while the write takes; 88 429s
	// in the first second of a drain to a receiver nobody knew the rate
	// of). A late answer to a request sent before this process's last 429
	// pauses nothing.
	before, provisional := st.pausedUntil, time.Time{}
	if sent.IsZero() || !sent.Before(st.pausedAt) {
		provisional = now.Add(cmp.Or(max(after, 0), l.pauseBase))
		st.pausedUntil = latest(st.pausedUntil, provisional)
	}
	st.writing++
	var at *time.Time
	if l.clock != nil {
		at = l.clock()
	}
	l.mu.Unlock()
	pool, lst := l.place(key)
	_, left, err := Throttle(ctx, lst, pool, key, A429{After: after, Base: l.pauseBase, Observed: observed, Again: again, Sent: sent, At: at})
	l.mu.Lock()
	defer l.mu.Unlock()
	st.writing--
	if err != nil && l.shared != nil && !strings.HasPrefix(key, ReplayLimitPrefix) && !provisional.IsZero() && ctx.Err() == nil {
		// The shared place cannot be reached (fallback): the pause holds
		// in this process, and its schedule starts after it.
		st.pausedAt = time.Now()
		st.slots = 0
		st.fallbackNext = latest(st.fallbackNext, st.pausedUntil)
		return st.pausedUntil, !wasPaused, nil
	}
	if !provisional.IsZero() && st.pausedUntil.Equal(provisional) {
		st.pausedUntil = before // the shared pause decides, below
	}
	if err != nil {
		return time.Time{}, false, err
	}
	until := time.Now().Add(left)
	st.limited = true
	st.slots = 0
	st.pausedUntil = latest(st.pausedUntil, until)
	st.pausedAt = time.Now()
	return st.pausedUntil, !wasPaused, nil
}

// held pauses key until after from now for every replica because a
// destination is held back on outboxd's side (a disabled endpoint): as
// throttled does, but nothing answered 429, so the key's 429s are not
// counted and its rate stays as it was. It returns when the key's pause
// ends and whether this began it.
func (l *limiter) held(ctx context.Context, key string, after time.Duration, _ time.Time) (time.Time, bool, error) {
	l.mu.Lock()
	st := l.state(key)
	wasPaused := time.Now().Before(st.pausedUntil)
	l.mu.Unlock()
	pool, lst := l.place(key)
	left, err := lst.Hold(ctx, pool, key, after)
	if err != nil {
		return time.Time{}, false, err
	}
	until := time.Now().Add(left)
	l.mu.Lock()
	defer l.mu.Unlock()
	st.pausedUntil = latest(st.pausedUntil, until)
	st.pausedAt = time.Now()
	return st.pausedUntil, !wasPaused, nil
}

// pauseEnded reads key's row before a request is sent away for the whole
// of its pause, at most once a refresh: an operator who ended the pause
// (a limit resumed, an endpoint enabled) woke the effects waiting for it,
// and they must not find the pause this process still remembers. Called
// with l.mu held, which it releases while it reads.
func (l *limiter) pauseEnded(ctx context.Context, key string, st *keyState) bool {
	st.pauseChecked = true
	readAt := time.Now()
	l.mu.Unlock()
	pool, lst := l.place(key)
	r, err := lst.LimitOf(ctx, pool, key)
	l.mu.Lock()
	if err != nil || r == nil || (limitRow{r}).Paused() || !st.pausedAt.Before(readAt) || st.writing > 0 {
		return false
	}
	st.pausedUntil = time.Time{}
	return true
}

// refresh reads every key's row: pauses and rates other replicas and
// operators set reach this process within LimitRefresh.
func (l *limiter) refresh(ctx context.Context) error {
	if err := l.writePending(ctx); err != nil {
		return err
	}
	readAt := time.Now()
	rows, err := LimitRows(ctx, l.shared, l.pool, l.store)
	if err != nil {
		return err
	}
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := make(map[string]bool, len(rows))
	for _, row := range rows {
		r := limitRow{row}
		seen[r.Key] = true
		st := l.state(r.Key)
		st.pauseChecked = false
		st.inAnySecond = r.InAnySecond
		if st.fallingBack {
			st.fallingBack = false
			l.logger.Info("the shared limits can be reached again", "limit", r.Key)
		}
		if st.grantedAt > 0 && r.Granted > st.grantedAt {
			st.fleetShare = min(1, float64(st.mine-st.minedAt)/float64(r.Granted-st.grantedAt))
		}
		if st.grantedAt == 0 || r.Granted > st.grantedAt {
			st.grantedAt, st.minedAt = r.Granted, st.mine
		}
		eff := r.Effective()
		st.limited = eff > 0 || r.Paused()
		if eff > 0 {
			st.rate = eff
			st.climb, st.ceiling = r.Climb()
		}
		switch {
		case r.Paused():
			st.pausedUntil = latest(st.pausedUntil, now.Add(r.PausedUntil.Sub(r.Now)))
		case st.pausedAt.Before(readAt):
			// Not paused (an operator may have ended the pause), and no
			// 429 here since the row was read.
			st.pausedUntil = time.Time{}
		}
		if !st.limited {
			st.slots = 0
		}
	}
	var lined []string
	for key, st := range l.keys {
		if st.lined && st.scarce {
			lined = append(lined, key)
		} else {
			st.line = 0
		}
	}
	if len(lined) > 0 {
		// A destination's jobs turned away come back spread over the
		// time their whole line takes (spread): one read a second while
		// a destination's limit binds here.
		l.mu.Unlock()
		lines, err := l.store.WaitingFor(ctx, l.pool, lined)
		l.mu.Lock()
		if err != nil {
			return err
		}
		for _, key := range lined {
			if st := l.keys[key]; st != nil {
				st.line = lines[key]
			}
		}
	}
	for key, st := range l.keys {
		if seen[key] || st.configured != nil {
			continue
		}
		st.limited = false
		if st.waiting == 0 && now.Sub(st.lastUse) > 10*time.Minute {
			delete(l.keys, key)
		}
	}
	return nil
}

// start writes the rates set at start and refreshes until stop.
func (l *limiter) start(ctx context.Context) {
	if err := l.refresh(ctx); err != nil {
		l.logger.Warn("could not write or read the rate limits yet; trying again every second", "error", err)
	}
	stop, done := make(chan struct{}), make(chan struct{})
	l.stop, l.done = stop, done
	go func() {
		defer close(done)
		t := time.NewTicker(LimitRefresh)
		defer t.Stop()
		forget := time.NewTicker(time.Hour)
		defer forget.Stop()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			select {
			case <-stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if err := l.refresh(ctx); err != nil && ctx.Err() == nil {
					l.logger.Debug("could not read the rate limits", "error", err)
				}
			case <-forget.C:
				_ = l.store.ForgetLimits(ctx, l.pool)
				if l.shared != nil {
					_ = l.shared.Store.ForgetLimits(ctx, l.shared.Pool)
				}
			}
		}
	}()
}

func (l *limiter) stopLimiter() {
	if l.stop != nil {
		close(l.stop)
		<-l.done
		l.stop = nil
	}
}

// KeyState is what one process knows of one limit key now.
type KeyState = outboxtype.LimitState

// states is a snapshot of every key this process knows of, by key.
func (l *limiter) states() []KeyState {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]KeyState, 0, len(l.keys))
	for key, st := range l.keys {
		if !st.limited && st.waiting == 0 {
			continue
		}
		out = append(out, KeyState{Key: key, Configured: st.configured, Rate: st.rate, PausedUntil: st.pausedUntil, Waiting: st.waiting,
			Share: st.fleetShare, FallingBack: st.fallingBack})
	}
	slices.SortFunc(out, func(a, b KeyState) int { return strings.Compare(a.Key, b.Key) })
	return out
}
