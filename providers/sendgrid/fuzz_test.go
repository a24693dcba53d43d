package sendgrid_test

import (
	"encoding/json"
	"net/mail"
	"testing"

	"github.com/outboxd/outboxd/providers/sendgrid"
)

// FuzzValidatePayload: validation never panics, and what it accepts has a
// parseable sender and at least one parseable recipient.
func FuzzValidatePayload(f *testing.F) {
	f.Add(welcome)
	f.Add(`{"from": {"email": "s@example.com"}, "to": [{"email": "a@example.com"}], "template_id": "d-1"}`)
	f.Add(`{"from": {"email": "s@example.com", "name": "a\r\nb"}, "to": [], "subject": "s", "text": "t"}`)
	f.Add(`{`)
	f.Fuzz(func(t *testing.T, payload string) {
		if err := (sendgrid.Schema{}).ValidatePayload("k", json.RawMessage(payload)); err != nil {
			return
		}
		var p sendgrid.Payload
		if err := json.Unmarshal([]byte(payload), &p); err != nil {
			t.Fatalf("accepted a payload that does not decode: %q", payload)
		}
		if _, err := mail.ParseAddress(p.From.Email); err != nil || len(p.To) == 0 {
			t.Fatalf("accepted a payload without a valid sender and recipient: %q", payload)
		}
		for _, a := range p.To {
			if _, err := mail.ParseAddress(a.Email); err != nil {
				t.Fatalf("accepted recipient %q", a.Email)
			}
		}
	})
}

// FuzzParseEvent: one event of a verified delivery, whatever it holds, is
// read without a panic.
func FuzzParseEvent(f *testing.F) {
	f.Add(`{"event": "delivered", "sg_event_id": "e1", "sg_message_id": "m.1", "outboxd_idempotency_key": "k", "timestamp": 1}`)
	f.Add(`{"event": ["x"], "timestamp": "soon", "outboxd_idempotency_key": 7}`)
	f.Add(`{"event": "bounce", "reason": "\u0000\u202e", "timestamp": 1e400}`)
	f.Add(`[]`)
	f.Fuzz(func(t *testing.T, body string) {
		_, _ = sendgrid.ParseEvent([]byte(body))
	})
}
