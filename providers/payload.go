package providers

import "encoding/json"

// Payload is a typed effect payload: what one provider is asked to do, as a
// Go value checked by the compiler, which outbox.EffectOf turns into an
// effect (its provider and its JSON). The built-in providers offer them
// (webhook.Payload, the operations of stripeschema, sendgridschema.Payload)
// without importing their SDKs; a custom provider may offer its own, or its
// callers write the JSON themselves.
type Payload interface {
	// ProviderName is the provider that performs it (side_effects.provider).
	ProviderName() string
	// EffectPayload is the JSON object the provider's schema reads.
	EffectPayload() (json.RawMessage, error)
}
