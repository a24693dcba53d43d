package engine

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/outboxd/outboxd/outboxtype"
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

// StuckStatement is the stuck list's statement, for plan checks.
func StuckStatement(s *Store) string { return s.sql(sqlStuck) }

// JobInStatement is the lookup of an effect's newest job in some states.
func JobInStatement(s *Store) string { return s.sql(sqlJobIn) }

// FewJobsPlan runs fn with the planner settings of the reads that look up
// a page of effects' jobs.
func FewJobsPlan(ctx context.Context, db DB, fn func(DB) error) error {
	return fewJobsPlan(ctx, db, fn)
}

// ClaimFirstMany runs d's shared first claim of ids, as its workers' claims
// do when they meet in one statement.
func ClaimFirstMany(ctx context.Context, d *Dispatcher, ids []uuid.UUID) ([]*outboxtype.Effect, error) {
	return d.worker.claimFirstMany(ctx, ids)
}

// RetryTimeOf is the retry time a worker gives River for an effect whose
// last run chose stored.
func RetryTimeOf(stored time.Time) time.Time {
	w := &Worker{}
	id := uuid.New()
	w.retryAt.Store(id, stored)
	return w.retryTime(id)
}

// Snooze is snooze, for tests.
var Snooze = snooze
