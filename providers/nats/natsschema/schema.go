// Package natsschema parses and validates the payloads of NATS JetStream
// effects without the NATS client, so that enqueueing (package outbox) does
// not compile it. The provider in package nats publishes what Parse
// returns.
package natsschema

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/outboxd/outboxd/providers"
)

// Name is the provider name used in side_effects.provider and as River queue.
const Name = "nats"

// The headers outboxd sets on every message; a payload's own headers may
// not use them (nor any other Nats- header, which JetStream reads).
const (
	// HeaderMsgID is JetStream's deduplication header: the effect's
	// idempotency key.
	HeaderMsgID = "Nats-Msg-Id"
	// HeaderKey is the idempotency key again, under outboxd's own name,
	// for consumers that deduplicate with the inbox package.
	HeaderKey           = "Outboxd-Idempotency-Key"
	HeaderEventID       = "Outboxd-Event-Id"
	HeaderEventType     = "Outboxd-Event-Type"
	HeaderAggregateType = "Outboxd-Aggregate-Type"
	HeaderAggregateID   = "Outboxd-Aggregate-Id"
	HeaderEffectID      = "Outboxd-Effect-Id"
	HeaderKind          = "Outboxd-Kind"
)

// Limits of a payload.
const (
	maxSubjectBytes = 512
	maxHeaders      = 32
)

// Publish is the JSON object a NATS effect carries:
//
//	{"subject": "orders.paid", "data": {...}, "headers": {"Tenant": "acme"}}
//
// Data, when left out, is the effect's event payload: the usual way to
// relay a domain event. The message carries outboxd's headers as well
// (Nats-Msg-Id and Outboxd-*).
type Publish struct {
	// Subject is the subject published to; a JetStream stream must
	// capture it. No wildcards.
	Subject string `json:"subject"`
	// Data is the message body, any JSON value; default the event's
	// payload.
	Data json.RawMessage `json:"data,omitempty"`
	// Headers are added to the message.
	Headers map[string]string `json:"headers,omitempty"`
}

// Parse decodes and validates a NATS payload, naming each field at fault.
func Parse(raw json.RawMessage) (Publish, error) {
	var p Publish
	if err := providers.DecodeStrict(raw, &p); err != nil {
		return p, fmt.Errorf("payload: %w (fields: subject, data, headers)", err)
	}
	var errs []string
	fail := func(field, format string, args ...any) {
		errs = append(errs, "payload."+field+": "+fmt.Sprintf(format, args...))
	}
	if msg := CheckSubject(p.Subject); msg != "" {
		fail("subject", "%s", msg)
	}
	if len(p.Data) > 0 && !json.Valid(p.Data) {
		fail("data", "must be JSON")
	}
	if len(p.Headers) > maxHeaders {
		fail("headers", "%d headers, over the limit of %d", len(p.Headers), maxHeaders)
	}
	for k, v := range p.Headers {
		switch {
		case k == "" || strings.ContainsAny(k, ": \t\r\n"):
			fail("headers", "%q is not a header name: no spaces or colons", k)
		case hasPrefixFold(k, "Nats-") || hasPrefixFold(k, "Outboxd-"):
			fail("headers."+k, "Nats- and Outboxd- headers are set by outboxd and JetStream")
		case strings.ContainsAny(v, "\r\n"):
			fail("headers."+k, "no line breaks in a header value")
		}
	}
	if len(errs) > 0 {
		sort.Strings(errs)
		return p, errors.New(strings.Join(errs, "; "))
	}
	return p, nil
}

// CheckSubject says what is wrong with a subject to publish to, or "".
func CheckSubject(s string) string {
	switch {
	case s == "":
		return `required, for example "orders.paid"`
	case len(s) > maxSubjectBytes:
		return fmt.Sprintf("%d bytes, over the limit of %d", len(s), maxSubjectBytes)
	case strings.ContainsAny(s, " \t\r\n"):
		return fmt.Sprintf("%q: no whitespace in a subject", s)
	case strings.HasPrefix(s, "$") || strings.HasPrefix(s, "_INBOX."):
		return fmt.Sprintf("%q: subjects starting with $ or _INBOX. are NATS's own (the JetStream and KV APIs, replies), not a stream's", s)
	}
	for _, tok := range strings.Split(s, ".") {
		switch tok {
		case "":
			return fmt.Sprintf("%q: an empty token (two dots, or a dot at an end)", s)
		case "*", ">":
			return fmt.Sprintf("%q: wildcards subscribe, they cannot be published to", s)
		}
	}
	return ""
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// Schema validates NATS payloads; it is what the enqueue side needs.
type Schema struct{}

// Name implements providers.Validator.
func (Schema) Name() string { return Name }

// ValidatePayload implements providers.Validator.
func (Schema) ValidatePayload(_ string, payload json.RawMessage) error {
	_, err := Parse(payload)
	return err
}

// ProviderName implements providers.Payload: a Publish is a typed payload
// for outbox.EffectOf.
func (Publish) ProviderName() string { return Name }

// EffectPayload implements providers.Payload.
func (p Publish) EffectPayload() (json.RawMessage, error) { return json.Marshal(p) }
