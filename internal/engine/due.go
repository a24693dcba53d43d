package engine

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

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

// dueKeeper makes due River jobs available on every dispatcher.
type dueKeeper struct {
	pool   *pgxpool.Pool
	store  *store.Store
	logger *slog.Logger

	stop context.CancelFunc
	done chan struct{}
}

func newDueKeeper(pool *pgxpool.Pool, st *store.Store, logger *slog.Logger) *dueKeeper {
	return &dueKeeper{pool: pool, store: st, logger: logger}
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
		n, err := k.store.MakeDue(ctx, k.pool, until, dueBatch)
		total += n
		if err != nil || n < dueBatch {
			return total, err
		}
	}
}
