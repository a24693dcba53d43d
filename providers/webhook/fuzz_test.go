package webhook_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/outboxd/outboxd/providers/webhook"
)

// FuzzValidatePayload: validation never panics, and what it accepts is a
// JSON object with an http(s) URL without credentials and a body.
func FuzzValidatePayload(f *testing.F) {
	for _, seed := range []string{
		`{"url": "https://hooks.example.com/x", "body": {"a": 1}}`,
		`{"url": "http://10.0.0.1/x", "body": 1}`,
		`{"url": "https://u:p@x.example/", "body": {}}`,
		`{"url": "https://x.example", "body": {}, "headers": {"X-A": "b"}}`,
		`{"url": "javascript:alert(1)", "body": "x"}`,
		`{"url": "https://[::1]:80/", "body": []}`,
		`[]`, `null`, `{"url": 5}`, `{`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, payload string) {
		err := webhook.Schema{}.ValidatePayload("k", json.RawMessage(payload))
		if err != nil {
			return
		}
		var p webhook.Payload
		if json.Unmarshal([]byte(payload), &p) != nil {
			t.Fatalf("accepted a payload that is not a JSON object: %q", payload)
		}
		if p.URL == "" || len(p.Body) == 0 {
			t.Fatalf("accepted a payload without url or body: %q", payload)
		}
	})
}

// FuzzSignVerifyRoundTrip: whatever the id and body, a request signed the
// way the provider signs verifies with the Standard Webhooks verifier, and
// fails once the body changes.
func FuzzSignVerifyRoundTrip(f *testing.F) {
	f.Add("5c96150ae10100a82a508e4697e4efc7b3bbe1afbb9a526cf0b924bd0c44657e", []byte(`{"type": "order.paid"}`))
	f.Add("", []byte{})
	f.Add("id with spaces", []byte("\x00\xff binary"))
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, id string, body []byte) {
		if id == "" || len(id) > 512 {
			return // the provider only ever signs 64-character keys
		}
		now := time.Now()
		sig, err := wh.Sign(id, now, body)
		if err != nil {
			t.Fatal(err)
		}
		h := http.Header{}
		h.Set(standardwebhooks.HeaderWebhookID, id)
		h.Set(standardwebhooks.HeaderWebhookTimestamp, strconv.FormatInt(now.Unix(), 10))
		h.Set(standardwebhooks.HeaderWebhookSignature, sig)
		if h.Get(standardwebhooks.HeaderWebhookID) != id {
			return // not representable as a header value
		}
		if err := wh.Verify(body, h); err != nil {
			t.Fatalf("signature does not verify: %v", err)
		}
		if err := wh.Verify(append(append([]byte{}, body...), 'x'), h); err == nil {
			t.Fatal("a changed body verified")
		}
	})
}
