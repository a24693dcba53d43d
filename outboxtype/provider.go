package outboxtype

import (
	"encoding/json"
	"time"
)

// The values a provider reports, which the faces carry on (in
// observations, reads and reconciliations). Package providers names them
// for the providers that produce them.

// Result is what a provider reports on acknowledgement.
type Result struct {
	// Ref is the provider's id for what it did (a Stripe object id, a
	// SendGrid message id); empty when the provider has none.
	Ref string
	// Replayed is true when the provider said it answered from its
	// idempotency cache rather than acting again.
	Replayed bool
}

// DestinationState is what a provider's gate (providers.Gate) knows of one
// destination now: requests
// in flight and waiting for a slot, its cap, and its circuit breaker
// (open: the host stopped answering, and is left alone until OpenUntil).
type DestinationState struct {
	// Host is the destination as the gate keys it: the host name and port
	// of the payloads' URLs, or the address when they name one; Address,
	// for a name, is the address it is dialled at (the cap of all the
	// names of one address together is four hosts' caps).
	Host        string    `json:"host"`
	Address     string    `json:"address,omitempty"`
	InFlight    int       `json:"in_flight"`
	Waiting     int       `json:"waiting"`
	Limit       int       `json:"limit"`
	Failures    int       `json:"failures_in_a_row"`
	BreakerOpen bool      `json:"breaker_open"`
	OpenUntil   time.Time `json:"open_until,omitzero"`
}

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
