package outboxtype

import "time"

// Stats summarises the effects table.
type Stats struct {
	Window time.Duration `json:"-"`
	// WindowSeconds is Window in seconds, for scripts.
	WindowSeconds float64 `json:"window_seconds"`
	// Counts holds live and failed effects in full, confirmed and cancelled
	// ones updated within Window.
	Counts        []StateKindCount `json:"counts"`
	OldestPending *time.Time       `json:"oldest_pending_created_at"`
	OldestFired   *time.Time       `json:"oldest_fired_at"`
	Attempts      []AttemptsBucket `json:"attempts_of_confirmed"`
	Confirmed     int64            `json:"confirmed_in_window"`
	LatencyP50    float64          `json:"confirm_latency_p50_seconds"`
	LatencyP95    float64          `json:"confirm_latency_p95_seconds"`
	LatencyP99    float64          `json:"confirm_latency_p99_seconds"`
	// LatencyEstimated is true when the percentiles are estimates from
	// the per-minute summary's histogram (within 10%), for a window most
	// of which it holds; false when they were computed from every effect.
	LatencyEstimated bool `json:"confirm_latency_estimated"`
	// ConfirmedByHand counts effects confirmed by an operator in the
	// window; they are not in the latency percentiles.
	ConfirmedByHand int64     `json:"confirmed_by_hand_in_window"`
	CollectedAt     time.Time `json:"collected_at"`
}

// StateKindCount is the number of effects of one kind in one state.
type StateKindCount struct {
	State State  `json:"state"`
	Kind  string `json:"kind"`
	Count int64  `json:"count"`
}

// AttemptsBucket counts confirmed effects by the attempts they took.
type AttemptsBucket struct {
	Attempts string `json:"attempts"`
	Count    int64  `json:"count"`
}

// ReasonCount is how many unacknowledged failed effects of a kind share a
// failure reason (the last error without its class, up to the first ": ").
type ReasonCount struct {
	Kind   string `json:"kind"`
	Reason string `json:"reason"`
	Count  int64  `json:"count"`
}

// MinuteCount is how many effects were confirmed and failed in one minute.
type MinuteCount struct {
	Minute    time.Time `json:"minute"`
	Confirmed int64     `json:"confirmed"`
	Failed    int64     `json:"failed"`
}

// StateGauge is the number of effects of one kind in a live or failed
// state, and the age of the oldest: since creation for pending and failed,
// since the last fire for fired.
type StateGauge struct {
	State     State
	Kind      string
	Count     int64
	OldestAge time.Duration
}
