// Package providers defines what outboxd asks of the outside world: one small
// Provider interface, the three error classes every provider must sort its
// failures into, and the guarantees each provider declares about idempotency.
//
// Implementations live in sub-packages (webhook, stripe, sendgrid, nats,
// kafka). Of outboxd they import only this package (and the inbox, for
// the providers whose events outboxd receives); the values a provider
// reports (Result, EventReport, DestinationState, Found) are outboxtype's,
// named here. A provider can be read, tested and replaced on its own.
package providers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/outboxd/outboxd/outboxtype"
)

// Request is one attempt to perform a side effect.
type Request struct {
	// EffectID is the side_effects row id, for logs and receivers.
	EffectID string
	// Kind is the effect's kind, for example "webhook.payment_captured".
	Kind string
	// Key is the idempotency key. It is the same on every attempt of one
	// effect and differs between effects.
	Key string
	// Payload is the effect's JSON object, already validated at enqueue.
	Payload json.RawMessage
	// Attempt counts fires of this effect, starting at 1.
	Attempt int
	// EventID is the id of the effect's event (its source_id).
	EventID string
	// Event is the effect's event, read for providers that publish it
	// (EventPublisher); nil for the others.
	Event *SourceEvent
	// Tenant is the tenant the effect was enqueued for ("" for none): a
	// provider that serves tenants' own destinations sends an effect only
	// to its own tenant's.
	Tenant string
}

// SourceEvent is the domain event an effect belongs to, as the
// application enqueued it.
type SourceEvent struct {
	ID            string
	Type          string
	AggregateType string
	AggregateID   string
	Payload       json.RawMessage
	// OccurredAt is when the event was recorded (its transaction's time).
	OccurredAt time.Time
}

// EventPublisher is implemented by providers that relay the effect's
// event itself (brokers): the dispatcher reads the event before each
// attempt and passes it in Request.Event.
type EventPublisher interface {
	PublishesEvents() bool
}

// Result is what a provider reports on acknowledgement
// (outboxtype.Result: the value outboxd's faces share).
type Result = outboxtype.Result

// InDoubtPolicy says what a worker does after an attempt whose outcome is
// unknown (timeout, connection reset, crash).
type InDoubtPolicy string

const (
	// AtLeastOnce re-sends with the same key. Right for providers that honour
	// idempotency keys, where the re-send cannot become a second action.
	AtLeastOnce InDoubtPolicy = "at_least_once"
	// AtMostOnce parks the effect as failed for an operator to check, because
	// a re-send could act twice.
	AtMostOnce InDoubtPolicy = "at_most_once"
)

// WindowAdviser is implemented by providers whose key window is set
// outside outboxd (a JetStream stream's duplicate window): WindowAdvice
// says where it is set, and how to make it at least min.
type WindowAdviser interface {
	WindowAdvice(min time.Duration) string
}

// Guarantees are what a provider promises about repeated requests.
type Guarantees struct {
	// KeyWindow is how long after the first request the provider remembers a
	// key. Workers never fire an effect later than KeyWindow minus
	// KeyWindowMargin after its first fire. Zero means the provider has no
	// window (it does not deduplicate, or remembers forever).
	KeyWindow time.Duration
	// KeyWindowMargin is kept back from KeyWindow to absorb clock skew and
	// in-flight time.
	KeyWindowMargin time.Duration
	// InDoubt is the default policy for attempts whose outcome is unknown.
	InDoubt InDoubtPolicy
	// WindowCoversRetries asks the dispatcher to refuse to start when its
	// retry schedule could outlast KeyWindow minus KeyWindowMargin: for a
	// provider whose window is configured by its operator (a JetStream
	// stream's duplicate window), where a short one is a mistake to report
	// at start, not effects to fail one by one later.
	WindowCoversRetries bool
}

// Refirable is how long after the first request that carried a key an
// effect may still be fired with it: KeyWindow less KeyWindowMargin, or
// zero when the provider has no window.
func (g Guarantees) Refirable() time.Duration {
	if g.KeyWindow <= 0 {
		return 0
	}
	return g.KeyWindow - g.KeyWindowMargin
}

// Validator checks an effect's payload. Enqueue calls it before writing, so
// a payload a provider cannot send never reaches the database.
type Validator interface {
	// Name is the provider's name, as stored in side_effects.provider and
	// used as its River queue.
	Name() string
	// ValidatePayload returns a descriptive error naming the offending field.
	ValidatePayload(kind string, payload json.RawMessage) error
}

// Provider performs side effects.
type Provider interface {
	Validator
	// Guarantees describes how the provider treats repeated keys.
	Guarantees() Guarantees
	// Send performs one attempt. A nil error means the provider acknowledged
	// the effect. Any error should be classified with Permanent, Retryable or
	// InDoubt; an unclassified error is treated as in doubt.
	Send(ctx context.Context, req Request) (Result, error)
}

// Timed is implemented by providers whose calls have a timeout of their
// own. The dispatcher refuses a job timeout that does not exceed it: River
// would cancel every slow call before the provider's own timeout could
// report it, and the effect would be left in doubt instead of failed or
// retried with a reason.
type Timed interface {
	Timeout() time.Duration
}

// Hoster is implemented by providers that can say which host a request
// goes to, for the attempt history operators read.
type Hoster interface {
	Host(payload json.RawMessage) string
}

// Gate is implemented by providers that limit concurrent calls per
// destination. The dispatcher asks Admit before it claims an effect; when
// the answer is no, the effect is not fired and its job waits, without
// counting an attempt. release takes Send's error (nil on success), or
// ErrNotAttempted when the effect was not sent after all.
type Gate interface {
	Admit(ctx context.Context, payload json.RawMessage) (release func(sendErr error), wait time.Duration, ok bool)
}

// DestinationState is what a Gate knows of one destination now
// (outboxtype.DestinationState).
type DestinationState = outboxtype.DestinationState

// DestinationReporter is implemented by Gates that can say what they hold
// back: the destinations with requests in flight or waiting, failures, or
// an open breaker. outboxd records it for operators and exports it as
// metrics.
type DestinationReporter interface {
	Destinations() []DestinationState
}

// ErrNotAttempted tells a Gate's release that no request was made.
var ErrNotAttempted = errors.New("not attempted")

// DecodeStrict decodes a JSON payload into v, rejecting unknown fields,
// object keys that differ only in case (Go matches field names without
// regard to case, so {"url": a, "URL": b} would validate one and send the
// other) and anything after the first JSON value, so that what a validator
// accepts is exactly what Send will read.
func DecodeStrict(raw json.RawMessage, v any) error {
	if err := checkKeys(raw); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if rest := bytes.TrimSpace(raw[dec.InputOffset():]); len(rest) > 0 {
		return errors.New("unexpected data after the JSON object")
	}
	return nil
}

// checkKeys rejects an object, at any depth, with two keys equal under
// case folding. It reads raw as tokens (jsontext, the streaming half of
// Go's JSON v2) only to see the names: duplicates are this check's to
// word, and what is in the strings is left to the validators.
func checkKeys(raw json.RawMessage) error {
	dec := jsontext.NewDecoder(bytes.NewReader(raw), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	// names holds the names of every open object, one after the other,
	// with their folded forms in folded; open holds where each open
	// object's start.
	var names, folded []string
	var open []int
	for {
		tok, err := dec.ReadToken()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		switch tok.Kind() {
		case '{':
			open = append(open, len(names))
		case '}':
			names, folded = names[:open[len(open)-1]], folded[:open[len(open)-1]]
			open = open[:len(open)-1]
		case '"':
			depth := dec.StackDepth()
			if kind, n := dec.StackIndex(depth); kind != '{' || n%2 == 0 {
				continue // a value, not a name
			}
			k := tok.String()
			fold := foldKey(k)
			for i := open[len(open)-1]; i < len(names); i++ {
				if folded[i] == fold {
					return fmt.Errorf("keys %q and %q differ only in case: use one", names[i], k)
				}
			}
			names, folded = append(names, k), append(folded, fold)
		}
	}
}

// foldKey is k under case folding (for ASCII, its lower case).
func foldKey(k string) string {
	for i := 0; i < len(k); i++ {
		if k[i] >= utf8.RuneSelf {
			return strings.ToLower(strings.ToUpper(k))
		}
	}
	return strings.ToLower(k)
}
