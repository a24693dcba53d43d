package engine

import (
	"context"
	"fmt"
	"time"
)

// PurgeResult counts what a purge deleted (or would delete).
type PurgeResult struct {
	Effects int64 `json:"effects"`
	Events  int64 `json:"events"`
}

// Purge deletes confirmed, failed and cancelled effects last updated before
// cutoff, with their audit rows, each event with its last effect, then
// events older than cutoff that have no effects, in batches so no
// transaction holds many locks. Pending and fired effects are never
// touched. With dryRun it only counts.
func (s *Store) Purge(ctx context.Context, db DB, cutoff time.Time, dryRun bool) (PurgeResult, error) {
	if !dryRun {
		return s.PurgeInBatches(ctx, db, cutoff, purgeBatch)
	}
	var res PurgeResult
	{
		if err := db.QueryRow(ctx, s.q.purgeCount, cutoff).Scan(&res.Effects); err != nil {
			return res, fmt.Errorf("purge: %w", err)
		}
		err := db.QueryRow(ctx, s.q.purgeEventsCount, cutoff).Scan(&res.Events)
		if err != nil {
			return res, fmt.Errorf("purge: %w", err)
		}
		return res, nil
	}
}

// purgeBatch is how many effects one purge statement deletes.
const purgeBatch = 5000

// PurgeInBatches is Purge with batches of the given size.
func (s *Store) PurgeInBatches(ctx context.Context, db DB, cutoff time.Time, batch int) (PurgeResult, error) {
	var res PurgeResult
	for {
		var effects, events int64
		if err := db.QueryRow(ctx, s.q.purgeEffects, cutoff, batch).Scan(&effects, &events); err != nil {
			return res, fmt.Errorf("purge: %w", err)
		}
		res.Effects += effects
		res.Events += events
		// Another purge running at the same time takes rows from under
		// this one's batches: only an empty batch ends the loop.
		if effects == 0 {
			break
		}
	}
	for {
		tag, err := db.Exec(ctx, s.q.purgeEvents, cutoff, batch)
		if err != nil {
			return res, fmt.Errorf("purge: %w", err)
		}
		res.Events += tag.RowsAffected()
		if tag.RowsAffected() == 0 {
			return res, nil
		}
	}
}
