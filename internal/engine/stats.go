package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Stats summarises the effects table.
type Stats struct {
	Window time.Duration `json:"-"`
	// WindowSeconds is Window in seconds, for scripts.
	WindowSeconds float64 `json:"window_seconds"`
	// Counts holds live and failed effects in full, confirmed and cancelled
	// ones updated within Window.
	Counts        []StateKindCount `json:"counts"`
	OldestPending *time.Time       `json:"oldest_pending_created_at"`
	OldestFired   *time.Time       `json:"oldest_fired_at"`
	Attempts      []AttemptsBucket `json:"attempts_of_confirmed"`
	Confirmed     int64            `json:"confirmed_in_window"`
	LatencyP50    float64          `json:"confirm_latency_p50_seconds"`
	LatencyP95    float64          `json:"confirm_latency_p95_seconds"`
	LatencyP99    float64          `json:"confirm_latency_p99_seconds"`
	// ConfirmedByHand counts effects confirmed by an operator in the
	// window; they are not in the latency percentiles.
	ConfirmedByHand int64     `json:"confirmed_by_hand_in_window"`
	CollectedAt     time.Time `json:"collected_at"`
}

// StateKindCount is the number of effects of one kind in one state.
type StateKindCount struct {
	State State  `json:"state"`
	Kind  string `json:"kind"`
	Count int64  `json:"count"`
}

// AttemptsBucket counts confirmed effects by the attempts they took.
type AttemptsBucket struct {
	Attempts string `json:"attempts"`
	Count    int64  `json:"count"`
}

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
	rows, err := db.Query(ctx, s.q.statsCounts, since)
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
	if err := db.QueryRow(ctx, s.q.statsOldest).Scan(&st.OldestPending, &st.OldestFired); err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	rows, err = db.Query(ctx, s.q.statsAttempts, since)
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
	if err := db.QueryRow(ctx, s.q.statsByHand, since).Scan(&st.ConfirmedByHand); err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	if err := db.QueryRow(ctx, s.q.statsLatency, since).Scan(&st.Confirmed, &st.LatencyP50, &st.LatencyP95, &st.LatencyP99); err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	return st, nil
}
