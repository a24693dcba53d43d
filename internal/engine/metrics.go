package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/outboxd/outboxd/outboxtype"
)

// noObserver is used when Config.Metrics is nil.
type noObserver struct{}

func (noObserver) Observe(outboxtype.Observation) {}

// StateGauges reads the live and failed effects by state and kind from the
// partial indexes.
func (s *Store) StateGauges(ctx context.Context, db DB) ([]StateGauge, error) {
	rows, err := db.Query(ctx, s.sql(sqlStateGauges))
	if err != nil {
		return nil, fmt.Errorf("state gauges: %w", err)
	}
	defer rows.Close()
	var out []StateGauge
	for rows.Next() {
		var g StateGauge
		var age float64
		if err := rows.Scan(&g.State, &g.Kind, &g.Count, &age); err != nil {
			return nil, fmt.Errorf("state gauges: %w", err)
		}
		g.OldestAge = time.Duration(age * float64(time.Second))
		out = append(out, g)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("state gauges: %w", err)
	}
	return out, nil
}
