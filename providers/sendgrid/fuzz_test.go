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
