package engine

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/outboxd/outboxd/internal/store"
	"github.com/outboxd/outboxd/outboxtype"
)

// MaintenanceQueue runs the sweeper and retention jobs, one at a time.
const MaintenanceQueue = "outboxd_maintenance"

// SweepArgs are the arguments of the periodic sweep job.
type SweepArgs struct{}

// Kind implements river.JobArgs.
func (SweepArgs) Kind() string { return "outboxd.sweep" }

// sweepWorker re-inserts dispatch jobs for pending and fired effects that
// have none: rows written by plain SQL, or whose job River discarded or
// cleaned up. It runs on the leader only, as River's periodic jobs do.
type sweepWorker struct {
	river.WorkerDefaults[SweepArgs]
	pool   *pgxpool.Pool
	store  *store.Store
	grace  time.Duration
	logger *slog.Logger
}

func (w *sweepWorker) Work(ctx context.Context, _ *river.Job[SweepArgs]) error {
	n, err := Sweep(ctx, w.store, w.pool, river.ClientFromContext[pgx.Tx](ctx), time.Now().Add(-w.grace))
	if err != nil {
		return err
	}
	if n > 0 {
		w.logger.Info("sweeper inserted dispatch jobs for effects that had none", "effects", n)
	}
	return nil
}

// Sweep inserts a dispatch job for every pending or fired effect unchanged
// since notSince that has no live job, in batches, and returns how many it
// inserted. One bad row cannot stall the others: an effect whose job
// cannot be inserted (a provider name River refuses as a queue, written by
// plain SQL before the CHECK existed) is failed with the reason.
func Sweep(ctx context.Context, s *store.Store, pool *pgxpool.Pool, client *river.Client[pgx.Tx], notSince time.Time) (int, error) {
	total := 0
	for {
		var inserted, seen int
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			found, err := s.SweepCandidates(ctx, tx, notSince)
			if err != nil || len(found) == 0 {
				return err
			}
			seen = len(found)
			var params []river.InsertManyParams
			for _, x := range found {
				if !QueueNameValid(x.Provider) {
					if err := failUnqueueable(ctx, s, tx, x.ID, fmt.Errorf("provider %q is not a valid River queue name", x.Provider)); err != nil {
						return err
					}
					continue
				}
				params = append(params, JobParams(x.ID, x.Provider, x.NotBefore))
			}
			n, err := insertJobs(ctx, tx, client, params)
			if err == nil {
				inserted = n
				return nil
			}
			// The batch failed: insert one by one, failing the rows River
			// refuses.
			for _, p := range params {
				n, err := insertJobs(ctx, tx, client, []river.InsertManyParams{p})
				if err != nil {
					if err := failUnqueueable(ctx, s, tx, p.Args.(DispatchArgs).EffectID, err); err != nil {
						return err
					}
					continue
				}
				inserted += n
			}
			return nil
		})
		if err != nil {
			return total, fmt.Errorf("sweep: %w", err)
		}
		total += inserted
		if seen < store.SweepBatch {
			return total, nil
		}
	}
}

func failUnqueueable(ctx context.Context, s *store.Store, tx pgx.Tx, id uuid.UUID, cause error) error {
	_, err := s.Fail(ctx, tx, id, fmt.Sprintf("%s: %v: fix the row (provider must name a configured provider) and retry it, or cancel it", outboxtype.ReasonUnqueueable, cause))
	return err
}

// insertJobs inserts params in a savepoint, so that a failure leaves tx
// usable, and returns how many jobs were new.
func insertJobs(ctx context.Context, tx pgx.Tx, client *river.Client[pgx.Tx], params []river.InsertManyParams) (int, error) {
	if len(params) == 0 {
		return 0, nil
	}
	n := 0
	err := pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error {
		res, err := client.InsertManyTx(ctx, sp, params)
		for _, r := range res {
			if !r.UniqueSkippedAsDuplicate {
				n++
			}
		}
		return err
	})
	return n, err
}

var queueNameRE = regexp.MustCompile(`^[a-z0-9]+([_-][a-z0-9]+)*$`)

// QueueNameValid reports whether name can be a provider name: a River queue
// name, as the side_effects CHECK requires.
func QueueNameValid(name string) bool { return len(name) <= 64 && queueNameRE.MatchString(name) }

// RetentionArgs are the arguments of the periodic retention job.
type RetentionArgs struct{}

// Kind implements river.JobArgs.
func (RetentionArgs) Kind() string { return "outboxd.retention" }

// retentionWorker purges terminal effects older than the retention period
// and events left without effects. Pending and fired effects are never
// touched.
type retentionWorker struct {
	river.WorkerDefaults[RetentionArgs]
	pool      *pgxpool.Pool
	store     *store.Store
	retention time.Duration
	logger    *slog.Logger
}

func (w *retentionWorker) Work(ctx context.Context, _ *river.Job[RetentionArgs]) error {
	res, err := w.store.PurgeInBatches(ctx, w.pool, time.Now().Add(-w.retention), outboxtype.PurgeOptions{Yield: true})
	if err != nil {
		return err
	}
	if res.Effects > 0 || res.Events > 0 {
		w.logger.Info("retention purged terminal effects", "effects", res.Effects, "events", res.Events, "older_than", w.retention)
	}
	return nil
}

// Timeout lets a large purge run longer than a dispatch attempt.
func (w *retentionWorker) Timeout(*river.Job[RetentionArgs]) time.Duration { return 30 * time.Minute }

// SummaryArgs are the arguments of the periodic job that keeps the
// per-minute summary of ended effects (migration 00026; sideeffects'
// Operator.Stats reads it).
type SummaryArgs struct{}

// Kind implements river.JobArgs.
func (SummaryArgs) Kind() string { return "outboxd.summarize_minutes" }

// summaryInterval is how often the leader adds the minutes that are two
// minutes old to the summary.
const summaryInterval = time.Minute

// summaryWorker adds every minute two minutes old or more to the
// per-minute summary (a minute ends; a transaction that set an effect's
// ended_at in it has a minute more to commit), and, with a retention,
// deletes the summary's minutes older than it.
type summaryWorker struct {
	river.WorkerDefaults[SummaryArgs]
	pool      *pgxpool.Pool
	store     *store.Store
	retention time.Duration
}

func (w *summaryWorker) Work(ctx context.Context, _ *river.Job[SummaryArgs]) error {
	now := time.Now()
	if _, err := w.store.SummarizeMinutes(ctx, w.pool, now.Truncate(time.Minute).Add(-time.Minute)); err != nil {
		return err
	}
	if w.retention > 0 {
		if err := w.store.PurgeSummary(ctx, w.pool, now.Add(-w.retention)); err != nil {
			return err
		}
	}
	return nil
}

// KeyExpiryArgs are the arguments of the periodic job that deletes expired
// idempotency keys and inbox message ids.
type KeyExpiryArgs struct{}

// Kind implements river.JobArgs.
func (KeyExpiryArgs) Kind() string { return "outboxd.idempotency_key_expiry" }

// keyExpiryWorker deletes expired idempotency keys and inbox message ids,
// in batches, on the leader. A key a request holds is never deleted: a row
// locked by a request taking it over is skipped, and a three-phase claim
// still within its lock deadline is kept.
type keyExpiryWorker struct {
	river.WorkerDefaults[KeyExpiryArgs]
	pool   *pgxpool.Pool
	store  *store.Store
	logger *slog.Logger
}

func (w *keyExpiryWorker) Work(ctx context.Context, _ *river.Job[KeyExpiryArgs]) error {
	keys, msgs, err := w.store.PurgeExpired(ctx, w.pool)
	if keys > 0 || msgs > 0 {
		w.logger.Info("purged expired idempotency keys and inbox message ids", "keys", keys, "inbox_messages", msgs)
	}
	return err
}

func periodic(interval time.Duration, args river.JobArgs) *river.PeriodicJob {
	return river.NewPeriodicJob(river.PeriodicInterval(interval),
		func() (river.JobArgs, *river.InsertOpts) {
			return args, &river.InsertOpts{Queue: MaintenanceQueue, UniqueOpts: river.UniqueOpts{ByPeriod: interval}}
		}, &river.PeriodicJobOpts{ID: args.Kind(), RunOnStart: true})
}

// KeyWindowWatchArgs are the arguments of the periodic job that raises
// outboxd.effect.key_window_closing (migration 00029).
type KeyWindowWatchArgs struct{}

// Kind implements river.JobArgs.
func (KeyWindowWatchArgs) Kind() string { return "outboxd.key_window_watch" }

// keyWindowWarning is how long before an effect's key window closes the
// operational event says so.
const keyWindowWarning = time.Hour

// keyWindowWorker raises outboxd.effect.key_window_closing for the
// effects of the dispatcher's providers with key windows, on the leader.
type keyWindowWorker struct {
	river.WorkerDefaults[KeyWindowWatchArgs]
	pool    *pgxpool.Pool
	store   *store.Store
	windows map[string]time.Duration
}

func (w *keyWindowWorker) Work(ctx context.Context, _ *river.Job[KeyWindowWatchArgs]) error {
	for provider, window := range w.windows {
		if err := w.store.RaiseKeyWindowsClosing(ctx, w.pool, provider, window, keyWindowWarning); err != nil {
			return err
		}
	}
	return nil
}
