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

// BatchJobKind is the River job kind that makes the first attempts of
// several effects of one provider.
const BatchJobKind = "outboxd.dispatch_batch"

// batchJobSize bounds how many effects one batch job carries.
var batchJobSize = 100

// BatchArgs are the arguments of a batch job: the effects it makes the
// first attempt of, all of its queue's provider.
type BatchArgs struct {
	EffectIDs []uuid.UUID `json:"effect_ids"`
}

// Kind implements river.JobArgs.
func (BatchArgs) Kind() string { return BatchJobKind }

// batchParams returns the River insert parameters for the first attempts of
// ids, all of provider: one job in the provider's queue.
func batchParams(provider string, ids []uuid.UUID) river.InsertManyParams {
	return river.InsertManyParams{Args: BatchArgs{EffectIDs: ids}, InsertOpts: &river.InsertOpts{
		Queue: provider, MaxAttempts: RiverMaxAttempts,
	}}
}

// dispatchParams returns the jobs that dispatch ids, all of provider and
// due now: one batch job per batchJobSize effects, and a job of its own
// for an effect left alone.
func dispatchParams(provider string, ids []uuid.UUID) []river.InsertManyParams {
	var params []river.InsertManyParams
	for len(ids) > 0 {
		n := min(len(ids), batchJobSize)
		if n == 1 {
			params = append(params, JobParams(ids[0], provider, nil))
		} else {
			params = append(params, batchParams(provider, ids[:n:n]))
		}
		ids = ids[n:]
	}
	return params
}

// dueNow collects effects due now by provider, for dispatchParams.
type dueNow struct {
	ids       map[string][]uuid.UUID
	providers []string // in the order they came
}

func (d *dueNow) add(provider string, id uuid.UUID) {
	if d.ids == nil {
		d.ids = map[string][]uuid.UUID{}
	}
	if _, ok := d.ids[provider]; !ok {
		d.providers = append(d.providers, provider)
	}
	d.ids[provider] = append(d.ids[provider], id)
}

// params are the jobs that dispatch the effects collected.
func (d *dueNow) params() []river.InsertManyParams {
	var params []river.InsertManyParams
	for _, p := range d.providers {
		params = append(params, dispatchParams(p, d.ids[p])...)
	}
	return params
}
