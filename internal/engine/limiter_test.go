package engine

import (
	"context"
	"log/slog"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/store"
	"github.com/outboxd/outboxd/internal/testdb"
)

// TestThreeReplicasTakeTurnsWithinTheRate: three processes' limiters, 30
// workers each, take 150 requests of one key at 50/s on the real clock.
// However their leases and sleeps interleave, no two seconds of the run hold
// more than the rate plus the burst and what lateness crowds together,
// and every request got its time.
func TestThreeReplicasTakeTurnsWithinTheRate(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	st := store.NewStore(db.Schema)
	ctx := context.Background()
	const key, rate, total = "webhook:turns.example", 50.0, 150
	require.NoError(t, st.ConfigureLimit(ctx, db.Pool, key, rate, false, "config"))

	var mu sync.Mutex
	var times []time.Time
	var wg sync.WaitGroup
	for range 3 {
		l := newLimiter(db.Pool, st, slog.New(slog.DiscardHandler), time.Second)
		l.ensure(key, rate, false, "config")
		for range 30 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					mu.Lock()
					if len(times) >= total {
						mu.Unlock()
						return
					}
					mu.Unlock()
					ok, wait, err := l.take(ctx, key, 30*time.Second, false)
					require.NoError(t, err)
					require.True(t, ok, "an account's worker waits for its time (told to wait %s)", wait)
					mu.Lock()
					times = append(times, time.Now())
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	require.GreaterOrEqual(t, len(times), total)
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	most := 0
	for i := range times {
		j := i
		for j < len(times) && times[j].Sub(times[i]) < 2*time.Second {
			j++
		}
		most = max(most, j-i)
	}
	// Requests are never early; late ones crowd the next: two seconds
	// hold the rate, the burst (a twentieth of a second) and what up to
	// 300 ms of lateness (a loaded test machine's) brings together.
	require.LessOrEqual(t, most, 118, "requests in the busiest two seconds")
}

// TestADestinationsLongLineDoesNotHoldWorkers: when more workers already
// wait for a destination's key than this process's share of it serves
// within their wait, a new one is told at once to come back later
// instead of holding a worker; an account's worker (its queue is its
// own) waits.
func TestADestinationsLongLineDoesNotHoldWorkers(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	st := store.NewStore(db.Schema)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const key, rate = "webhook:slow.example", 0.2
	require.NoError(t, st.ConfigureLimit(ctx, db.Pool, key, rate, false, "config"))
	l := newLimiter(db.Pool, st, slog.New(slog.DiscardHandler), time.Second)
	l.ensure(key, rate, false, "config")

	// The idle key's burst and the time after it: two requests at once.
	for range 2 {
		ok, _, err := l.take(ctx, key, 20*time.Second, true)
		require.NoError(t, err)
		require.True(t, ok)
	}
	// The next time is five seconds away: 0.2/s serves at most four in
	// 20 s, so of twenty workers at most four wait; the others are told
	// at once to come back after those ahead of them.
	waiting := func() int {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.keys[key].waiting
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var served int
	var turnedAway []time.Duration
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, wait, err := l.take(ctx, key, 20*time.Second, true)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
			case ok:
				served++
			default:
				turnedAway = append(turnedAway, wait)
			}
		}()
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(turnedAway)+waiting() == 20
	}, 10*time.Second, time.Millisecond)
	mu.Lock()
	require.Zero(t, served, "the next time is seconds away")
	require.GreaterOrEqual(t, len(turnedAway), 16, "at most four hold a worker")
	for _, wait := range turnedAway {
		require.GreaterOrEqual(t, wait, 10*time.Second, "each comes back after at least the two ahead of it, at 0.2/s")
	}
	mu.Unlock()
	require.GreaterOrEqual(t, waiting(), 2)

	// An account's worker joins however long the line is.
	before := waiting()
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _, _ = l.take(ctx, key, 20*time.Second, false)
	}()
	require.Eventually(t, func() bool { return waiting() == before+1 }, 10*time.Second, time.Millisecond)
	cancel()
	wg.Wait()
}

// TestALimitThatDoesNotBindLeasesWhatItSpends: workers that take a key's
// times with pauses between (a limit far above what they ask) spend what
// their process leases, an idle key's burst too: few leases, and few times
// leased and thrown away unused.
func TestALimitThatDoesNotBindLeasesWhatItSpends(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	st := store.NewStore(db.Schema)
	ctx := context.Background()
	const key, workers, each = "noop:account", 100, 30
	l := newLimiter(db.Pool, st, slog.New(slog.DiscardHandler), time.Second)
	l.ensure(key, 1e6, false, "default")
	require.NoError(t, l.writePending(ctx))
	var wg sync.WaitGroup
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range each {
				ok, _, err := l.take(ctx, key, 30*time.Second, false)
				require.NoError(t, err)
				require.True(t, ok)
				time.Sleep(time.Duration((i*7+j*13)%40) * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	row, err := st.LimitOf(ctx, db.Pool, key)
	require.NoError(t, err)
	require.LessOrEqual(t, row.Granted, int64(2*workers*each), "times leased for the %d taken", workers*each)
}

// TestTurnedAwayJobsComeBackSpreadOverTheLine: a job turned away from a
// destination's line comes back at random within three quarters of the
// time the whole line takes at the key's rate, not together with the
// others.
func TestTurnedAwayJobsComeBackSpreadOverTheLine(t *testing.T) {
	st := &keyState{rate: 10, line: 200}
	var most time.Duration
	seen := map[time.Duration]bool{}
	for range 200 {
		d := st.spread()
		require.GreaterOrEqual(t, d, time.Duration(0))
		require.LessOrEqual(t, d, 15*time.Second, "200 waiting at 10/s: within three quarters of 20 s")
		most = max(most, d)
		seen[d] = true
	}
	require.Greater(t, most, 7*time.Second, "spread over the line, not bunched at its start")
	require.Greater(t, len(seen), 150, "each its own time")
	st.line = 0
	for range 50 {
		require.LessOrEqual(t, st.spread(), 100*time.Millisecond, "no line known: a jitter")
	}
}

// TestALineAtAClimbingRateIsSpreadOverItsClimb: after 429s brought a key
// with no rate of its own to 1/s, its rate climbs back by 1/s each second;
// 1,500 effects waiting then take about 54 s, and a job turned away comes
// back within three quarters of that, not within three quarters of the
// 1,500 s the line would take at 1/s (which left a drain at about 1/s for
// minutes after the provider stopped throttling).
func TestALineAtAClimbingRateIsSpreadOverItsClimb(t *testing.T) {
	require.InDelta(t, 53.8, serveTime(1500, 1, 1, math.Inf(1)), 0.1)
	require.InDelta(t, 150, serveTime(1500, 10, 0, 10), 1e-9, "no climb: the line at the rate")
	// A key with a rate of its own (50/s) climbs by 5/s from 12.5/s: the
	// ceiling after 7.5 s (234 served), the rest at 50/s.
	require.InDelta(t, 7.5+(1500-234.375)/50, serveTime(1500, 12.5, 5, 50), 1e-9)
	st := &keyState{rate: 1, climb: 1, ceiling: math.Inf(1), line: 1500}
	for range 200 {
		require.LessOrEqual(t, st.spread(), time.Duration(0.75*53.9*float64(time.Second)))
	}
}

// TestAProcessStopsSendingAtItsFirst429: a process that gets a key's 429
// sends that key nothing more while the pause is being written for every
// replica (here, while another transaction holds the key's row). Before,
// its other workers kept sending to a key nobody knew the rate of until
// the write returned: 88 429s in the first second of a drain.
func TestAProcessStopsSendingAtItsFirst429(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	st := store.NewStore(db.Schema)
	ctx := context.Background()
	const key = "webhook:unknown.example"
	l := newLimiter(db.Pool, st, slog.New(slog.DiscardHandler), time.Second)
	ok, _, err := l.take(ctx, key, 0, false)
	require.NoError(t, err)
	require.True(t, ok, "a key nobody limited is free")

	// The key's row exists and another transaction holds it.
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, st.EnsureLimit(ctx, tx, key))
	require.NoError(t, tx.Commit(ctx))
	hold, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = hold.Rollback(context.Background()) })
	_, err = st.LockLimit(ctx, hold, key, nil)
	require.NoError(t, err)

	done := make(chan error, 1)
	go func() {
		_, _, err := l.throttled(ctx, key, 2*time.Second, time.Now())
		done <- err
	}()
	require.Eventually(t, func() bool {
		ok, wait, err := l.take(ctx, key, 0, false)
		return err == nil && !ok && wait > time.Second
	}, 5*time.Second, time.Millisecond, "while the pause is written, this process holds the key")
	require.NoError(t, hold.Rollback(ctx))
	require.NoError(t, <-done)
	row, err := st.LimitOf(ctx, db.Pool, key)
	require.NoError(t, err)
	require.NotNil(t, row.PausedUntil, "and then every replica does")
}
