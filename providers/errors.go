package providers

import (
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"sync"
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
	// Throttled is true of a refusal for rate (see Throttled): the whole
	// limit key slows down, and the attempt does not count.
	Throttled bool
	// NotSent is true of a refusal by outboxd itself, before any request
	// was made (see Refused): no provider saw it.
	NotSent bool
	// Held is true of a destination held back on outboxd's side (see
	// Held) or out of reach (see Unreachable): its limit key waits, but
	// nothing answered 429.
	Held bool
	// Unreachable is true of a destination out of reach with nothing sent
	// (see Unreachable).
	Unreachable bool
	// Overloaded is true of an answer by which the destination says it is
	// overloaded (see Overloaded): its limit key slows down, and the
	// attempt keeps its class.
	Overloaded bool
	Err        error
}

// RefusedPrefix starts the text of a Refused error.
const RefusedPrefix = "refused before sending (no request made)"

func (e *Error) Error() string {
	if e.NotSent {
		return fmt.Sprintf("%s: %v", RefusedPrefix, e.Err)
	}
	return fmt.Sprintf("%s: %v", e.Class, e.Err)
}
func (e *Error) Unwrap() error { return e.Err }

// Permanent marks err as not worth retrying.
func Permanent(err error) error { return &Error{Class: ClassPermanent, Err: err} }

// Refused marks err as a refusal by the provider's own checks before any
// request was made (an invalid payload, a destination the dial guard
// refuses, a request that cannot be signed): permanent, and proof that
// nothing reached the provider.
func Refused(err error) error { return &Error{Class: ClassPermanent, NotSent: true, Err: err} }

// IsRefused reports whether err is a Refused error.
func IsRefused(err error) bool {
	var pe *Error
	return errors.As(err, &pe) && pe.NotSent
}

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
// keeping its class and requested delay. A provider's answer (StatusError)
// is redacted over its whole body before that body is cut to length, so a
// secret the cut would split is still found. It returns err itself when no
// secret occurs in it.
func Redact(err error, secrets []string) error {
	if err == nil {
		return nil
	}
	var pe *Error
	if errors.As(err, &pe) {
		inner, changed := redactErr(pe.Err, secrets)
		if !changed {
			return err
		}
		return &Error{Class: pe.Class, RetryAfter: pe.RetryAfter, Throttled: pe.Throttled, NotSent: pe.NotSent, Held: pe.Held, Unreachable: pe.Unreachable, Err: inner}
	}
	clean, changed := redactErr(err, secrets)
	if !changed {
		return err
	}
	return clean
}

func redactErr(err error, secrets []string) (error, bool) {
	var se *statusError
	if errors.As(err, &se) {
		r := &statusError{head: RedactString(se.head, secrets), body: RedactString(se.body, secrets)}
		if r.head == se.head && r.body == se.body {
			return err, false
		}
		return r, true
	}
	msg := err.Error()
	clean := RedactString(msg, secrets)
	if clean == msg {
		return err, false
	}
	return errors.New(clean), true
}

// RedactString replaces every secret in s by Redacted, as it is and as a
// receiver may echo it: in any letter case, with any character written as
// a JSON \uXXXX escape or a slash as \/, percent-encoded, in hex, or in
// base64 (standard or URL alphabet) at any alignment (a secret inside a
// longer encoded text, such as "Basic " or "Bearer " credentials); and for
// a whsec_ signing secret, its decoded HMAC key in hex or base64. Secrets
// shorter than 8 characters are ignored: replacing them would garble
// ordinary text.
func RedactString(s string, secrets []string) string {
	for _, sec := range secrets {
		if len(sec) < 8 {
			continue
		}
		for _, re := range redactors(sec) {
			s = re.ReplaceAllString(s, Redacted)
		}
	}
	return s
}

// redactorCache holds each secret's patterns (secret -> []*regexp.Regexp).
var redactorCache sync.Map

// redactors are the patterns that find sec in its echoed forms.
func redactors(sec string) []*regexp.Regexp {
	if v, ok := redactorCache.Load(sec); ok {
		return v.([]*regexp.Regexp)
	}
	var out []*regexp.Regexp
	// The text itself, any case, any character as \uXXXX.
	var b strings.Builder
	b.WriteString("(?i)")
	for _, r := range sec {
		alts := []string{regexp.QuoteMeta(string(r))}
		if r < 0x10000 {
			alts = append(alts, fmt.Sprintf(`\\u%04x`, r))
		}
		if r == '/' {
			alts = append(alts, `\\/`)
		}
		b.WriteString("(?:" + strings.Join(alts, "|") + ")")
	}
	out = append(out, regexp.MustCompile(b.String()))
	literal := func(form string, anyCase bool) {
		if len(form) < 8 {
			return
		}
		expr := regexp.QuoteMeta(form)
		if anyCase {
			expr = "(?i)" + expr
		}
		out = append(out, regexp.MustCompile(expr))
	}
	raws := [][]byte{[]byte(sec)}
	if key, ok := strings.CutPrefix(sec, "whsec_"); ok {
		if k, err := base64.StdEncoding.DecodeString(key); err == nil {
			raws = append(raws, k)
		}
	}
	for _, raw := range raws {
		literal(hex.EncodeToString(raw), true)
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
			for shift := range 3 {
				literal(alignedBase64(enc, raw, shift), false)
			}
		}
	}
	literal(url.QueryEscape(sec), true)
	redactorCache.Store(sec, out)
	return out
}

// alignedBase64 is the part of the base64 encoding of raw, preceded by
// shift bytes, that does not depend on what precedes or follows it: what
// any text containing raw at that alignment encodes to.
func alignedBase64(enc *base64.Encoding, raw []byte, shift int) string {
	padded := append(make([]byte, shift), raw...)
	e := enc.EncodeToString(padded)
	start := 0
	if shift > 0 {
		start = 4 // the first output group holds the preceding bytes' bits
	}
	// Whole groups of raw only: drop the last group if it is partial.
	end := len(e)
	if rem := len(padded) % 3; rem != 0 {
		end -= 4
	}
	if start >= end {
		return ""
	}
	return e[start:end]
}

// maxStatusBody is how much of a provider's answer an error keeps, after
// redaction; maxStatusRead how much it holds for redaction.
const (
	maxStatusBody = 512
	maxStatusRead = 64 << 10
)

// statusError is a provider's HTTP answer. It holds the body whole (up to
// maxStatusRead) so that Redact sees every secret in it, and shows it cut
// to maxStatusBody.
type statusError struct{ head, body string }

func (e *statusError) Error() string {
	if e.body == "" {
		return e.head
	}
	body := e.body
	if len(body) > maxStatusBody {
		body = strings.ToValidUTF8(body[:maxStatusBody], "")
	}
	return e.head + ": " + body
}

// StatusError describes a provider's HTTP answer: "<prefix>HTTP <status>
// (<note>): <body>", the body made valid UTF-8, left out when empty, and
// shown cut to 512 bytes (after Redact, which sees all of it).
func StatusError(prefix string, status int, note string, body []byte) error {
	head := fmt.Sprintf("%sHTTP %d", prefix, status)
	if note != "" {
		head += " (" + note + ")"
	}
	if len(body) > maxStatusRead {
		body = body[:maxStatusRead]
	}
	return &statusError{head: head, body: strings.TrimSpace(strings.ToValidUTF8(string(body), "?"))}
}

// keyLike is text a key or a signature could be: 32 hex digits or more,
// or 40 base64 characters or more.
var keyLike = regexp.MustCompile(`[0-9a-fA-F]{32,}|[A-Za-z0-9+/_-]{40,}={0,2}`)

// Summary is what telemetry (spans, their status) may say of err: its
// class and, for a provider's HTTP answer, the status line without the
// body; any other text with key-like runs (long hex or base64, such as an
// idempotency key or a signature) replaced and cut to 160 bytes.
func Summary(err error) string {
	if err == nil {
		return ""
	}
	prefix, inner := "", err
	var pe *Error
	if errors.As(err, &pe) {
		prefix, inner = pe.Class.String()+": ", pe.Err
	}
	var se *statusError
	if errors.As(inner, &se) {
		return prefix + se.head
	}
	text := keyLike.ReplaceAllString(inner.Error(), "[…]")
	if len(text) > 160 {
		text = strings.ToValidUTF8(text[:160], "") + "…"
	}
	return prefix + text
}
