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
// cutoff, with their audit rows, then events older than cutoff left without
// effects, in batches so no transaction holds many locks. Pending and fired
// effects are never touched. With dryRun it only counts.
func (s *Store) Purge(ctx context.Context, db DB, cutoff time.Time, dryRun bool) (PurgeResult, error) {
	const batch = 5000
	var res PurgeResult
	if dryRun {
		if err := db.QueryRow(ctx, s.q.purgeCount, cutoff).Scan(&res.Effects); err != nil {
			return res, fmt.Errorf("purge: %w", err)
		}
		err := db.QueryRow(ctx, s.q.purgeEventsCount, cutoff).Scan(&res.Events)
		if err != nil {
			return res, fmt.Errorf("purge: %w", err)
		}
		return res, nil
	}
	for _, step := range []struct {
		sql string
		n   *int64
	}{{s.q.purgeEffects, &res.Effects}, {s.q.purgeEvents, &res.Events}} {
		for {
			tag, err := db.Exec(ctx, step.sql, cutoff, batch)
			if err != nil {
				return res, fmt.Errorf("purge: %w", err)
			}
			*step.n += tag.RowsAffected()
			if tag.RowsAffected() < batch {
				break
			}
		}
	}
	return res, nil
}
