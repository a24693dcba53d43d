package providers

import (
	"context"
	"encoding/json"
	"time"
)

// EventOutcome is what a provider event says about the request that carried
// an effect's key.
type EventOutcome string

const (
	// EventInformational says nothing about whether the request was applied.
	EventInformational EventOutcome = "informational"
	// EventDone shows the request was applied: the object exists, the mail
	// was accepted.
	EventDone EventOutcome = "done"
	// EventUndone shows an applied request later undone or failed: a refund
	// that failed, a payment intent canceled.
	EventUndone EventOutcome = "undone"
)

// EventReport is one provider event as outboxd reads it.
type EventReport struct {
	Provider string
	EventID  string
	Type     string
	// Key is the effect's idempotency key the event's object carries
	// (Stripe metadata, SendGrid custom_args); "" when the object is not
	// one outboxd created.
	Key string
	// ObjectID is the provider's object: a Stripe id, a SendGrid message id.
	ObjectID string
	Outcome  EventOutcome
	// Delivery is a mail's delivery status (processed, deferred, delivered,
	// bounce, dropped); "" for other events.
	Delivery string
	// Detail is the provider's explanation (a bounce reason, a failure code).
	Detail string
	// Status, Amount and Currency are the object's as the event shows them
	// (a refund "failed", 500 "eur"), for the people reading drift;
	// Amount is in the currency's smallest unit, nil when it has none.
	Status   string
	Amount   *int64
	Currency string
	At       time.Time
	// Operations are the effect operations ("refund.create", …) the event
	// can speak for, from the kind of object it is about; nil when the
	// provider's effects have a single kind of request (a mail). An event
	// about one object never confirms an effect whose operation creates
	// another.
	Operations []string
	// Target, when set, returns the provider object an effect's payload
	// acts on when its request changes an existing object (a capture's
	// payment intent), or "" when the request creates one. An event about
	// any other object never confirms such an effect.
	Target func(payload json.RawMessage) string
}

// Found is an object at the provider that an effect's request created or
// changed.
type Found struct {
	ID      string    `json:"id"`
	Object  string    `json:"object"`
	Status  string    `json:"status,omitempty"`
	Created time.Time `json:"created"`
}

// Reconciler is a provider that can be asked what it holds for an effect:
// outboxctl reconcile uses it.
type Reconciler interface {
	// Lookup returns the objects the effect's request (payload, key)
	// created or changed, and says how it looked.
	Lookup(ctx context.Context, payload json.RawMessage, key string) (found []Found, how string, err error)
}
