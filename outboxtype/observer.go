package outboxtype

import (
	"time"

	"github.com/outboxd/outboxd/providers"
)

// Observer receives what the dispatcher measures; package dispatchmetrics
// implements it with Prometheus. Calls are made from workers concurrently.
type Observer interface {
	// Transition reports a transition a worker made (only those that
	// happened).
	Transition(e *Effect, to State)
	// ProviderCall reports one provider call, its duration and outcome.
	ProviderCall(e *Effect, d time.Duration, err error, res providers.Result)
}
