package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outboxd/outboxd/internal/store"
	"github.com/riverqueue/river"
)

// IntakeChannel is the notification channel on which Enqueue wakes the
// dispatchers when applications let them insert the River jobs; the
// payload is the schema.
const IntakeChannel = store.IntakeChannel

// intakeBatch bounds how many effects one intake transaction moves.
const intakeBatch = 1000

// intakeFastPoll is how often the intake is read while effects arrive, and
// intakeActive how long after the last one (or the last move of the watch
// sequence) they are expected to go on. When none do, the intake watches
// its sequence (outbox_intake_watch, migration 00030) every intakeWatch
// instead, a read whose cost does not grow with the intake's dead rows,
// and reads the intake itself at least every intakeIdlePoll: for a
// transaction that drew its number more than intakeActive before it
// committed. intakeQuietWatch is the watch's interval once nothing came for
// intakeQuiet: an idle dispatcher's reads (measured: 2ms costs about 5% of
// a core in outboxd and 2.5% in Postgres) go down to a fifth after a quiet
// minute, and the first effect after it waits up to 10ms, as before the
// watch.
const (
	intakeFastPoll   = time.Millisecond
	intakeActive     = 100 * time.Millisecond
	intakeWatch      = 2 * time.Millisecond
	intakeQuiet      = time.Minute
	intakeQuietWatch = 10 * time.Millisecond
	intakeIdlePoll   = 100 * time.Millisecond
)

// intake gives River jobs to the effects applications queued in
// outbox_intake (outbox.JobsByDispatcher): reading it every millisecond
// while effects arrive and watching its sequence when none do, or woken by
// IntakeChannel when an application asks for notifications, it
// deletes a batch of intake rows and inserts their jobs in one
// transaction, so a crash at any point loses no effect. Every dispatcher
// runs one; SKIP LOCKED lets them share the work.
type intake struct {
	pool   *pgxpool.Pool
	store  *store.Store
	schema string
	logger *slog.Logger
	client *river.Client[pgx.Tx]
	// tenants gives the tenants' queued effects their jobs (tenants.go).
	tenants *tenantFeeder

	stop context.CancelFunc
	done chan struct{}
}

func (in *intake) start() {
	ctx, cancel := context.WithCancel(context.Background())
	in.stop, in.done = cancel, make(chan struct{})
	go in.run(ctx)
}

func (in *intake) stopIntake() {
	if in.stop != nil {
		in.stop()
		<-in.done
	}
}

func (in *intake) run(ctx context.Context) {
	defer close(in.done)
	for ctx.Err() == nil {
		if err := in.listen(ctx); err != nil && ctx.Err() == nil {
			in.logger.Error("intake: will retry in 1s", "error", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

// listen holds a connection that LISTENs on IntakeChannel and drains the
// intake whenever woken or every poll interval, until an error.
func (in *intake) listen(ctx context.Context) error {
	conn, err := in.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if err := store.ListenIntake(ctx, conn); err != nil {
		return err
	}
	defer func() {
		// Leave the pooled connection as it was found.
		uctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := store.UnlistenIntake(uctx, conn); err != nil {
			conn.Conn().Close(uctx) //nolint:errcheck // the pool discards it
		}
	}()
	// mark is the watch's number at the last look; starting active, the
	// first drain reads it.
	var mark int64
	lastFound := time.Now()
	for ctx.Err() == nil {
		n, w, err := in.drain(ctx)
		if err != nil {
			return err
		}
		if w != mark {
			// Numbers were drawn since the last look: their transactions
			// may commit after this drain, so keep reading for a while.
			mark, lastFound = w, time.Now()
		}
		fed, queued, err := in.feed(ctx)
		if err != nil {
			return err
		}
		if n == intakeBatch {
			continue
		}
		drained := time.Now()
		if n+fed > 0 {
			lastFound = drained
		}
		// Applications need not wake the dispatchers (a NOTIFY in their
		// transaction serialises their commits): while effects arrive
		// (one found, or the watch sequence moved, in the last
		// intakeActive), read the intake every intakeFastPoll; when none
		// come, watch the sequence every intakeWatch and read the intake
		// when it moves, or after intakeIdlePoll (tenantPoll while
		// tenants' effects wait for places in their windows: an end here
		// wakes the loop, tenantFeeder.poke, one on another replica is
		// seen then). A notification wakes it at once either way.
		idleRead := intakeIdlePoll
		if queued {
			idleRead = tenantPoll
		}
		for ctx.Err() == nil {
			if time.Since(lastFound) <= intakeActive {
				if _, err := in.wait(ctx, conn, intakeFastPoll); err != nil {
					return err
				}
				break
			}
			// Idle: a timer and one cheap read a turn; a notification
			// that came meanwhile was kept by the connection.
			every := intakeWatch
			if time.Since(lastFound) > intakeQuiet {
				every = intakeQuietWatch
			}
			if in.sleep(ctx, every) || time.Since(drained) >= idleRead {
				break
			}
			m, err := in.watch(ctx, conn)
			if err != nil {
				return err
			}
			if notified(conn) || m != mark {
				break // the drain's look at the watch keeps it reading
			}
		}
	}
	return nil
}

// sleep waits for d and says whether the tenants' feeder was poked
// meanwhile.
func (in *intake) sleep(ctx context.Context, d time.Duration) bool {
	var poked chan struct{}
	if in.tenants != nil {
		poked = in.tenants.wake
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-poked:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

// notified takes the notifications conn received during its last
// statements and says whether there were any.
func notified(conn *pgxpool.Conn) bool {
	done, cancel := context.WithCancel(context.Background())
	cancel()
	got := false
	for {
		n, _ := conn.Conn().WaitForNotification(done)
		if n == nil {
			return got
		}
		got = true
	}
}

// wait waits on conn for a notification on IntakeChannel, a poke of the
// tenants' feeder, or d, and says whether it was woken.
func (in *intake) wait(ctx context.Context, conn *pgxpool.Conn, d time.Duration) (bool, error) {
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	stopWake := in.wakeOnPoke(wctx, cancel)
	_, err := conn.Conn().WaitForNotification(wctx)
	stopWake()
	switch {
	case err == nil:
		return true, nil
	case ctx.Err() != nil:
		return false, nil
	case errors.Is(err, context.DeadlineExceeded):
		return false, nil
	case errors.Is(err, context.Canceled):
		return true, nil // the tenants' feeder was poked
	}
	return false, fmt.Errorf("wait for %s: %w", IntakeChannel, err)
}

// watch reads the last number drawn from the intake's watch sequence:
// it moves when an effect, an ordering key's wake or a tenant's queued
// effect is written, whether or not that has committed yet.
func (in *intake) watch(ctx context.Context, conn *pgxpool.Conn) (int64, error) {
	return in.store.IntakeWatch(ctx, conn)
}

// feed runs the tenants' feeder, if any, and reports how many effects it
// gave jobs and whether tenants' effects are still queued.
func (in *intake) feed(ctx context.Context) (int, bool, error) {
	if in.tenants == nil {
		return 0, false, nil
	}
	n, queued, err := in.feedTenants(ctx)
	return n, queued, err
}

// wakeOnPoke cancels the wait (cancel) when the tenants' feeder is poked;
// the returned func stops watching.
func (in *intake) wakeOnPoke(wctx context.Context, cancel context.CancelFunc) func() {
	if in.tenants == nil {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		select {
		case <-in.tenants.wake:
			cancel()
		case <-wctx.Done():
		case <-done:
		}
	}()
	return func() { close(done) }
}

// drain moves one batch of intake rows into River jobs, and gives the
// next effect of each ordering key that may have moved its job, and
// returns how many rows it took and the watch's last number as its first
// statement read it.
func (in *intake) drain(ctx context.Context) (int, int64, error) {
	// Most polls find the intake empty: one round trip says so, without
	// a transaction, which of the two statements below have work, and
	// the watch's last number (drawn before what this drain can see).
	queued, wakes, watch, err := in.store.IntakeWaiting(ctx, in.pool)
	if err != nil {
		return 0, 0, fmt.Errorf("intake: %w", err)
	}
	if !queued && !wakes {
		return 0, watch, nil
	}
	n := 0
	err = pgx.BeginFunc(ctx, in.pool, func(tx pgx.Tx) error {
		if !queued {
			woken, err := wakeChains(ctx, in.store, tx, in.client, intakeBatch)
			n += woken
			return err
		}
		taken, err := in.store.TakeIntake(ctx, tx, intakeBatch)
		if err != nil {
			return err
		}
		var params []river.InsertManyParams
		// Effects due now share batch jobs, by provider.
		var due dueNow
		now := time.Now()
		for _, x := range taken {
			n++
			switch {
			case x.Ordered:
				// An effect with an ordering key gets its job when it is
				// first in its chain: see the wakes below.
				wakes = true
			case x.NotBefore != nil && x.NotBefore.After(now):
				params = append(params, JobParams(x.ID, x.Provider, x.NotBefore))
			default:
				due.add(x.Provider, x.ID)
			}
		}
		params = append(params, due.params()...)
		if len(params) > 0 {
			if _, err := in.client.InsertManyTx(ctx, tx, params); err != nil {
				return err
			}
		}
		if !wakes {
			// No key's chain to move: a wake written since is taken at
			// the next look.
			return nil
		}
		woken, err := wakeChains(ctx, in.store, tx, in.client, intakeBatch)
		n += woken
		return err
	})
	if err != nil {
		return 0, 0, fmt.Errorf("intake: %w", err)
	}
	return n, watch, nil
}

// feedTenants gives the tenants' due effects their jobs, as their windows
// allow, and returns how many it gave and whether effects were queued.
func (in *intake) feedTenants(ctx context.Context) (int, bool, error) {
	waiting, err := in.store.TenantsWaiting(ctx, in.pool)
	if err != nil {
		return 0, false, fmt.Errorf("tenants: %w", err)
	}
	if !waiting {
		return 0, false, nil
	}
	f := in.tenants
	n := 0
	err = pgx.BeginFunc(ctx, in.pool, func(tx pgx.Tx) error {
		fed, err := in.store.FeedTenants(ctx, tx, f.window, f.tenants, f.weights)
		if err != nil {
			return err
		}
		var params []river.InsertManyParams
		for _, x := range fed {
			params = append(params, JobParams(x.ID, x.Provider, nil))
		}
		if len(params) == 0 {
			return nil
		}
		n = len(params)
		_, err = in.client.InsertManyTx(ctx, tx, params)
		return err
	})
	if err != nil {
		return 0, true, fmt.Errorf("tenants: %w", err)
	}
	return n, true, nil
}
