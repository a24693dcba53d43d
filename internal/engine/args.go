package engine

import (
	"time"

	"github.com/google/uuid"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// JobKind is the River job kind that dispatches one side effect.
const JobKind = "outboxd.dispatch"

// RiverMaxAttempts is River's own attempt limit for dispatch jobs. It is set
// well above RetryPolicy.MaxAttempts: outboxd decides when an effect has
// failed; River's limit only backstops crashes that never reach that
// decision (a discarded job's effect is picked up again by the sweeper).
const RiverMaxAttempts = 100

// DispatchArgs are the arguments of a dispatch job.
type DispatchArgs struct {
	EffectID uuid.UUID `json:"effect_id"`
}

// Kind implements river.JobArgs.
func (DispatchArgs) Kind() string { return JobKind }

// uniqueStates is River's default unique set without completed, cancelled and
// discarded: a live job for an effect blocks a second one, while a finished
// job does not block the new job an operator's redrive inserts.
var uniqueStates = []rivertype.JobState{
	rivertype.JobStateAvailable,
	rivertype.JobStatePending,
	rivertype.JobStateRetryable,
	rivertype.JobStateRunning,
	rivertype.JobStateScheduled,
}

// JobParams returns the River insert parameters for dispatching effect id of
// the given provider: the provider's queue, unique by effect while live,
// scheduled for notBefore when the effect must wait (nil: at once).
func JobParams(effectID uuid.UUID, provider string, notBefore *time.Time) river.InsertManyParams {
	opts := &river.InsertOpts{
		Queue:       provider,
		MaxAttempts: RiverMaxAttempts,
		UniqueOpts:  river.UniqueOpts{ByArgs: true, ByState: uniqueStates},
	}
	if notBefore != nil {
		opts.ScheduledAt = *notBefore
	}
	return river.InsertManyParams{Args: DispatchArgs{EffectID: effectID}, InsertOpts: opts}
}

// actorOutboxd is the audit actor of what the dispatcher itself records.
const actorOutboxd = "outboxd"

// latest is the later of a and b.
func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
