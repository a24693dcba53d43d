package providers

import (
	"errors"
	"fmt"
	"time"
)

// Class sorts a failed attempt by what it means for a retry.
type Class int

const (
	// ClassInDoubt: the request may or may not have been acted on (timeout,
	// connection reset after sending). Retried with the same key, or parked,
	// per the InDoubtPolicy.
	ClassInDoubt Class = iota
	// ClassRetryable: the provider proved it did not act (it refused the
	// request before acting, e.g. 429, or the request never left). Safe to
	// retry whatever the in-doubt policy. A 5xx is not such a proof.
	ClassRetryable
	// ClassPermanent: retrying cannot help (rejected card, invalid request,
	// endpoint gone). The effect fails with the reason.
	ClassPermanent
)

func (c Class) String() string {
	switch c {
	case ClassRetryable:
		return "retryable"
	case ClassPermanent:
		return "permanent"
	default:
		return "in_doubt"
	}
}

// Error is a classified provider failure.
type Error struct {
	Class Class
	// RetryAfter is the provider's requested delay before the next attempt
	// (Retry-After, X-RateLimit-Reset); zero when it gave none.
	RetryAfter time.Duration
	Err        error
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %v", e.Class, e.Err) }
func (e *Error) Unwrap() error { return e.Err }

// Permanent marks err as not worth retrying.
func Permanent(err error) error { return &Error{Class: ClassPermanent, Err: err} }

// Retryable marks err as not applied by the provider; after is the delay the
// provider asked for, or zero.
func Retryable(err error, after time.Duration) error {
	return &Error{Class: ClassRetryable, RetryAfter: after, Err: err}
}

// InDoubt marks err as an attempt whose outcome is unknown.
func InDoubt(err error) error { return &Error{Class: ClassInDoubt, Err: err} }

// InDoubtAfter marks err as an attempt whose outcome is unknown, answered
// with a requested delay before any re-send (a 5xx with Retry-After).
func InDoubtAfter(err error, after time.Duration) error {
	return &Error{Class: ClassInDoubt, RetryAfter: after, Err: err}
}

// Classify returns the class of err and the delay the provider asked for.
// Errors a provider did not classify are in doubt: assuming "not sent" could
// turn a retry into a second action.
func Classify(err error) (Class, time.Duration) {
	var pe *Error
	if errors.As(err, &pe) {
		return pe.Class, pe.RetryAfter
	}
	return ClassInDoubt, 0
}
