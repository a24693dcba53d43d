package outboxtype

import (
	"time"

	"github.com/outboxd/outboxd/providers"
)

// Observer is told what outboxd does, one Observation at a time: the
// enqueue side (Enqueued, KeyRequest), the dispatcher's workers
// (Transitioned, ProviderCalled) and the provider-event endpoints
// (ProviderEventApplied). One shape everywhere, so that one value can
// observe all of it; packages outboxmetrics and dispatchmetrics implement
// it for Prometheus. Calls come from many goroutines at once and must not
// block; an Observer ignores the observations it has no use for.
type Observer interface {
	Observe(Observation)
}

// Observation is one of Enqueued, KeyRequest, Transitioned, ProviderCalled
// and ProviderEventApplied.
type Observation interface{ observation() }

// Enqueued is one outbox.Enqueue call and its Result: "new" (wrote to the
// caller's transaction, committed or not), "duplicate" (a replay, nothing
// written), "conflict" or "invalid".
type Enqueued struct{ Result string }

// KeyRequest is one request through the Idempotency-Key middleware and its
// Outcome (an idempotency.Outcome: executed, replayed, in_progress, …).
type KeyRequest struct{ Outcome string }

// Transitioned is a transition a worker made: Effect, as it was before, is
// now in state To. Only transitions that happened are told.
type Transitioned struct {
	Effect *Effect
	To     State
}

// ProviderCalled is one provider call for Effect: how long it took, its
// error (nil: the provider acknowledged it) and what the provider said.
type ProviderCalled struct {
	Effect   *Effect
	Duration time.Duration
	Err      error
	Result   providers.Result
}

// ProviderEventApplied is a provider event, told after its delivery
// committed, and what it did to the effect it names.
type ProviderEventApplied struct {
	Event  providers.EventReport
	Result EventResult
}

func (Enqueued) observation()             {}
func (KeyRequest) observation()           {}
func (Transitioned) observation()         {}
func (ProviderCalled) observation()       {}
func (ProviderEventApplied) observation() {}
