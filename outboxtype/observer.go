package outboxtype

import (
	"time"
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
	Result   Result
}

// ProviderEventApplied is a provider event, told after its delivery
// committed, and what it did to the effect it names.
type ProviderEventApplied struct {
	Event  EventReport
	Result EventResult
}

// Throttled is a provider's 429 for Effect: limit Key is paused for
// every replica until Until, and the effect waits, its attempt not counted.
type Throttled struct {
	Effect *Effect
	Key    string
	Until  time.Time
}

// LimitState is what one dispatcher process knows of one rate limit key
// now: the rate set at its start (nil: none), the rate the key may take
// (as lowered by 429s; 0 when it has none), the end of a 429's pause, and
// the workers of this process waiting for a token.
type LimitState struct {
	Key         string
	Configured  *float64
	Rate        float64
	PausedUntil time.Time
	Waiting     int
	// Share is the part of the key's times this process leased lately,
	// over every process that shares it (0: not known yet).
	Share float64
	// FallingBack: the shared limits cannot be reached, and this process
	// keeps to its Share of the rate meanwhile.
	FallingBack bool
}

// LimitReport is one rate limit key as every replica shares it: its rate
// and who set it, the rate it may take now (lowered by 429s; 0 when it has
// none), a 429's pause, the 429s and requests it let through since it was
// created (all replicas: their rate is the key's achieved rate), and the
// effects waiting for it.
type LimitReport struct {
	Key        string   `json:"key"`
	Rate       *float64 `json:"rate"`
	RateSource string   `json:"rate_source"`
	// InAnySecond: Rate is held as at most that many requests in any
	// second (no burst), not as an average.
	InAnySecond    bool       `json:"in_any_second,omitempty"`
	CurrentRate    float64    `json:"current_rate"`
	PausedUntil    *time.Time `json:"paused_until,omitempty"`
	Throttles      int64      `json:"throttles"`
	LastThrottleAt *time.Time `json:"last_throttle_at,omitempty"`
	Granted        int64      `json:"granted"`
	WaitingEffects int64      `json:"waiting_effects"`
	WaitingSince   *time.Time `json:"waiting_since,omitempty"`
	// OldestKeyWindowFrom is the earliest key window among the waiting
	// effects (the first request that carried its key), nil if none was
	// sent yet: with the provider's key window it says when the first of
	// them would fail for reconciliation if it kept waiting (KeyWindowCloses).
	OldestKeyWindowFrom *time.Time `json:"oldest_key_window_from,omitempty"`
}

// Holding reports whether the key holds anything back at now: it is
// paused, or effects wait for it. These are the keys an operator's "lift
// every hold" resumes.
func (l LimitReport) Holding(now time.Time) bool {
	return l.WaitingEffects > 0 || l.PausedUntil != nil && l.PausedUntil.After(now)
}

// KeyWindowCloses is when the key window of the waiting effect that
// first fired earliest closes, for a provider whose window (minus margin)
// is window; zero when none of them fired or the provider has none.
func (l LimitReport) KeyWindowCloses(window time.Duration) time.Time {
	if l.OldestKeyWindowFrom == nil || window <= 0 {
		return time.Time{}
	}
	return l.OldestKeyWindowFrom.Add(window)
}

// LimitChange is one change of a limit's rate at run time, as audited.
type LimitChange struct {
	Key      string   `json:"key"`
	Actor    string   `json:"actor"`
	Reason   string   `json:"reason"`
	FromRate *float64 `json:"from_rate"`
	ToRate   *float64 `json:"to_rate"`
	Resumed  bool     `json:"resumed"`
	// InAnySecond: the rate was set to be held as at most that many
	// requests in any second, not as an average.
	InAnySecond bool      `json:"in_any_second,omitempty"`
	At          time.Time `json:"at"`
}

func (Throttled) observation()            {}
func (Enqueued) observation()             {}
func (KeyRequest) observation()           {}
func (Transitioned) observation()         {}
func (ProviderCalled) observation()       {}
func (ProviderEventApplied) observation() {}
