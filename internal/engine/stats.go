package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Stats computes Stats over the last window (zero: every row kept).
func (s *Store) Stats(ctx context.Context, db DB, window time.Duration) (*Stats, error) {
	var now time.Time
	if err := db.QueryRow(ctx, "SELECT now()").Scan(&now); err != nil {
		return nil, err
	}
	since := now.Add(-window)
	if window == 0 {
		since = time.Time{}
	}
	st := &Stats{Window: window, WindowSeconds: window.Seconds(), CollectedAt: now}
	rows, err := db.Query(ctx, s.sql(sqlStatsCounts), since)
	if err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	st.Counts, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (StateKindCount, error) {
		var c StateKindCount
		err := r.Scan(&c.State, &c.Kind, &c.Count)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	if err := db.QueryRow(ctx, s.sql(sqlStatsOldest)).Scan(&st.OldestPending, &st.OldestFired); err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	rows, err = db.Query(ctx, s.sql(sqlStatsAttempts), since)
	if err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	st.Attempts, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (AttemptsBucket, error) {
		var b AttemptsBucket
		err := r.Scan(&b.Attempts, &b.Count)
		return b, err
	})
	if err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	if err := db.QueryRow(ctx, s.sql(sqlStatsByHand), since).Scan(&st.ConfirmedByHand); err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	if err := db.QueryRow(ctx, s.sql(sqlStatsLatency), since).Scan(&st.Confirmed, &st.LatencyP50, &st.LatencyP95, &st.LatencyP99); err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	return st, nil
}
