package store

import (
	"context"
	"fmt"
	"time"

	"github.com/outboxd/outboxd/outboxtype"
)

// BlockedChains is what waits on ordering keys: how many keys have an
// effect blocked behind an earlier one, how many effects are blocked, and
// how old the oldest of them is.
type BlockedChains = outboxtype.BlockedChains

// BlockedChains counts the effects blocked behind an earlier effect of
// their ordering key, and their keys.
func (s *Store) BlockedChains(ctx context.Context, db DB) (BlockedChains, error) {
	var b BlockedChains
	var age float64
	if err := db.QueryRow(ctx, s.sql(sqlBlockedChains)).Scan(&b.Keys, &b.Effects, &age); err != nil {
		return b, fmt.Errorf("blocked chains: %w", err)
	}
	b.OldestAge = time.Duration(age * float64(time.Second))
	return b, nil
}

// StateGauges reads the live and failed effects by state and kind from the
// partial indexes, with the effects events still carry as pending.
func (s *Store) StateGauges(ctx context.Context, db DB) ([]outboxtype.StateGauge, error) {
	rows, err := db.Query(ctx, s.sql(sqlStateGauges))
	if err != nil {
		return nil, fmt.Errorf("state gauges: %w", err)
	}
	defer rows.Close()
	var out []outboxtype.StateGauge
	for rows.Next() {
		var g outboxtype.StateGauge
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
