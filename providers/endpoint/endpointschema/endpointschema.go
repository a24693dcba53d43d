// Package endpointschema validates the payloads of endpoint effects
// without the sender, so that enqueueing (package outbox) does not compile
// it. An endpoint effect is written by the fan-out of an event's
// subscribers effect (outbox.ToSubscribers, or {"subscribers": true} in
// outboxd_enqueue), one per endpoint; an application does not write its
// payload itself.
package endpointschema

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"

	"github.com/outboxd/outboxd/providers"
)

// Name is the provider name used in side_effects.provider and as River
// queue.
const Name = "endpoint"

// KindPrefix starts the kind of every endpoint effect: the kind is
// KindPrefix followed by the endpoint's id, so the effect's idempotency key
// is sha256(event id + ":endpoint:" + endpoint id): one per event and
// endpoint.
const KindPrefix = "endpoint:"

// Payload is the JSON object an endpoint effect carries:
//
//	{"endpoint_id": "0b9e4c9e-…"}
//
// The request's URL, headers and secrets are the endpoint's when it is
// sent (an endpoint moved to a new URL receives its pending deliveries
// there); the body is the effect's event.
type Payload struct {
	EndpointID uuid.UUID `json:"endpoint_id"`
}

// Parse decodes and checks an endpoint effect of kind.
func Parse(kind string, raw json.RawMessage) (Payload, error) {
	var p Payload
	if err := providers.DecodeStrict(raw, &p); err != nil {
		return p, fmt.Errorf("payload: %w (want {\"endpoint_id\": ...})", err)
	}
	if p.EndpointID == uuid.Nil {
		return p, errors.New("payload.endpoint_id: required: the endpoint's id")
	}
	if kind != "" && kind != KindPrefix+p.EndpointID.String() {
		return p, fmt.Errorf("kind %q: an endpoint effect's kind is %s followed by its endpoint's id (%s%s): endpoint effects are written by the fan-out of a subscribers effect (outbox.ToSubscribers)", kind, KindPrefix, KindPrefix, p.EndpointID)
	}
	return p, nil
}

// EndpointOf is the endpoint id an endpoint effect's kind names, or Nil.
func EndpointOf(kind string) uuid.UUID {
	id, err := uuid.Parse(strings.TrimPrefix(kind, KindPrefix))
	if err != nil || !strings.HasPrefix(kind, KindPrefix) {
		return uuid.Nil
	}
	return id
}

// ProviderName implements providers.Payload: a Payload is a typed
// endpoint delivery for outbox.EffectOf (of kind KindPrefix + its id), as
// an operator's test event or replay to one endpoint writes it.
func (Payload) ProviderName() string { return Name }

// EffectPayload implements providers.Payload.
func (p Payload) EffectPayload() (json.RawMessage, error) { return json.Marshal(p) }

// Schema validates endpoint payloads.
type Schema struct{}

// Name implements providers.Validator.
func (Schema) Name() string { return Name }

// ValidatePayload implements providers.Validator.
func (Schema) ValidatePayload(kind string, payload json.RawMessage) error {
	_, err := Parse(kind, payload)
	return err
}

// Profile implements providers.Profiler: what operators are told about
// the provider, and the rules their actions follow for its effects.
func (Schema) Profile() providers.Profile {
	return providers.Profile{
		Name: Name,
		Refs: false,
		LookUp: func(key, _ string) string {
			return fmt.Sprintf("ask the endpoint's owner whether their receiver processed webhook-id %s", key)
		},
		Answers: providers.AnswersNothing,
		RefusedWithoutActing: func(text string) bool {
			return strings.Contains(text, "HTTP 400") || strings.Contains(text, "HTTP 422")
		},
	}
}
