package providers

import (
	"context"
	"encoding/json"

	"github.com/outboxd/outboxd/outboxtype"
)

// EventOutcome is what a provider event says about the request that
// carried an effect's key (outboxtype.EventOutcome).
type EventOutcome = outboxtype.EventOutcome

// The outcomes a provider event can show.
const (
	EventInformational = outboxtype.EventInformational
	EventDone          = outboxtype.EventDone
	EventUndone        = outboxtype.EventUndone
)

// EventReport is one provider event as outboxd reads it
// (outboxtype.EventReport).
type EventReport = outboxtype.EventReport

// Found is an object at the provider that an effect's request created or
// changed (outboxtype.Found).
type Found = outboxtype.Found

// Reconciler is a provider that can be asked what it holds for an effect:
// outboxctl reconcile uses it.
type Reconciler interface {
	// Lookup returns the objects the effect's request (payload, key)
	// created or changed, and says how it looked.
	Lookup(ctx context.Context, payload json.RawMessage, key string) (found []Found, how string, err error)
}
