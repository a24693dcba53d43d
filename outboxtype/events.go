package outboxtype

import (
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
)

// EventResult is what one provider event did.
type EventResult struct {
	// Effect is the effect the event's key matches, as it was before.
	Effect *Effect
	// Confirmed says the event confirmed the effect.
	Confirmed bool
	// Drift is the drift reasons found.
	Drift []string
	// DriftNotRecorded counts those of Drift not recorded as rows: the
	// delivery had reached its limit (see sideeffects.WithDriftLimit).
	DriftNotRecorded int
}

// DriftFilter selects drift records; zero fields match all.
type DriftFilter struct {
	Since    time.Time
	Reason   string
	EffectID *uuid.UUID
	Limit    int
	// Acknowledged keeps acknowledged records too (always, with EffectID).
	Acknowledged bool
}

// DriftRecord is one disagreement between outboxd and a provider.
type DriftRecord struct {
	ID             int64      `json:"id"`
	Reason         string     `json:"reason"`
	Provider       string     `json:"provider"`
	Kind           string     `json:"kind,omitempty"`
	EffectID       *uuid.UUID `json:"effect_id,omitempty"`
	EffectState    string     `json:"effect_state,omitempty"`
	IdempotencyKey string     `json:"idempotency_key"`
	EventID        string     `json:"event_id"`
	EventType      string     `json:"event_type"`
	ObjectID       string     `json:"object_id,omitempty"`
	Check          string     `json:"check"`
	CreatedAt      time.Time  `json:"created_at"`
	// Details are the provider's object as the event showed it: status,
	// amount (smallest unit), currency, detail, event_at.
	Details map[string]any `json:"details"`
	// AcknowledgedAt, By and Reason record an operator's review.
	AcknowledgedAt *time.Time `json:"acknowledged_at,omitempty"`
	AcknowledgedBy *string    `json:"acknowledged_by,omitempty"`
	AckReason      *string    `json:"ack_reason,omitempty"`
	// EffectStateNow and EffectRefNow are the effect's state and provider
	// reference now (EffectState is its state when the drift was found).
	EffectStateNow *string `json:"effect_state_now,omitempty"`
	EffectRefNow   *string `json:"effect_ref_now,omitempty"`
}

// Delivery is a mail's delivery status from the provider's events.
type Delivery struct {
	Status    string    `json:"status"`
	Detail    string    `json:"detail,omitempty"`
	EventID   string    `json:"event_id"`
	EventAt   time.Time `json:"event_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Drift reasons.
const (
	// DriftUnknownKey: an event carries an outboxd key no effect has.
	DriftUnknownKey = "unknown_key"
	// DriftActedWhileFailed: the provider acted on an effect outboxd holds as
	// failed (not in doubt: outboxd believed nothing was applied).
	DriftActedWhileFailed = "acted_while_failed"
	// DriftActedWhileCancelled: the provider acted on a cancelled effect.
	DriftActedWhileCancelled = "acted_while_cancelled"
	// DriftTwoObjects: a second, distinct provider object carries the key of
	// a confirmed effect.
	DriftTwoObjects = "two_objects"
	// DriftUndone: the object of a confirmed effect was later undone (a
	// refund failed, a payment intent canceled).
	DriftUndone = "undone_after_confirm"
	// DriftOtherProvider: an event names the key of an effect of another
	// provider; it proves nothing about that effect.
	DriftOtherProvider = "other_provider"
	// DriftOtherOperation: an event is about an object the effect's
	// operation does not create (a customer event naming a capture's key).
	DriftOtherOperation = "other_operation"
	// DriftOtherObject: an event is about another object than the one the
	// effect's operation acts on (an event about one payment intent naming
	// the key of another's capture).
	DriftOtherObject = "other_object"
)

// ActionEventConfirm is the audit action of an effect confirmed by a
// provider event.
const ActionEventConfirm = "event_confirm"

// Object is the provider's object as the drift's event showed it, for
// people: its id, then status, amount and currency, and the provider's
// explanation ("re_77: status succeeded, amount 4200 EUR").
func (r DriftRecord) Object() string {
	object := r.ObjectID
	if object == "" {
		object = "-"
	}
	var facts []string
	if st, ok := r.Details["status"].(string); ok {
		facts = append(facts, "status "+st)
	}
	if amt, ok := r.Details["amount"].(float64); ok {
		cur, _ := r.Details["currency"].(string)
		facts = append(facts, strings.TrimSpace(fmt.Sprintf("amount %d %s", int64(amt), strings.ToUpper(cur))))
	}
	if det, ok := r.Details["detail"].(string); ok {
		facts = append(facts, det)
	}
	if len(facts) > 0 {
		object += ": " + strings.Join(facts, ", ")
	}
	return object
}

// EventAt is when the provider's event says its object changed, as the
// provider wrote it ("" when it did not say).
func (r DriftRecord) EventAt() string {
	at, _ := r.Details["event_at"].(string)
	return at
}
