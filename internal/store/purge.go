package store

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/outboxd/outboxd/outboxtype"
)

// Purge deletes confirmed, failed and cancelled effects last updated before
// cutoff, with their audit rows, each event with its last effect, then
// events older than cutoff that have no effects and provider drift records
// older than cutoff, in batches so no
// transaction holds many locks. Pending and fired effects are never
// touched. With dryRun it only counts.
func (s *Store) Purge(ctx context.Context, db DB, cutoff time.Time, dryRun bool) (outboxtype.PurgeResult, error) {
	if !dryRun {
		return s.PurgeInBatches(ctx, db, cutoff, outboxtype.PurgeOptions{})
	}
	var res outboxtype.PurgeResult
	{
		if err := db.QueryRow(ctx, s.sql(sqlPurgeCount), cutoff).Scan(&res.Effects); err != nil {
			return res, fmt.Errorf("purge: %w", err)
		}
		err := db.QueryRow(ctx, s.sql(sqlPurgeEventsCount), cutoff).Scan(&res.Events)
		if err != nil {
			return res, fmt.Errorf("purge: %w", err)
		}
		if err := db.QueryRow(ctx, s.sql(sqlPurgeDriftCount), cutoff).Scan(&res.Drift); err != nil {
			return res, fmt.Errorf("purge: %w", err)
		}
		return res, nil
	}
}

// PurgeBatch is how many effects one purge statement deletes by default.
const PurgeBatch = 5000

// PurgeInBatches is Purge with the given pace.
func (s *Store) PurgeInBatches(ctx context.Context, db DB, cutoff time.Time, o outboxtype.PurgeOptions) (outboxtype.PurgeResult, error) {
	batch := cmp.Or(o.Batch, PurgeBatch)
	var res outboxtype.PurgeResult
	for {
		var effects, events int64
		start := time.Now()
		if err := db.QueryRow(ctx, s.sql(sqlPurgeEffects), cutoff, batch).Scan(&effects, &events); err != nil {
			return res, fmt.Errorf("purge: %w", err)
		}
		res.Effects += effects
		res.Events += events
		// Another purge running at the same time takes rows from under
		// this one's batches: only an empty batch ends the loop.
		if effects == 0 {
			break
		}
		if o.Yield {
			select {
			case <-ctx.Done():
				return res, fmt.Errorf("purge: %w", ctx.Err())
			case <-time.After(time.Since(start)):
			}
		}
	}
	for _, p := range []struct {
		sql string
		n   *int64
	}{{s.sql(sqlPurgeEvents), &res.Events}, {s.sql(sqlPurgeDrift), &res.Drift}} {
		for {
			tag, err := db.Exec(ctx, p.sql, cutoff, batch)
			if err != nil {
				return res, fmt.Errorf("purge: %w", err)
			}
			*p.n += tag.RowsAffected()
			if tag.RowsAffected() == 0 {
				break
			}
		}
	}
	return res, nil
}
