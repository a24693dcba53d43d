package providers

import (
	"errors"
	"fmt"
	"strings"
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

// SecretHolder is implemented by providers that hold credentials (API keys,
// signing secrets). The dispatcher removes every one of them from every
// error text before it is logged or stored, whatever the provider or a
// server that echoes headers put in it.
type SecretHolder interface {
	Secrets() []string
}

// Redacted is the text that replaces a secret.
const Redacted = "[redacted]"

// Redact returns err with every secret replaced by Redacted in its text,
// keeping its class and requested delay. It returns err itself when no
// secret occurs in it.
func Redact(err error, secrets []string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	clean := RedactString(msg, secrets)
	if clean == msg {
		return err
	}
	var pe *Error
	if errors.As(err, &pe) {
		inner := RedactString(pe.Err.Error(), secrets)
		return &Error{Class: pe.Class, RetryAfter: pe.RetryAfter, Err: errors.New(inner)}
	}
	return errors.New(clean)
}

// RedactString replaces every secret in s by Redacted. Secrets shorter than
// 8 characters are ignored: replacing them would garble ordinary text.
func RedactString(s string, secrets []string) string {
	for _, sec := range secrets {
		if len(sec) >= 8 {
			s = strings.ReplaceAll(s, sec, Redacted)
		}
	}
	return s
}

// StatusError describes a provider's HTTP answer: "<prefix>HTTP <status>
// (<note>): <body>", the body cut to 512 bytes, made valid UTF-8, and left
// out when empty.
func StatusError(prefix string, status int, note string, body []byte) error {
	msg := fmt.Sprintf("%sHTTP %d", prefix, status)
	if note != "" {
		msg += " (" + note + ")"
	}
	if len(body) > 512 {
		body = body[:512]
	}
	if s := strings.TrimSpace(strings.ToValidUTF8(string(body), "?")); s != "" {
		msg += ": " + s
	}
	return errors.New(msg)
}
