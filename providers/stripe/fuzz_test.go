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

// FuzzParseEvent: a verified event's body, whatever it holds, is read
// without a panic; an event about an object speaks only for that object,
// and never for an effect whose payload names another.
func FuzzParseEvent(f *testing.F) {
	f.Add(`{"id": "evt_1", "type": "payment_intent.succeeded", "created": 1, "data": {"object": {"id": "pi_1", "object": "payment_intent", "status": "succeeded", "metadata": {"outboxd_idempotency_key": "k"}}}}`,
		`{"operation": "payment_intent.capture", "params": {"id": "pi_1"}}`)
	f.Add(`{"id": "evt_2", "type": "refund.failed", "data": {"object": {"id": "re_1", "object": "refund", "amount": 1e400}}}`, `{}`)
	f.Add(`{"data": {"object": {"id": 7, "metadata": "x", "status": ["a"]}}}`, `{"operation": "payment_intent.cancel", "params": {"id": "pi_'; DROP TABLE x; --"}}`)
	f.Add(`{"data": null}`, `null`)
	f.Fuzz(func(t *testing.T, body, payload string) {
		ev, err := stripe.ParseEvent([]byte(body))
		if err != nil || ev.Target == nil {
			return
		}
		if target := ev.Target(json.RawMessage(payload)); target != "" && target == ev.ObjectID {
			var p struct {
				Params struct {
					ID string `json:"id"`
				} `json:"params"`
			}
			if json.Unmarshal([]byte(payload), &p) != nil || p.Params.ID != ev.ObjectID {
				t.Fatalf("event about %q speaks for payload %q", ev.ObjectID, payload)
			}
		}
	})
}
