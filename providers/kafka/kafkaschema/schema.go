// Package kafkaschema parses and validates the payloads of Kafka effects
// without the Kafka client, so that enqueueing (package outbox) does not
// compile it. The provider in package kafka produces what Parse returns.
package kafkaschema

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/outboxd/outboxd/providers"
)

// Name is the provider name used in side_effects.provider and as River queue.
const Name = "kafka"

// The record headers outboxd sets on every record; a payload's own headers
// may not use the outboxd- prefix.
const (
	// HeaderKey is the effect's idempotency key: the same on every
	// re-publish of one effect, which consumers deduplicate by (Kafka
	// itself does not, across producer sessions).
	HeaderKey           = "outboxd-idempotency-key"
	HeaderEventID       = "outboxd-event-id"
	HeaderEventType     = "outboxd-event-type"
	HeaderAggregateType = "outboxd-aggregate-type"
	HeaderAggregateID   = "outboxd-aggregate-id"
	HeaderEffectID      = "outboxd-effect-id"
	HeaderKind          = "outboxd-kind"
)

const maxHeaders = 32

// Record is the JSON object a Kafka effect carries:
//
//	{"topic": "orders", "key": "o_42", "value": {...}, "headers": {"tenant": "acme"}}
//
// Key, when left out, is the event's aggregate id, so that one aggregate's
// events land in one partition, in the order they are produced. Value,
// when left out, is the event's payload: the usual way to relay a domain
// event. The record carries outboxd's headers as well (outboxd-*).
type Record struct {
	// Topic is the topic produced to. Required.
	Topic string `json:"topic"`
	// Key is the record key; default the event's aggregate id.
	Key *string `json:"key,omitempty"`
	// Value is the record value, any JSON value; default the event's
	// payload.
	Value json.RawMessage `json:"value,omitempty"`
	// Headers are added to the record.
	Headers map[string]string `json:"headers,omitempty"`
}

// Parse decodes and validates a Kafka payload, naming each field at fault.
func Parse(raw json.RawMessage) (Record, error) {
	var r Record
	if err := providers.DecodeStrict(raw, &r); err != nil {
		return r, fmt.Errorf("payload: %w (fields: topic, key, value, headers)", err)
	}
	var errs []string
	fail := func(field, format string, args ...any) {
		errs = append(errs, "payload."+field+": "+fmt.Sprintf(format, args...))
	}
	if msg := CheckTopic(r.Topic); msg != "" {
		fail("topic", "%s", msg)
	}
	if len(r.Value) > 0 && !json.Valid(r.Value) {
		fail("value", "must be JSON")
	}
	if len(r.Headers) > maxHeaders {
		fail("headers", "%d headers, over the limit of %d", len(r.Headers), maxHeaders)
	}
	for k := range r.Headers {
		switch {
		case k == "":
			fail("headers", "a header needs a name")
		case len(k) >= len("outboxd-") && strings.EqualFold(k[:len("outboxd-")], "outboxd-"):
			fail("headers."+k, "outboxd- headers are set by outboxd")
		}
	}
	if len(errs) > 0 {
		sort.Strings(errs)
		return r, errors.New(strings.Join(errs, "; "))
	}
	return r, nil
}

// CheckTopic says what is wrong with a topic name, or "": Kafka's own
// rule, 1 to 249 of letters, digits, '.', '_' and '-', and not "." or "..".
func CheckTopic(t string) string {
	switch {
	case t == "":
		return `required, for example "orders"`
	case len(t) > 249:
		return fmt.Sprintf("%d characters, over Kafka's limit of 249", len(t))
	case t == "." || t == "..":
		return fmt.Sprintf("%q is not a topic name", t)
	}
	for _, c := range t {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Sprintf("%q: use letters, digits, '.', '_' and '-' only", t)
		}
	}
	return ""
}

// Schema validates Kafka payloads; it is what the enqueue side needs.
type Schema struct{}

// Name implements providers.Validator.
func (Schema) Name() string { return Name }

// ValidatePayload implements providers.Validator.
func (Schema) ValidatePayload(_ string, payload json.RawMessage) error {
	_, err := Parse(payload)
	return err
}

// ProviderName implements providers.Payload: a Record is a typed payload
// for outbox.EffectOf.
func (Record) ProviderName() string { return Name }

// EffectPayload implements providers.Payload.
func (r Record) EffectPayload() (json.RawMessage, error) { return json.Marshal(r) }
