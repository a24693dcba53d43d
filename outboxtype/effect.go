package outboxtype

import (
	"encoding/json"
	"time"

	"github.com/google/uuid"
)

// State is a side effect's place in the state machine.
type State string

// The states of side_effects.state.
const (
	StatePending   State = "pending"
	StateFired     State = "fired"
	StateConfirmed State = "confirmed"
	StateFailed    State = "failed"
	StateCancelled State = "cancelled"
)

// Terminal reports whether no worker will ever fire an effect in state s.
func (s State) Terminal() bool {
	return s == StateConfirmed || s == StateFailed || s == StateCancelled
}

// Effect is a side_effects row.
type Effect struct {
	ID       uuid.UUID `db:"id" json:"id"`
	SourceID uuid.UUID `db:"source_id" json:"source_id"`
	Kind     string    `db:"kind" json:"kind"`
	Provider string    `db:"provider" json:"provider"`
	// IdempotencyKey is derived from SourceID and Kind (Key), not stored.
	IdempotencyKey string          `db:"-" json:"idempotency_key"`
	Payload        json.RawMessage `db:"payload" json:"payload"`
	State          State           `db:"state" json:"state"`
	Attempts       int             `db:"attempts" json:"attempts"`
	LastError      *string         `db:"last_error" json:"last_error"`
	ProviderRef    *string         `db:"provider_ref" json:"provider_ref"`
	Replayed       bool            `db:"replayed" json:"replayed"`
	NextAttemptAt  *time.Time      `db:"next_attempt_at" json:"next_attempt_at"`
	CreatedAt      time.Time       `db:"created_at" json:"created_at"`
	UpdatedAt      time.Time       `db:"updated_at" json:"updated_at"`
	FiredAt        *time.Time      `db:"fired_at" json:"fired_at"`
	FirstFiredAt   *time.Time      `db:"first_fired_at" json:"first_fired_at"`
	ConfirmedAt    *time.Time      `db:"confirmed_at" json:"confirmed_at"`
	// InDoubt is true while an earlier request may have reached the provider
	// without an acknowledgement. It survives failed, cancelled and
	// redrives: every later fire applies the in-doubt policy.
	InDoubt bool `db:"in_doubt" json:"in_doubt"`
	// TotalAttempts counts fires over the effect's life; Attempts counts
	// those since the last redrive.
	TotalAttempts int `db:"total_attempts" json:"total_attempts"`
	// Redrives counts operator redrives.
	Redrives int `db:"redrives" json:"redrives"`
	// KeyWindowFrom starts the provider's key window: the first request
	// that carried the key. Only a forced retry, after checking the
	// provider, restarts it.
	KeyWindowFrom *time.Time `db:"key_window_from" json:"key_window_from"`
	// AcknowledgedAt is when an operator acknowledged a failed effect as
	// reviewed and correctly failed; it is then out of "stuck" and the
	// failed gauge. A redrive clears it.
	AcknowledgedAt *time.Time `db:"acknowledged_at" json:"acknowledged_at"`
	// NotBefore is the earliest time the effect may fire (nil: at once),
	// as enqueued; its key window still starts at its first request.
	NotBefore *time.Time `db:"not_before" json:"not_before"`
	// OrderingKey, when set, orders the effect after every earlier effect
	// with the same key; OrderingSeq is its position there (a later
	// commit has a higher one).
	OrderingKey *string `db:"ordering_key" json:"ordering_key,omitempty"`
	OrderingSeq *int64  `db:"ordering_seq" json:"ordering_seq,omitempty"`
	// OrderingSkipFailed is the effect's policy when it fails: true lets
	// the effects after it on its key go on; false (the default) holds
	// them until an operator acts.
	OrderingSkipFailed bool `db:"ordering_skip_failed" json:"ordering_skip_failed,omitempty"`
	// OrderingReleasedAt is when an operator released the effects after it
	// on its key, whatever becomes of it.
	OrderingReleasedAt *time.Time `db:"ordering_released_at" json:"ordering_released_at,omitempty"`
	// WaitingFor names the rate limit the effect waits for (its key was
	// paused by a 429, or had no token left when it was due), since
	// WaitingSince; nil when it does not wait. Waiting is not an attempt:
	// it spends none of the retry budget. A claim clears both.
	WaitingFor   *string    `db:"waiting_for" json:"waiting_for,omitempty"`
	WaitingSince *time.Time `db:"waiting_since" json:"waiting_since,omitempty"`
	// Tenant is the tenant the effect was enqueued for, if any: its jobs
	// are given out in turn with other tenants' (fair shares).
	Tenant *string `db:"tenant" json:"tenant,omitempty"`
	// ReplayID is the paced replay that last retried the effect: each of
	// its requests since keeps the replay's pace (limit key replay:<id>).
	ReplayID *int64 `db:"replay_id" json:"replay_id,omitempty"`
}

// Failure reasons recorded in last_error when an effect ends failed.
const (
	ReasonKeyWindow = "key window expired: reconcile at provider"
	ReasonInDoubt   = "in doubt: not re-sent"
)

// ReasonUnqueueable prefixes the reason of an effect no job can be
// inserted for.
const ReasonUnqueueable = "cannot be dispatched"
