package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/outboxd/outboxd/providers"
)

// Observer receives what the dispatcher measures; package dispatchmetrics
// implements it with Prometheus. Calls are made from workers concurrently.
type Observer interface {
	// Transition reports a transition a worker made (only those that
	// happened).
	Transition(e *Effect, to State)
	// ProviderCall reports one provider call, its duration and outcome.
	ProviderCall(e *Effect, d time.Duration, err error, res providers.Result)
}

// noObserver is used when Config.Metrics is nil.
type noObserver struct{}

func (noObserver) Transition(*Effect, State)                                    {}
func (noObserver) ProviderCall(*Effect, time.Duration, error, providers.Result) {}

// StateGauge is the number of effects of one kind in a live or failed
// state, and the age of the oldest: since creation for pending and failed,
// since the last fire for fired.
type StateGauge struct {
	State     State
	Kind      string
	Count     int64
	OldestAge time.Duration
}

// StateGauges reads the live and failed effects by state and kind from the
// partial indexes.
func (s *Store) StateGauges(ctx context.Context, db DB) ([]StateGauge, error) {
	rows, err := db.Query(ctx, s.q.stateGauges)
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
