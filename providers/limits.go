package providers

import (
	"encoding/json"
	"errors"
	"time"
)

// Limit is a rate limit the provider's side enforces on outboxd's requests:
// an account's (every request with one Stripe API key) or a destination's
// (every request to one webhook host).
type Limit struct {
	// Key names the limit for every replica: requests with the same key
	// share one budget ("stripe:live-…a1b2", "webhook:api.partner.example").
	// It never holds a secret.
	Key string
	// Rate is the provider's published limit in requests a second, used
	// when no configuration sets one; 0 when it publishes none, and outboxd
	// then slows the key only when the provider answers 429.
	Rate float64
}

// Limited is implemented by providers whose requests count against rate
// limits. Limit(nil) names the limit every request counts against (an
// account), or Limit{} when the limit depends on the request; Limit with a
// payload names the limit of that request (its destination), or Limit{}.
type Limited interface {
	Limit(payload json.RawMessage) Limit
}

// Throttled marks err as the provider's refusal for rate (HTTP 429): not
// applied, like Retryable, and a sign that the whole limit key, not only
// this request, must slow down. after is the delay the provider asked for
// (Retry-After, X-RateLimit-Reset), or zero.
func Throttled(err error, after time.Duration) error {
	return &Error{Class: ClassRetryable, RetryAfter: after, Throttled: true, Err: err}
}

// Held marks err as a destination held back on outboxd's side (an endpoint
// an operator or outboxd disabled), with nothing sent: its limit key waits
// until recheck, as after a 429, and what waits for it goes out when the
// hold is lifted; but no provider refused anything, so the key's 429s are
// not counted and its rate is not lowered.
func Held(err error, recheck time.Duration) error {
	return &Error{Class: ClassRetryable, RetryAfter: recheck, Throttled: true, Held: true, Err: err}
}

// Unreachable marks err as a destination that could not be reached, with
// nothing written to it (a broker refusing connections, a client not
// connected): like Held, its limit key waits until recheck on every
// replica and the effect's claim is undone (no attempt spent), but its
// rate is not lowered, since nothing said "too fast": when the
// destination answers again, what waited goes out at the key's full rate.
// A request that may have been written (a publish in flight when the
// connection dropped) is not Unreachable: it is in doubt.
func Unreachable(err error, recheck time.Duration) error {
	return &Error{Class: ClassRetryable, RetryAfter: recheck, Throttled: true, Held: true, Unreachable: true, Err: err}
}

// IsUnreachable reports whether err is a destination out of reach with
// nothing sent (Unreachable).
func IsUnreachable(err error) bool {
	var pe *Error
	return errors.As(err, &pe) && pe.Unreachable
}

// IsHeld reports whether err is a hold on outboxd's side (Held) or a
// destination out of reach (Unreachable).
func IsHeld(err error) bool {
	var pe *Error
	return errors.As(err, &pe) && pe.Held
}

// IsThrottled reports whether err is a rate-limit refusal (Throttled).
func IsThrottled(err error) bool {
	var pe *Error
	return errors.As(err, &pe) && pe.Throttled
}

// Overloaded marks err, already classified, as an answer by which the
// destination says it is overloaded (HTTP 503 Service Unavailable): the
// attempt keeps its class (a webhook's 5xx stays in doubt), and the whole
// limit key slows down as after a 429, paused for after (Retry-After) or
// the base pause and its rate lowered, so that retries and the deliveries
// behind them stop adding to the overload. An error that is not an *Error
// is returned as it is.
func Overloaded(err error) error {
	var pe *Error
	if !errors.As(err, &pe) {
		return err
	}
	c := *pe
	c.Overloaded = true
	return &c
}

// IsOverloaded reports whether err is an answer of an overloaded
// destination (Overloaded).
func IsOverloaded(err error) bool {
	var pe *Error
	return errors.As(err, &pe) && pe.Overloaded
}
