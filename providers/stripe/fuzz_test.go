package stripe_test

import (
	"encoding/json"
	"testing"

	"github.com/outboxd/outboxd/providers/stripe"
)

// FuzzValidatePayload: validation never panics, and accepts only payloads
// naming a supported operation.
func FuzzValidatePayload(f *testing.F) {
	for _, tc := range operationPayloads {
		f.Add(tc.payload)
	}
	f.Add(`{"operation": "refund.create", "params": {"payment_intent": "pi_1", "amount": -1}}`)
	f.Add(`{"operation": "x"}`)
	f.Add(`{`)
	supported := map[string]bool{}
	for _, op := range stripe.Operations() {
		supported[op] = true
	}
	f.Fuzz(func(t *testing.T, payload string) {
		if err := (stripe.Schema{}).ValidatePayload("k", json.RawMessage(payload)); err != nil {
			return
		}
		var p stripe.Payload
		if err := json.Unmarshal([]byte(payload), &p); err != nil || !supported[p.Operation] {
			t.Fatalf("accepted %q", payload)
		}
	})
}
