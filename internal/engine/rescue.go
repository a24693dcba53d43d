package engine

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/outboxd/outboxd/internal/store"
)

// orphanCheckInterval is how often a dispatcher looks for jobs whose
// process is gone.
const orphanCheckInterval = 2 * time.Second

// orphans hands back, within seconds, the dispatch jobs of a process that
// was killed or lost its database, instead of leaving them to River's
// rescuer (RescueAfter, checked every 30 s: up to 2.5 minutes with the
// defaults). Each process holds its alive lock (store.TakeAlive) while it
// runs; a job River still has running whose process holds none, and that
// started longer ago than the job timeout, is made available again with
// River's own rescue statement. The job timeout is the bound River itself
// puts on an attempt: by then the attempt's context was cancelled even if
// its process somehow still ran, so the rescue never races a live
// attempt. Every replica looks; the rescue is a conditional update, so two
// replicas rescuing the same job do it once.
type orphans struct {
	pool    *pgxpool.Pool
	store   *store.Store
	exec    riverdriver.Executor
	schema  string
	record  string
	timeout time.Duration // River's JobTimeout
	logger  *slog.Logger

	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
	started atomic.Bool
	// checked, when set (tests), hears of each look and what it rescued.
	checked func(rescued int)
}

func newOrphans(pool *pgxpool.Pool, st *store.Store, schema, record string, timeout time.Duration, logger *slog.Logger) *orphans {
	return &orphans{pool: pool, store: st, exec: riverpgxv5.New(pool).GetExecutor(), schema: schema, record: record,
		timeout: timeout, logger: logger, stop: make(chan struct{}), done: make(chan struct{})}
}

// start takes the alive lock and looks for orphans every
// orphanCheckInterval until stopAlive or the end of ctx.
func (o *orphans) start(ctx context.Context) {
	if o.timeout < 0 {
		return // attempts without a timeout: River's rescuer alone
	}
	o.started.Store(true)
	go func() {
		defer close(o.done)
		var conn *pgx.Conn
		defer func() {
			if conn != nil {
				_ = conn.Close(context.Background())
			}
		}()
		t := time.NewTicker(orphanCheckInterval)
		defer t.Stop()
		for {
			conn = o.keepAlive(ctx, conn)
			if n, err := o.rescue(ctx); err != nil {
				if ctx.Err() == nil {
					o.logger.Warn("could not look for the jobs of processes that are gone", "error", err)
				}
			} else if o.checked != nil {
				o.checked(n)
			}
			select {
			case <-ctx.Done():
				return
			case <-o.stop:
				return
			case <-t.C:
			}
		}
	}()
}

// keepAlive returns conn holding this process's alive lock, connecting
// and taking it again if the session was lost (nil if it cannot now).
func (o *orphans) keepAlive(ctx context.Context, conn *pgx.Conn) *pgx.Conn {
	if conn != nil {
		if err := conn.Ping(ctx); err == nil {
			return conn
		}
		_ = conn.Close(context.Background())
	}
	conn, err := pgx.ConnectConfig(ctx, o.pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil
	}
	ok, err := o.store.TakeAlive(ctx, conn, o.record)
	if err != nil || !ok {
		if err == nil {
			o.logger.Warn("another session holds this process's alive lock", "record", o.record)
		}
		_ = conn.Close(context.Background())
		return nil
	}
	return conn
}

// rescue makes the orphaned jobs available again, as River's rescuer
// would (discarded if out of attempts), and returns how many.
func (o *orphans) rescue(ctx context.Context) (int, error) {
	horizon := time.Now().Add(-o.timeout)
	jobs, err := o.store.OrphanedJobs(ctx, o.pool, horizon)
	if err != nil || len(jobs) == 0 {
		return 0, err
	}
	now := time.Now().UTC()
	p := &riverdriver.JobRescueManyParams{Schema: o.schema, StuckHorizon: horizon}
	for _, j := range jobs {
		e, err := json.Marshal(rivertype.AttemptError{At: now, Attempt: max(j.Attempt, 0),
			Error: "outboxd: the process working this job is gone (it no longer holds its alive lock); rescued"})
		if err != nil {
			return 0, err
		}
		state, finalized := rivertype.JobStateAvailable, (*time.Time)(nil)
		if j.Attempt >= j.MaxAttempts {
			state, finalized = rivertype.JobStateDiscarded, &now
		}
		p.ID = append(p.ID, j.ID)
		p.Error = append(p.Error, e)
		p.FinalizedAt = append(p.FinalizedAt, finalized)
		p.ScheduledAt = append(p.ScheduledAt, now)
		p.State = append(p.State, string(state))
	}
	if _, err := o.exec.JobRescueMany(ctx, p); err != nil {
		return 0, err
	}
	o.logger.Info("handed back the jobs of processes that are gone", "jobs", len(jobs))
	return len(jobs), nil
}

// stopAlive stops looking and releases the alive lock; called once every
// worker of the process has returned.
func (o *orphans) stopAlive() {
	if !o.started.Load() {
		return
	}
	o.once.Do(func() { close(o.stop) })
	<-o.done
}
