package providers_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/outboxd/outboxd/providers"
)

// ExampleClassify shows how the dispatcher reads a provider's error: a
// Permanent error fails the effect, a Retryable one (the provider proved it
// did nothing) retries it after the delay, an InDoubt one (the request may
// have been applied) re-fires it with the same key under at_least_once, and
// an unclassified error is in doubt.
func ExampleClassify() {
	for _, err := range []error{
		providers.Permanent(errors.New("HTTP 410 (endpoint gone)")),
		providers.Retryable(errors.New("HTTP 429"), 2*time.Second),
		providers.InDoubt(errors.New("timeout awaiting headers")),
		errors.New("connection reset"),
	} {
		class, after := providers.Classify(err)
		fmt.Println(class, after)
	}
	// Output:
	// permanent 0s
	// retryable 2s
	// in_doubt 0s
	// in_doubt 0s
}
