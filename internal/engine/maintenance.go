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

	"github.com/outboxd/outboxd/outboxtype"
)

// MaintenanceQueue runs the sweeper and retention jobs, one at a time.
const MaintenanceQueue = "outboxd_maintenance"

// sweepBatch is how many effects one sweep looks at.
const sweepBatch = 1000

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
	store  *Store
	grace  time.Duration
	logger *slog.Logger
}

func (w *sweepWorker) Work(ctx context.Context, _ *river.Job[SweepArgs]) error {
	n, err := w.store.Sweep(ctx, w.pool, river.ClientFromContext[pgx.Tx](ctx), time.Now().Add(-w.grace))
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
func (s *Store) Sweep(ctx context.Context, pool *pgxpool.Pool, client *river.Client[pgx.Tx], notSince time.Time) (int, error) {
	total := 0
	for {
		var inserted, seen int
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, s.sql(sqlSweep), notSince, sweepBatch)
			if err != nil {
				return err
			}
			type row struct {
				id        uuid.UUID
				provider  string
				notBefore *time.Time
			}
			found, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
				var x row
				err := r.Scan(&x.id, &x.provider, &x.notBefore)
				return x, err
			})
			if err != nil || len(found) == 0 {
				return err
			}
			seen = len(found)
			var params []river.InsertManyParams
			for _, x := range found {
				if !QueueNameValid(x.provider) {
					if err := s.failUnqueueable(ctx, tx, x.id, fmt.Errorf("provider %q is not a valid River queue name", x.provider)); err != nil {
						return err
					}
					continue
				}
				params = append(params, JobParams(x.id, x.provider, x.notBefore))
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
					if err := s.failUnqueueable(ctx, tx, p.Args.(DispatchArgs).EffectID, err); err != nil {
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
		if seen < sweepBatch {
			return total, nil
		}
	}
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

func (s *Store) failUnqueueable(ctx context.Context, tx pgx.Tx, id uuid.UUID, cause error) error {
	_, err := s.Fail(ctx, tx, id, fmt.Sprintf("%s: %v: fix the row (provider must name a configured provider) and retry it, or cancel it", outboxtype.ReasonUnqueueable, cause))
	return err
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
	store     *Store
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
// per-minute summary of ended effects (migration 00026, Store.Stats).
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
	store     *Store
	retention time.Duration
}

func (w *summaryWorker) Work(ctx context.Context, _ *river.Job[SummaryArgs]) error {
	now := time.Now()
	if _, err := w.store.SummarizeMinutes(ctx, w.pool, now.Truncate(time.Minute).Add(-time.Minute)); err != nil {
		return err
	}
	if w.retention > 0 {
		if _, err := w.pool.Exec(ctx, w.store.sql(sqlPurgeSummary), now.Add(-w.retention)); err != nil {
			return fmt.Errorf("purge the summary's old minutes: %w", err)
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
	store  *Store
	logger *slog.Logger
}

func (w *keyExpiryWorker) Work(ctx context.Context, _ *river.Job[KeyExpiryArgs]) error {
	keys, msgs, err := w.store.PurgeExpired(ctx, w.pool)
	if keys > 0 || msgs > 0 {
		w.logger.Info("purged expired idempotency keys and inbox message ids", "keys", keys, "inbox_messages", msgs)
	}
	return err
}

// PurgeExpired deletes expired idempotency keys no request holds and
// expired inbox message ids, and returns how many of each.
func (s *Store) PurgeExpired(ctx context.Context, pool *pgxpool.Pool) (keys, messages int64, err error) {
	for _, p := range []struct {
		sql string
		n   *int64
	}{{s.sql(sqlPurgeExpiredKeys), &keys}, {s.sql(sqlPurgeExpiredInbox), &messages}} {
		for {
			tag, err := pool.Exec(ctx, p.sql, sweepBatch)
			if err != nil {
				return keys, messages, fmt.Errorf("purge expired keys and message ids: %w", err)
			}
			*p.n += tag.RowsAffected()
			if tag.RowsAffected() < sweepBatch {
				break
			}
		}
	}
	return keys, messages, nil
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

// sqlKeyWindowsClosing raises, once per key window, the operational event
// of each effect of provider $1 not ended whose window ($2 long, its
// margin deducted) closes within $3, when an endpoint listens for it.
const sqlKeyWindowsClosing = `
SELECT count(*) FROM (
	SELECT /*schema*/outboxd_emit('outboxd.effect.key_window_closing', 'side_effect', e.id::text,
		-- What stays the same for the window: raised again, the event
		-- is a duplicate, never a conflict.
		jsonb_build_object('effect_id', e.id, 'event_id', e.source_id, 'kind', e.kind, 'provider', e.provider,
			'tenant', e.tenant, 'closes_at', e.key_window_from + $2::interval),
		md5('outboxd.effect.key_window_closing:' || e.id || ':' || e.key_window_from)::uuid)
	FROM /*schema*/side_effects e
	WHERE /*schema*/outboxd_listened('outboxd.effect.key_window_closing')
		AND e.phase = 'live' AND e.provider = $1 AND e.key_window_from IS NOT NULL
		AND e.key_window_from + $2::interval BETWEEN now() AND now() + $3::interval
) raised`

// keyWindowWorker raises outboxd.effect.key_window_closing for the
// effects of the dispatcher's providers with key windows, on the leader.
type keyWindowWorker struct {
	river.WorkerDefaults[KeyWindowWatchArgs]
	pool    *pgxpool.Pool
	store   *Store
	windows map[string]time.Duration
}

func (w *keyWindowWorker) Work(ctx context.Context, _ *river.Job[KeyWindowWatchArgs]) error {
	for provider, window := range w.windows {
		if err := w.store.RaiseKeyWindowsClosing(ctx, w.pool, provider, window); err != nil {
			return err
		}
	}
	return nil
}

// RaiseKeyWindowsClosing raises outboxd.effect.key_window_closing, once
// per window, for the effects of provider not ended whose key window
// (window, its margin deducted) closes within the hour.
func (s *Store) RaiseKeyWindowsClosing(ctx context.Context, db DB, provider string, window time.Duration) error {
	if _, err := db.Exec(ctx, s.sql(sqlKeyWindowsClosing), provider, window, keyWindowWarning); err != nil {
		return fmt.Errorf("key windows closing (%s): %w", provider, err)
	}
	return nil
}
