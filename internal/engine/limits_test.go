package engine_test

import (
	"context"
	"errors"
	"math"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/engine"
	"github.com/outboxd/outboxd/internal/fakes"
	"github.com/outboxd/outboxd/internal/store"
	"github.com/outboxd/outboxd/internal/testdb"
	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/sideeffects"
)

// clockAt is the bucket's clock a test moves: t0 plus d.
func clockAt(t0 time.Time) func(d time.Duration) *time.Time {
	return func(d time.Duration) *time.Time { x := t0.Add(d); return &x }
}

// TestLimitBucketHoldsAcrossReplicas: three replicas lease request times
// of one key as fast as they can, on a clock the test moves by 10ms steps
// over 10s; however the leases interleave, no two times given out are
// closer than 1/rate, so together they get the key's rate within its
// burst (a twentieth of a second of it) over any window, and never lease
// 400 ms ahead or more.
func TestLimitBucketHoldsAcrossReplicas(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	st := store.NewStore(db.Schema)
	ctx := context.Background()
	const key, rate = "webhook:partner.example", 50.0
	require.NoError(t, st.ConfigureLimit(ctx, db.Pool, key, rate, false, "config"))

	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var times []time.Time
	var mu sync.Mutex
	leased := 0
	lease := func(at time.Time, want int) engine.Lease {
		l, err := engine.LeaseTokens(ctx, st, db.Pool, key, want, &at)
		require.NoError(t, err)
		require.True(t, l.Limited)
		mu.Lock()
		defer mu.Unlock()
		leased += l.Granted
		for i := range l.Granted {
			ti := at.Add(l.Start + time.Duration(i)*l.Every)
			require.True(t, ti.Before(at.Add(400*time.Millisecond)), "leased less than 400 ms ahead")
			times = append(times, ti)
		}
		return l
	}
	// The first lease finds an idle key: its burst is due at once, the
	// rest of the block follows at the rate.
	first := lease(t0, 12)
	require.Equal(t, 12, first.Granted)
	require.Equal(t, -50*time.Millisecond, first.Start, "a twentieth of a second back: three times due at once")
	require.Equal(t, 20*time.Millisecond, first.Every)
	for step := 1; step <= 1000; step++ {
		at := t0.Add(time.Duration(step) * 10 * time.Millisecond)
		var wg sync.WaitGroup
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				lease(at, 12)
			}()
		}
		wg.Wait()
	}
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	for i := 1; i < len(times); i++ {
		require.GreaterOrEqual(t, times[i].Sub(times[i-1]), 20*time.Millisecond, "no two requests closer than 1/rate")
	}
	end := t0.Add(10 * time.Second)
	inTen := 0
	for _, ti := range times {
		if ti.Before(end) {
			inTen++
		}
	}
	require.LessOrEqual(t, inTen, int(rate*10)+3, "never more than the rate over 10s, plus the burst")
	require.GreaterOrEqual(t, inTen, int(rate*10*0.95), "and no less than 95% of it")
	row, err := st.LimitOf(ctx, db.Pool, key)
	require.NoError(t, err)
	require.EqualValues(t, leased, row.Granted, "every lease is counted")
}

// TestA429PausesTheKeyAndLowersItsRate: a 429 pauses the key (for the
// provider's delay, or one that doubles with each episode in a row),
// lowers its rate once per episode, and the rate climbs back.
func TestA429PausesTheKeyAndLowersItsRate(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	st := store.NewStore(db.Schema)
	ctx := context.Background()
	const key = "stripe:live-a1b2"
	require.NoError(t, st.ConfigureLimit(ctx, db.Pool, key, 100, false, "default"))
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	at := clockAt(t0)

	until, left, err := engine.Throttle(ctx, st, db.Pool, key, engine.A429{Base: time.Second, Again: true, At: at(0)})
	require.NoError(t, err)
	require.WithinDuration(t, t0.Add(time.Second), until, 0, "no Retry-After: the base pause")
	require.Equal(t, time.Second, left)

	l, err := engine.LeaseTokens(ctx, st, db.Pool, key, 5, at(500*time.Millisecond))
	require.NoError(t, err)
	require.Zero(t, l.Granted, "paused: no token for any replica")
	require.Equal(t, 500*time.Millisecond, l.PausedFor)

	// 429s answering requests sent before the pause: the same episode.
	_, _, err = engine.Throttle(ctx, st, db.Pool, key, engine.A429{Base: time.Second, Again: true, At: at(600 * time.Millisecond)})
	require.NoError(t, err)
	row, err := st.LimitOf(ctx, db.Pool, key)
	require.NoError(t, err)
	require.InDelta(t, 75, *row.CurrentRate, 0.001, "lowered by a quarter once per episode")
	require.Equal(t, 1, row.ThrottledInRow)
	require.EqualValues(t, 2, row.Throttles)

	l, err = engine.LeaseTokens(ctx, st, db.Pool, key, 100, at(2*time.Second))
	require.NoError(t, err)
	require.InDelta(t, 85, l.Rate, 0.001, "climbing back by a tenth of its rate each second after the pause")
	require.Zero(t, l.Granted, "39 times are free within 400 ms: fewer than half of 100")
	l, err = engine.LeaseTokens(ctx, st, db.Pool, key, 30, at(2*time.Second))
	require.NoError(t, err)
	require.Equal(t, 30, l.Granted, "from a twentieth of a second back, at 85/s")
	require.Equal(t, -50*time.Millisecond, l.Start.Round(time.Millisecond))

	// A new episode soon after, nothing accepted since the last: the
	// pause doubles, and the rate stays where it had climbed to (a
	// provider refusing everything says nothing of its rate).
	until, _, err = engine.Throttle(ctx, st, db.Pool, key, engine.A429{Base: time.Second, Again: true, At: at(2100 * time.Millisecond)})
	require.NoError(t, err)
	require.WithinDuration(t, t0.Add(4100*time.Millisecond), until, 0)
	row, err = st.LimitOf(ctx, db.Pool, key)
	require.NoError(t, err)
	require.Equal(t, 2, row.ThrottledInRow)
	require.InDelta(t, 86, *row.CurrentRate, 0.01)

	// Requests accepted since: a new episode lowers it again, never below
	// what the provider was just seen to accept.
	_, _, err = engine.Throttle(ctx, st, db.Pool, key, engine.A429{Base: time.Second, Observed: 90, At: at(8 * time.Second)})
	require.NoError(t, err)
	row, err = st.LimitOf(ctx, db.Pool, key)
	require.NoError(t, err)
	require.InDelta(t, 90, *row.CurrentRate, 0.01)

	// A provider that names its delay gets it.
	until, _, err = engine.Throttle(ctx, st, db.Pool, key, engine.A429{After: 30 * time.Second, Base: time.Second, Again: true, At: at(20 * time.Second)})
	require.NoError(t, err)
	require.WithinDuration(t, t0.Add(50*time.Second), until, 0)

	// Requests were accepted since the last 429: a new episode's pause
	// starts over at the base.
	until, _, err = engine.Throttle(ctx, st, db.Pool, key, engine.A429{Base: time.Second, Again: false, At: at(60 * time.Second)})
	require.NoError(t, err)
	require.WithinDuration(t, t0.Add(61*time.Second), until, 0)

	// Recovered: back at the configured rate.
	l, err = engine.LeaseTokens(ctx, st, db.Pool, key, 1, at(10*time.Minute))
	require.NoError(t, err)
	require.InDelta(t, 100, l.Rate, 0.001)
}

// useFully leases key's times as a fleet whose line never empties would,
// from d on the test's clock until until: each lease follows on from the
// one before. It returns the clock's time and the key's rate at the end.
func useFully(t *testing.T, st *store.Store, db store.TxDB, key string, at func(time.Duration) *time.Time, d, until time.Duration) (time.Duration, float64) {
	t.Helper()
	want, rate := 1, 0.0
	for d < until {
		l, err := engine.LeaseTokens(context.Background(), st, db, key, want, at(d))
		require.NoError(t, err)
		require.True(t, l.Limited)
		rate = l.Rate
		switch {
		case l.PausedFor > 0:
			d += l.PausedFor
		case l.Granted == 0:
			d += l.NextIn
		default:
			d += l.Start + time.Duration(l.Granted)*l.Every
		}
		want = max(1, int(l.Rate/5))
	}
	return d, rate
}

// TestAKeyWithoutARateClimbsWhileItsRequestsUseIt: an early 429 (three
// replicas starting on a backlog, before any had seen a request accepted)
// lowers a key with no rate of its own to 1/s, a guess. While its requests
// fill its schedule it climbs, doubling each second until its next 429
// (slow start), then by a tenth of its rate a second; through a quiet
// spell it keeps what it climbed to, and does not climb. Bounded by twice
// what it had taken since the 429, it fell back to ~5/s after a quiet
// minute, its waiting jobs were snoozed for minutes, and a 50/s
// receiver's 750 deliveries took 285 s.
func TestAKeyWithoutARateClimbsWhileItsRequestsUseIt(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	st := store.NewStore(db.Schema)
	ctx := context.Background()
	const key = "webhook:adaptive.example"
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	at := clockAt(t0)
	_, _, err := engine.Throttle(ctx, st, db.Pool, key, engine.A429{After: time.Second, Base: time.Second, Again: true, At: at(0)})
	require.NoError(t, err)
	row, err := st.LimitOf(ctx, db.Pool, key)
	require.NoError(t, err)
	require.Equal(t, 1.0, *row.CurrentRate, "nothing seen accepted: 1/s, a guess")
	require.True(t, row.SlowStart)

	d, rate := useFully(t, st, db.Pool, key, at, time.Second, 6*time.Second)
	require.Greater(t, rate, 16.0, "5 s of full use from 1/s: doubling each second")

	// The next 429: halved, and from then on a tenth of its rate a second.
	_, _, err = engine.Throttle(ctx, st, db.Pool, key, engine.A429{After: time.Second, Base: time.Second, Again: true, At: at(d)})
	require.NoError(t, err)
	row, err = st.LimitOf(ctx, db.Pool, key)
	require.NoError(t, err)
	require.False(t, row.SlowStart)
	halved := *row.CurrentRate
	require.InDelta(t, rate/2, halved, rate/4)
	d, rate = useFully(t, st, db.Pool, key, at, d+time.Second, d+11*time.Second)
	require.InDelta(t, halved*math.E, rate, halved*0.6, "10 s of full use at a tenth of its rate a second")

	// A quiet minute: nothing tests a higher rate, and nothing lowers it.
	l, err := engine.LeaseTokens(ctx, st, db.Pool, key, 1, at(d+time.Minute))
	require.NoError(t, err)
	// (rate is the last lease's, before that lease's own climb.)
	require.GreaterOrEqual(t, l.Rate, rate, "what it climbed to, after a quiet minute")
	require.Less(t, l.Rate, rate*1.1, "and no higher")
	step, ceiling := engine.Climb(&store.LimitRow{CurrentRate: &l.Rate, LastThrottleAt: at(d), RefilledAt: *at(d + time.Minute), Now: *at(d + time.Minute)})
	require.InDelta(t, l.Rate/10, step, 0.01)
	require.True(t, math.IsInf(ceiling, 1), "no ceiling: it climbs only while used")
}

// TestAKeyWithoutARateDoesNotClimbUnused: a key with no rate of its own,
// lowered to 5/s by a 429, does not climb through a quiet spell, nor
// while requests come one at a time, far apart: nothing tests a higher
// rate. Climbing by the clock, bursts 90 s apart to a 5/s receiver once
// took such a key past 2,000,000/s, so that every burst started
// unlimited.
func TestAKeyWithoutARateDoesNotClimbUnused(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	st := store.NewStore(db.Schema)
	ctx := context.Background()
	const key = "webhook:sparse.example"
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	at := clockAt(t0)
	_, _, err := engine.Throttle(ctx, st, db.Pool, key, engine.A429{After: time.Second, Base: time.Second, Observed: 5, Again: true, At: at(0)})
	require.NoError(t, err)
	for i := range 20 {
		l, err := engine.LeaseTokens(ctx, st, db.Pool, key, 1, at(90*time.Second+time.Duration(i)*2*time.Second))
		require.NoError(t, err)
		require.Equal(t, 1, l.Granted)
		require.InDelta(t, 5, l.Rate, 0.001, "request %d, 2 s after the one before", i)
	}
}

// TestAKeyWithoutARateIsForgottenOnlyWhenItsRequestsStop: five minutes
// after its last 429 a key with no rate of its own is unlimited again, but
// not while its requests still fill its schedule: forgotten then, a fleet
// sent its whole line at once (a 10 s window at 362% of a 50/s receiver's
// rate, five minutes into a drain).
func TestAKeyWithoutARateIsForgottenOnlyWhenItsRequestsStop(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	st := store.NewStore(db.Schema)
	ctx := context.Background()
	const key = "webhook:busy.example"
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	at := clockAt(t0)
	_, _, err := engine.Throttle(ctx, st, db.Pool, key, engine.A429{After: time.Second, Base: time.Second, Again: true, At: at(0)})
	require.NoError(t, err)
	// Quiet, then its schedule full from before the five minutes to after.
	d, _ := useFully(t, st, db.Pool, key, at, 5*time.Minute-10*time.Second, 5*time.Minute+10*time.Second)
	l, err := engine.LeaseTokens(ctx, st, db.Pool, key, 1, at(d))
	require.NoError(t, err)
	require.True(t, l.Limited, "five minutes after its 429, its requests still fill its schedule")

	l, err = engine.LeaseTokens(ctx, st, db.Pool, key, 100, at(d+2*time.Second))
	require.NoError(t, err)
	require.False(t, l.Limited, "two seconds with no request: forgotten")
	require.Equal(t, 100, l.Granted)
}

// TestLate429sOfRequestsSentBeforeThePauseStartNoEpisode: a provider that
// starts refusing answers every request in flight with a 429, some after
// the pause the first one began has ended. Those belong to that episode:
// the pause does not double and the rate is not lowered again. Counted as
// new episodes, 8 such 429s stopped a fleet for ~20 s.
func TestLate429sOfRequestsSentBeforeThePauseStartNoEpisode(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	st := store.NewStore(db.Schema)
	ctx := context.Background()
	const key = "stripe:live-late"
	require.NoError(t, st.ConfigureLimit(ctx, db.Pool, key, 100, false, "default"))
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	at := clockAt(t0)
	inFlight := t0.Add(-200 * time.Millisecond)

	until, _, err := engine.Throttle(ctx, st, db.Pool, key, engine.A429{Base: time.Second, Again: true, Sent: inFlight, At: at(0)})
	require.NoError(t, err)
	require.WithinDuration(t, t0.Add(time.Second), until, 0)

	// Eight more answers to requests sent with the first, arriving after
	// its pause ended.
	for i := range 8 {
		_, left, err := engine.Throttle(ctx, st, db.Pool, key, engine.A429{Base: time.Second, Again: true, Sent: inFlight,
			At: at(1100*time.Millisecond + time.Duration(i)*100*time.Millisecond)})
		require.NoError(t, err)
		require.Zero(t, left, "answer %d paused nothing more", i)
	}
	row, err := st.LimitOf(ctx, db.Pool, key)
	require.NoError(t, err)
	require.Equal(t, 1, row.ThrottledInRow, "one episode")
	require.InDelta(t, 75, *row.CurrentRate, 0.001, "lowered once")
	require.EqualValues(t, 9, row.Throttles, "every 429 is counted")
	l, err := engine.LeaseTokens(ctx, st, db.Pool, key, 1, at(1900*time.Millisecond))
	require.NoError(t, err)
	require.InDelta(t, 84, l.Rate, 0.001, "climbing since the end of the one pause")

	// A request sent after the pause and refused: a new episode, which
	// doubles the pause.
	until, _, err = engine.Throttle(ctx, st, db.Pool, key, engine.A429{Base: time.Second, Again: true,
		Sent: t0.Add(1950 * time.Millisecond), At: at(2 * time.Second)})
	require.NoError(t, err)
	require.WithinDuration(t, t0.Add(4*time.Second), until, 0)
}

// TestAKeyWithoutARateIsFreeUntilA429: a destination nobody set a rate for
// costs no row until it answers 429; then it is limited at what it was
// seen to accept, and free again once its 429s are old.
func TestAKeyWithoutARateIsFreeUntilA429(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	st := store.NewStore(db.Schema)
	ctx := context.Background()
	const key = "webhook:free.example"
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	at := clockAt(t0)

	l, err := engine.LeaseTokens(ctx, st, db.Pool, key, 7, at(0))
	require.NoError(t, err)
	require.False(t, l.Limited)
	require.Equal(t, 7, l.Granted)

	_, _, err = engine.Throttle(ctx, st, db.Pool, key, engine.A429{After: time.Second, Base: time.Second, Observed: 80, Again: true, At: at(0)})
	require.NoError(t, err)
	l, err = engine.LeaseTokens(ctx, st, db.Pool, key, 100, at(1500*time.Millisecond))
	require.NoError(t, err)
	require.True(t, l.Limited)
	require.InDelta(t, 80, l.Rate, 0.001, "the 80/s it was seen to accept; it climbs only as its requests use it")

	l, err = engine.LeaseTokens(ctx, st, db.Pool, key, 100, at(10*time.Minute))
	require.NoError(t, err)
	require.False(t, l.Limited, "its 429s forgotten, the key is free again")
	require.Equal(t, 100, l.Granted)
}

// TestA429SlowsTheKeyNotTheEffect: a receiver that answers 429 three
// times delays an effect but spends none of its attempts (max 2 here):
// it is confirmed at its first counted attempt, every 429 is in its
// history as throttled, and no request reaches the receiver while its key
// is paused.
func TestA429SlowsTheKeyNotTheEffect(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{maxAttempts: 2})
	b.recv.Respond("/limited",
		fakes.Status(http.StatusTooManyRequests, "Retry-After", "1"),
		fakes.Status(http.StatusTooManyRequests, "Retry-After", "1"),
		fakes.Status(http.StatusTooManyRequests, "Retry-After", "1"))
	b.start(t)
	e := b.enqueue(t, "/limited")
	got := b.waitFor(t, e.ID, outboxtype.StateConfirmed)
	require.Equal(t, 1, got.Attempts, "429s are not attempts")
	require.Equal(t, 4, got.TotalAttempts, "but they are requests")
	require.Nil(t, got.WaitingFor, "no longer waiting")

	ds := b.recv.Deliveries()
	require.Len(t, ds, 4)
	for i := 1; i < len(ds); i++ {
		require.GreaterOrEqual(t, ds[i].At.Sub(ds[i-1].At), 990*time.Millisecond, "nothing is sent while the key is paused")
		require.Equal(t, e.Key, ds[i].ID)
	}
	attempts, err := b.store.Attempts(context.Background(), b.db.Pool, e.ID)
	require.NoError(t, err)
	require.Len(t, attempts, 3)
	u, err := url.Parse(b.recv.URL)
	require.NoError(t, err)
	for _, a := range attempts {
		require.Equal(t, engine.OutcomeThrottled, a.Outcome)
		require.Equal(t, u.Host, a.Host)
		require.Contains(t, a.Error, "limit webhook:"+u.Host+": ", "the history names the limit key")
	}
	row, err := b.store.LimitOf(context.Background(), b.db.Pool, "webhook:"+u.Host)
	require.NoError(t, err)
	require.EqualValues(t, 3, row.Throttles)
}

// TestA503SlowsTheDestination: a receiver that answers 503 says it is
// overloaded. The attempt counts and is in doubt, as any 5xx, and the
// receiver's limit key pauses for its Retry-After for every replica, as
// after a 429, so that nothing else goes to it meanwhile; before, a 503
// flood slowed nothing, and a replay's retries kept hitting the partner.
func TestA503SlowsTheDestination(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupWorker(t, workerOpts{})
	b.recv.Respond("/busy", fakes.Status(http.StatusServiceUnavailable, "Retry-After", "2"))
	u, err := url.Parse(b.recv.URL)
	require.NoError(t, err)
	key := "webhook:" + u.Host
	b.start(t)
	busy := b.enqueue(t, "/busy")
	var row *store.LimitRow
	require.Eventually(t, func() bool {
		row, err = b.store.LimitOf(ctx, b.db.Pool, key)
		return err == nil && row != nil && row.PausedUntil != nil
	}, 10*time.Second, 10*time.Millisecond, "the 503 pauses the receiver's limit key")
	require.EqualValues(t, 1, row.Throttles)
	require.NotNil(t, row.CurrentRate, "and lowers its rate")

	other := b.enqueue(t, "/other")
	b.waitFor(t, other.ID, outboxtype.StateConfirmed)
	got := b.waitFor(t, busy.ID, outboxtype.StateConfirmed)
	require.Equal(t, 2, got.Attempts, "the 503 was an attempt")
	ds := b.recv.Deliveries()
	require.Len(t, ds, 3)
	require.Equal(t, http.StatusServiceUnavailable, ds[0].Status)
	for _, d := range ds[1:] {
		require.GreaterOrEqual(t, d.At.Sub(ds[0].At), 1900*time.Millisecond, "nothing goes to the receiver while its key is paused: %s", d.Path)
	}
	attempts, err := b.store.Attempts(ctx, b.db.Pool, busy.ID)
	require.NoError(t, err)
	require.Equal(t, "in_doubt", attempts[0].Outcome, "a 5xx is in doubt")
}

// TestAnEffectWaitingForItsLimitSaysSo: while its key is paused, an effect
// is pending, waiting for the key, with its attempts untouched.
func TestAnEffectWaitingForItsLimitSaysSo(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	b.recv.Respond("/slow", fakes.Status(http.StatusTooManyRequests, "Retry-After", "30"))
	d := b.start(t)
	e := b.enqueue(t, "/slow")
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := b.effect(t, e.ID)
		if got.WaitingFor != nil && got.State == outboxtype.StatePending {
			u, _ := url.Parse(b.recv.URL)
			require.Equal(t, "webhook:"+u.Host, *got.WaitingFor)
			require.NotNil(t, got.WaitingSince)
			require.Zero(t, got.Attempts)
			require.NotNil(t, got.NextAttemptAt)
			require.WithinDuration(t, time.Now().Add(30*time.Second), *got.NextAttemptAt, 5*time.Second)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("effect %s never waited for its limit: %+v", e.ID, got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var paused bool
	for _, st := range d.Limits() {
		paused = paused || time.Until(st.PausedUntil) > 20*time.Second
	}
	require.True(t, paused, "the dispatcher reports the paused key: %+v", d.Limits())
}

// TestLimitsAreCheckedAtStart: a limit names a configured provider and a
// positive rate.
func TestLimitsAreCheckedAtStart(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	for _, tc := range []struct {
		limits map[string]float64
		want   string
	}{
		{map[string]float64{"stripe": 10}, `no provider "stripe" is configured`},
		{map[string]float64{"webhook:a.example": 0}, "must be a positive number"},
		{map[string]float64{"webhook:a.example": -3}, "must be a positive number"},
		{map[string]float64{"webhook:a.example": math.Inf(1)}, "must be a positive number"},
		{map[string]float64{"webhook:a.example": 1e-12}, "below the floor of 0.001"},
		{map[string]float64{"tenant:acme": 1e-12}, "below the floor of 0.001"},
		{map[string]float64{"webhook": 5}, "has no account limit"},
	} {
		cfg := b.cfg
		cfg.Limits = tc.limits
		_, err := newDispatcher(b.db.Pool, cfg)
		require.ErrorContains(t, err, tc.want)
	}
	// A rate held in any second is a whole number, and needs a rate.
	for key, want := range map[string]string{"webhook:a.example": "a whole number", "webhook:b.example": "has no rate in Limits"} {
		cfg := b.cfg
		cfg.Limits = map[string]float64{"webhook:a.example": 4.5}
		cfg.LimitsInAnySecond = []string{key}
		_, err := newDispatcher(b.db.Pool, cfg)
		require.ErrorContains(t, err, want)
	}

	// At run time too: a rate that would overflow the time between two
	// requests, and so switch the limit off, is refused with nothing set.
	op, err := sideeffects.NewOperator(b.db.Pool, sideeffects.OperatorConfig{Schema: b.db.Schema})
	require.NoError(t, err)
	tiny := 1e-11
	_, err = op.SetLimit(context.Background(), "webhook:a.example", &tiny, false, "oncall", "test", false)
	require.ErrorContains(t, err, "below the floor of 0.001")
	limits, err := op.Limits(context.Background())
	require.NoError(t, err)
	require.Empty(t, limits, "nothing was set")
}

// TestTheBucketsClockNeverRunsBackwards: a lease whose transaction began
// before another's (it waited for the row lock) gets no time given out
// already.
func TestTheBucketsClockNeverRunsBackwards(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	st := store.NewStore(db.Schema)
	ctx := context.Background()
	const key = "webhook:late.example"
	require.NoError(t, st.ConfigureLimit(ctx, db.Pool, key, 100, false, "config"))
	t0 := time.Date(2030, 1, 1, 0, 0, 10, 0, time.UTC)
	at := clockAt(t0)
	l, err := engine.LeaseTokens(ctx, st, db.Pool, key, 10, at(0))
	require.NoError(t, err)
	require.Equal(t, 10, l.Granted)
	require.Equal(t, -50*time.Millisecond, l.Start, "an idle key: its burst, due at once")
	l, err = engine.LeaseTokens(ctx, st, db.Pool, key, 10, at(-100*time.Millisecond))
	require.NoError(t, err)
	require.Equal(t, 150*time.Millisecond, l.Start, "a lease that began earlier gets the times after the first's")
	l, err = engine.LeaseTokens(ctx, st, db.Pool, key, 100, at(50*time.Millisecond))
	require.NoError(t, err)
	require.Zero(t, l.Granted, "30 times are free within 400 ms, fewer than half of 100")
	require.Equal(t, 200*time.Millisecond, l.NextIn, "50 are in 200 ms")
	l, err = engine.LeaseTokens(ctx, st, db.Pool, key, 60, at(50*time.Millisecond))
	require.NoError(t, err)
	require.Equal(t, 100*time.Millisecond, l.Start, "after both blocks")
	require.Equal(t, 30, l.Granted, "up to 400 ms ahead")
	l, err = engine.LeaseTokens(ctx, st, db.Pool, key, 10, at(50*time.Millisecond))
	require.NoError(t, err)
	require.Zero(t, l.Granted, "nothing left within 400 ms")
	require.Equal(t, 50*time.Millisecond, l.NextIn, "until half of 10 are free")
}

// TestTheLineOfAKeyIsCountedOverEveryReplica: the effects waiting for a
// key, whichever replica turned them away, are counted from the database
// (a destination's jobs turned away come back spread over that line).
func TestTheLineOfAKeyIsCountedOverEveryReplica(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	ctx := context.Background()
	const key, other = "webhook:line.example", "webhook:other.example"
	for i := range 12 {
		e := b.enqueue(t, "/line")
		k := key
		if i%4 == 0 {
			k = other
		}
		require.NoError(t, b.store.MarkWaiting(ctx, b.db.Pool, e.ID, k))
	}
	b.enqueue(t, "/not-waiting")
	lines, err := b.store.WaitingFor(ctx, b.db.Pool, []string{key, other, "webhook:none.example"})
	require.NoError(t, err)
	require.Equal(t, map[string]int{key: 9, other: 3}, lines)
}

// TestAProviderCannotPauseAKeyForYears: a 429 asking for 999,999,999
// seconds, then one dated in year 9999, each pause the receiver's limit
// key for --max-provider-delay (here 1s), not for decades: the effect is
// delivered after two bounded waits, and the key's pause never reached
// past the bound.
func TestAProviderCannotPauseAKeyForYears(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	b.cfg.MaxProviderDelay = time.Second
	b.recv.Respond("/years",
		fakes.Status(http.StatusTooManyRequests, "Retry-After", "999999999"),
		fakes.Status(http.StatusTooManyRequests, "Retry-After", "Fri, 31 Dec 9999 23:59:59 GMT"))
	b.start(t)
	e := b.enqueue(t, "/years")
	u, err := url.Parse(b.recv.URL)
	require.NoError(t, err)
	key := "webhook:" + u.Host
	deadline := time.Now().Add(20 * time.Second)
	for {
		row, err := b.store.LimitOf(context.Background(), b.db.Pool, key)
		if !errors.Is(err, store.ErrNotFound) { // no row before the first 429
			require.NoError(t, err)
		}
		if row != nil && row.PausedUntil != nil {
			require.True(t, row.PausedUntil.Before(row.Now.Add(2*time.Second)),
				"the key is paused until %s, more than the bound after %s", row.PausedUntil, row.Now)
		}
		got := b.effect(t, e.ID)
		if got.State == outboxtype.StateConfirmed {
			require.Equal(t, 3, got.TotalAttempts, "two bounded waits, then the request that went through")
			break
		}
		require.True(t, time.Now().Before(deadline), "not delivered in 20s: %+v", got)
		time.Sleep(50 * time.Millisecond)
	}
	ds := b.recv.Deliveries()
	require.Len(t, ds, 3)
	require.GreaterOrEqual(t, ds[1].At.Sub(ds[0].At), 990*time.Millisecond, "the bounded wait is still obeyed")
}

// TestALimitHeldInAnySecondNeverPutsMoreInOneSecond: a partner allows at
// most 4 requests in any second. Held as an average, a key that was idle
// starts with a burst and its fifth request falls within a second of its
// first; held in any second, however three replicas lease its times and
// however long it sat idle between spells, any five times it gives out
// span more than a second by at least the lateness a request may have
// when it leaves (so at most 4 leave in any second).
func TestALimitHeldInAnySecondNeverPutsMoreInOneSecond(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	st := store.NewStore(db.Schema)
	ctx := context.Background()
	const n = 4
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	latest := func(a, b time.Time) time.Time {
		if a.After(b) {
			return a
		}
		return b
	}
	// times leases the key's request times, as they are spent, over 20 s
	// of spells of one
	// second at full demand from three replicas, each spell after 3 s of
	// quiet.
	times := func(key string) []time.Time {
		var mu sync.Mutex
		var out []time.Time
		for spell := range 5 {
			start := t0.Add(time.Duration(spell) * 4 * time.Second)
			for step := range 100 {
				at := start.Add(time.Duration(step) * 10 * time.Millisecond)
				var wg sync.WaitGroup
				for range 3 {
					wg.Go(func() {
						l, err := engine.LeaseTokens(ctx, st, db.Pool, key, 2, &at)
						require.NoError(t, err)
						mu.Lock()
						defer mu.Unlock()
						for i := range l.Granted {
							// A time before the lease (an idle key's
							// burst) is spent when the lease returns.
							out = append(out, latest(at, at.Add(l.Start+time.Duration(i)*l.Every)))
						}
					})
				}
				wg.Wait()
			}
		}
		slices.SortFunc(out, func(a, b time.Time) int { return a.Compare(b) })
		return out
	}
	// shortest is the shortest span of any n + 1 consecutive times.
	shortest := func(ts []time.Time) time.Duration {
		least := time.Duration(math.MaxInt64)
		for i := n; i < len(ts); i++ {
			least = min(least, ts[i].Sub(ts[i-n]))
		}
		return least
	}

	const average, anySecond = "webhook:average.example", "webhook:strict.example"
	require.NoError(t, st.ConfigureLimit(ctx, db.Pool, average, n, false, "config"))
	require.NoError(t, st.ConfigureLimit(ctx, db.Pool, anySecond, n, true, "config"))
	require.Less(t, shortest(times(average)), time.Second, "an average lets a fifth request into one second")

	held := times(anySecond)
	require.GreaterOrEqual(t, shortest(held), time.Second+50*time.Millisecond,
		"any 5 times span a second and the 50 ms a request may leave after its time")
	// It still gives out nearly its rate while it binds: 5 spells of a
	// second, each ~4 times (a twentieth fewer).
	require.GreaterOrEqual(t, len(held), 5*(n-1), "gave out %d times", len(held))
	row, err := st.LimitOf(ctx, db.Pool, anySecond)
	require.NoError(t, err)
	require.True(t, row.InAnySecond)
}

// TestShardsShareOneLimitPlace: the effects of two databases (shards)
// go to one receiver; their dispatchers keep the limits in one shared
// place. A 429 that shard A's request got pauses the receiver's key for
// shard B too: B's effect waits for the key instead of being sent (with
// the limits in each shard, B would send at once, and N shards offer N
// times a partner's rate). The key is kept in the shared place only; an
// operator of shard B sees it there and resumes it, and B's effect goes
// out.
func TestShardsShareOneLimitPlace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	limits := testdb.New(t)
	shared := &sideeffects.SharedLimits{Pool: limits.Pool, Schema: limits.Schema}
	a := setupWorker(t, workerOpts{})
	b := setupWorker(t, workerOpts{})
	a.cfg.SharedLimits, b.cfg.SharedLimits = shared, shared
	a.recv.Respond("/a", fakes.Status(http.StatusTooManyRequests, "Retry-After", "3600"))
	u, err := url.Parse(a.recv.URL)
	require.NoError(t, err)
	key := "webhook:" + u.Host
	a.start(t)
	db := b.start(t)

	a.enqueue(t, "/a")
	sharedStore := store.NewStore(limits.Schema)
	require.Eventually(t, func() bool {
		row, err := sharedStore.LimitOf(ctx, limits.Pool, key)
		return err == nil && row.PausedUntil != nil && time.Until(*row.PausedUntil) > 5*time.Minute
	}, testWait, pollEvery, "shard A's 429 paused the key in the shared place")
	// Shard B's dispatcher reads the shared keys each second, as a
	// replica of one database reads its own.
	require.Eventually(t, func() bool {
		for _, k := range db.Limits() {
			if k.Key == key && time.Until(k.PausedUntil) > 5*time.Minute {
				return true
			}
		}
		return false
	}, testWait, pollEvery, "shard B's dispatcher knows of the pause")

	e := b.enqueueURL(t, a.recv.URL+"/b")
	require.Eventually(t, func() bool {
		got := b.effect(t, e.ID)
		return got.WaitingFor != nil && *got.WaitingFor == key
	}, testWait, pollEvery, "shard B's effect waits for the key shard A's 429 paused")
	for _, d := range a.recv.Deliveries() {
		require.NotEqual(t, e.Key, d.ID, "shard B sent nothing to the paused receiver")
	}
	for _, shard := range []*workerBundle{a, b} {
		_, err := shard.store.LimitOf(ctx, shard.db.Pool, key)
		require.ErrorIs(t, err, store.ErrNotFound, "no shard keeps a row of its own")
	}

	op, err := sideeffects.NewOperator(b.db.Pool, sideeffects.OperatorConfig{Schema: b.db.Schema, SharedLimits: shared})
	require.NoError(t, err)
	reports, err := op.Limits(ctx)
	require.NoError(t, err)
	require.Len(t, reports, 1)
	require.Equal(t, key, reports[0].Key)
	require.NotNil(t, reports[0].PausedUntil)
	require.EqualValues(t, 1, reports[0].WaitingEffects, "shard B's effect, counted in shard B")
	woken, err := op.ResumeLimit(ctx, key, "oncall", "partner back")
	require.NoError(t, err)
	require.Equal(t, 1, woken)
	b.waitFor(t, e.ID, outboxtype.StateConfirmed)
	hist, err := op.LimitHistory(ctx, key, 5)
	require.NoError(t, err)
	require.Len(t, hist, 1, "the resume is audited in the shared place")
}

// TestAShardKeepsSendingAtItsShareWhenTheSharedLimitsAreAway: a shard's
// dispatcher leases a limited key from the shared place, then the place
// cannot be read (its table gone); the dispatcher keeps sending the key's
// effects at the part of the rate it was leasing, instead of failing
// every limited request until the place is back.
func TestAShardKeepsSendingAtItsShareWhenTheSharedLimitsAreAway(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	limits := testdb.New(t)
	b := setupWorker(t, workerOpts{})
	b.cfg.SharedLimits = &sideeffects.SharedLimits{Pool: limits.Pool, Schema: limits.Schema}
	u, err := url.Parse(b.recv.URL)
	require.NoError(t, err)
	key := "webhook:" + u.Host
	b.cfg.Limits = map[string]float64{key: 50}
	d := b.start(t)

	// Its share is learned from the shared row: it is the only process
	// leasing the key.
	var before []uuid.UUID
	require.Eventually(t, func() bool {
		before = append(before, b.enqueue(t, "/before").ID)
		for _, k := range d.Limits() {
			if k.Key == key && k.Share >= 0.99 {
				return true
			}
		}
		return false
	}, testWait, 300*time.Millisecond, "the dispatcher learns its share of the key")
	for _, id := range before {
		b.waitFor(t, id, outboxtype.StateConfirmed)
	}

	_, err = limits.Pool.Exec(ctx, "ALTER TABLE "+limits.Schema+".outboxd_limits RENAME TO outboxd_limits_away")
	require.NoError(t, err)
	var after []uuid.UUID
	for range 5 {
		after = append(after, b.enqueue(t, "/after").ID)
	}
	for _, id := range after {
		got := b.waitFor(t, id, outboxtype.StateConfirmed)
		require.Equal(t, 1, got.Attempts, "no attempt failed for the limits being away")
	}

	// A 429 meanwhile pauses the key in this process.
	b.recv.Respond("/throttled", fakes.Status(http.StatusTooManyRequests, "Retry-After", "1"))
	e := b.enqueue(t, "/throttled")
	b.waitFor(t, e.ID, outboxtype.StateConfirmed)
	var at []time.Time
	for _, d := range b.recv.Deliveries() {
		if d.ID == e.Key {
			at = append(at, d.At)
		}
	}
	require.Len(t, at, 2, "answered 429, then accepted")
	require.GreaterOrEqual(t, at[1].Sub(at[0]), 990*time.Millisecond, "not sent again during the 429's pause")
}
