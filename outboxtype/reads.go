package outboxtype

import (
	"encoding/json"
	"time"

	"github.com/google/uuid"
)

// Filter selects effects for listing and bulk actions. Zero fields match
// everything.
type Filter struct {
	States   []State
	Kind     string
	Provider string
	Source   uuid.UUID
	// Since and Before bound created_at: Since <= created_at < Before.
	Since  time.Time
	Before time.Time
	// After is the keyset cursor: the last effect of the previous page.
	After *Effect
	Limit int
}

// StuckEffect is an effect that is not progressing, with its live River
// job, if it has one.
type StuckEffect struct {
	*Effect
	JobID          *int64     `json:"job_id"`
	JobState       *string    `json:"job_state"`
	JobScheduledAt *time.Time `json:"job_scheduled_at"`
	// JobHeldBy is the dispatcher (outboxctl dispatchers' ID) that River
	// says is working the job, while it is running.
	JobHeldBy *string `json:"job_held_by,omitempty"`
	// BlockedBehind is the first earlier effect of its ordering key that
	// has not ended, when there is one: the effect waits for it.
	BlockedBehind *uuid.UUID `json:"blocked_behind,omitempty"`
}

// StuckGroup is one cause of stuck effects: those of one state, kind,
// provider and destination (a webhook's host) that share a cause (the
// first words of their last error, or "no error" for effects that never
// got an answer), with how many there are, when one of them last changed
// (Newest), when the group began (Oldest: the earliest first attempt, or
// due time, of its live effects; the earliest failure of its failed ones)
// and the one that changed last.
type StuckGroup struct {
	State    State     `json:"state"`
	Kind     string    `json:"kind"`
	Provider string    `json:"provider"`
	Host     string    `json:"host,omitempty"`
	Cause    string    `json:"cause"`
	Count    int64     `json:"count"`
	Newest   time.Time `json:"newest"`
	Oldest   time.Time `json:"oldest"`
	Example  uuid.UUID `json:"example"`
}

// BlockedChains is what waits on ordering keys: the keys that have an
// effect blocked behind an earlier one, those effects, and the age of the
// oldest of them.
type BlockedChains struct {
	Keys      int           `json:"keys"`
	Effects   int           `json:"effects"`
	OldestAge time.Duration `json:"oldest_age"`
}

// Event is an outbox_events row.
type Event struct {
	ID            uuid.UUID       `json:"id"`
	AggregateType string          `json:"aggregate_type"`
	AggregateID   string          `json:"aggregate_id"`
	Type          string          `json:"event_type"`
	Payload       json.RawMessage `json:"payload"`
	CreatedAt     time.Time       `json:"created_at"`
}

// EventFilter selects events for Events; zero fields match all.
type EventFilter struct {
	Type          string
	AggregateType string
	AggregateID   string
	// MissingKind keeps events that have no effect of this kind.
	MissingKind string
	Since       time.Time
	ID          uuid.UUID
	Limit       int
}

// EventEffects is an event with its effects' kinds and states.
type EventEffects struct {
	Event
	Effects []EventEffect `json:"effects"`
}

// EventEffect is one effect of an event, as Events lists it.
type EventEffect struct {
	ID    uuid.UUID `json:"id"`
	Kind  string    `json:"kind"`
	State State     `json:"state"`
}

// Job is a River dispatch job of an effect.
type Job struct {
	ID          int64      `json:"id"`
	State       string     `json:"state"`
	Queue       string     `json:"queue"`
	Attempt     int        `json:"attempt"`
	MaxAttempts int        `json:"max_attempts"`
	CreatedAt   time.Time  `json:"created_at"`
	ScheduledAt time.Time  `json:"scheduled_at"`
	FinalizedAt *time.Time `json:"finalized_at"`
	Errors      []JobError `json:"errors"`
	// HeldBy is the dispatcher working a running job (outboxctl
	// dispatchers' ID).
	HeldBy *string `json:"held_by,omitempty"`
}

// JobError is one failed attempt of a River job, as River records it in
// the job's errors (rivertype.AttemptError's fields and JSON).
type JobError struct {
	// At is when the attempt failed.
	At time.Time `json:"at"`
	// Attempt is the job's attempt it failed on.
	Attempt int `json:"attempt"`
	// Error is the error the attempt returned, or the panic's value.
	Error string `json:"error"`
	// Trace is the stack trace of a panic; empty otherwise.
	Trace string `json:"trace"`
}

// AuditEntry is one recorded operator action.
type AuditEntry struct {
	ID        int64           `json:"id"`
	EffectID  uuid.UUID       `json:"effect_id"`
	Action    string          `json:"action"`
	Actor     string          `json:"actor"`
	Reason    string          `json:"reason"`
	FromState string          `json:"from_state"`
	ToState   string          `json:"to_state"`
	Details   json.RawMessage `json:"details"`
	CreatedAt time.Time       `json:"created_at"`
}

// Attempt is one failed attempt of an effect, as outboxctl show lists it.
type Attempt struct {
	EffectID  uuid.UUID     `json:"effect_id"`
	Attempt   int           `json:"attempt"`
	StartedAt time.Time     `json:"started_at"`
	Duration  time.Duration `json:"duration_ns"`
	// Outcome is the error class: retryable, in_doubt or permanent.
	Outcome string `json:"outcome"`
	Error   string `json:"error"`
	// Host is the destination the provider called, when it says.
	Host string `json:"host"`
}

// RunningJobs is how many dispatch jobs River marks running under one
// dispatcher (its record ID; "" for a client outboxd did not record), and
// since when the oldest of them.
type RunningJobs struct {
	HeldBy string    `json:"held_by"`
	Jobs   int       `json:"jobs"`
	Oldest time.Time `json:"oldest_attempted_at"`
}

// DispatcherRecord is what an outboxd run recorded about itself: where it
// runs and the settings it dispatches with (never secrets).
type DispatcherRecord struct {
	ID        string          `json:"id"`
	Host      string          `json:"host"`
	PID       int             `json:"pid"`
	StartedAt time.Time       `json:"started_at"`
	SeenAt    time.Time       `json:"seen_at"`
	StoppedAt *time.Time      `json:"stopped_at"`
	Settings  json.RawMessage `json:"settings"`
	// Destinations are what its per-destination gates held back at its
	// last heartbeat (every 30s): requests in flight and waiting, failures
	// in a row, open breakers.
	Destinations []DestinationState `json:"destinations"`
}

// CarriedEffect is an effect its event still carries
// (outbox.EffectsByDispatcher): no dispatcher has taken the event and
// written the effect's row yet.
type CarriedEffect struct {
	ID      uuid.UUID `json:"id"`
	EventID uuid.UUID `json:"event_id"`
	Kind    string    `json:"kind"`
	// Since is when its event was enqueued.
	Since time.Time `json:"since"`
}
