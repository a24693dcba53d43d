package engine

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/outboxd/outboxd/internal/store"
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

// NextInChains and WakeChains are the chains' wakes, for tests.
var (
	NextInChains = nextInChains
	WakeChains   = wakeChains
)

// EffectiveRate is the rate r's key may take at r.Now.
func EffectiveRate(r *store.LimitRow) float64 { return limitRow{r}.Effective() }

// Climb is how fast r's key climbs back after its 429s, and to what.
func Climb(r *store.LimitRow) (step, ceiling float64) { return limitRow{r}.Climb() }
