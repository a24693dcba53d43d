package engine

import (
	"context"
	"time"
)

// SetBeforeConfirm injects a failure point between the provider's
// acknowledgement and the confirming transaction.
func SetBeforeConfirm(d *Dispatcher, f func(ctx context.Context) error) { d.worker.beforeConfirm = f }

// ConfirmFailedNote is confirmFailedNote, for tests.
var ConfirmFailedNote = confirmFailedNote

// SetReplayTiming makes d's replays take a step every step and run for run
// per job execution.
func SetReplayTiming(d *Dispatcher, step, run time.Duration) {
	d.replays.step, d.replays.run = step, run
}

// FeedTenants runs d's tenants' feeder once and returns how many effects
// it gave jobs.
func FeedTenants(ctx context.Context, d *Dispatcher) (int, error) {
	n, _, err := d.intake.feedTenants(ctx)
	return n, err
}

// SweepStatement is the sweeper's query in s's schema.
func SweepStatement(s *Store) string { return s.sql(sqlSweep) }
