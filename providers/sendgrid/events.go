package sendgrid

import (
	"crypto/ecdsa"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/sendgrid/sendgrid-go/helpers/eventwebhook"

	"github.com/outboxd/outboxd/inbox"
	"github.com/outboxd/outboxd/providers"
)

// EventRetryWindow is how long SendGrid retries an Event Webhook delivery
// (24 hours).
const EventRetryWindow = 24 * time.Hour

// EventVerifier verifies SendGrid's signed Event Webhook (ECDSA, the
// verification key from Settings → Mail Settings → Event Webhook, base64)
// with sendgrid-go's helpers/eventwebhook, and splits the batch into one
// message per event, identified by sg_event_id.
func EventVerifier(publicKey string) (inbox.Verifier, error) {
	key, err := eventwebhook.ConvertPublicKeyBase64ToECDSA(publicKey)
	if err != nil {
		return nil, fmt.Errorf("sendgrid: Event Webhook verification key: %w (want the base64 key SendGrid shows)", err)
	}
	return &eventVerifier{key: key}, nil
}

type eventVerifier struct{ key *ecdsa.PublicKey }

func (v *eventVerifier) RetryWindow() time.Duration { return EventRetryWindow }

func (v *eventVerifier) Verify(h http.Header, body []byte) ([]inbox.Message, error) {
	sig, ts := h.Get(eventwebhook.VerificationHTTPHeader), h.Get(eventwebhook.TimestampHTTPHeader)
	if sig == "" || ts == "" {
		return nil, fmt.Errorf("missing %s or %s header", eventwebhook.VerificationHTTPHeader, eventwebhook.TimestampHTTPHeader)
	}
	ok, err := eventwebhook.VerifySignature(v.key, body, sig, ts)
	if err != nil {
		return nil, fmt.Errorf("signature: %w", err)
	}
	if !ok {
		return nil, errors.New("signature does not match")
	}
	var events []json.RawMessage
	if err := json.Unmarshal(body, &events); err != nil {
		return nil, fmt.Errorf("want a JSON array of events: %w", err)
	}
	out := make([]inbox.Message, 0, len(events))
	for i, raw := range events {
		var e struct {
			ID    string `json:"sg_event_id"`
			Event string `json:"event"`
		}
		if err := json.Unmarshal(raw, &e); err != nil || e.ID == "" {
			return nil, fmt.Errorf("event %d: no sg_event_id", i)
		}
		out = append(out, inbox.Message{ID: e.ID, Type: e.Event, Body: raw})
	}
	return out, nil
}

// deliveryStatuses are the events that say where a mail is.
var deliveryStatuses = map[string]bool{"processed": true, "deferred": true, "delivered": true, "bounce": true, "dropped": true}

// ParseEvent reads one SendGrid event: any event about a mail shows SendGrid
// accepted the request (done); processed, deferred, delivered, bounce and
// dropped are also its delivery status.
func ParseEvent(body []byte) (providers.EventReport, error) {
	var e map[string]any
	if err := json.Unmarshal(body, &e); err != nil {
		return providers.EventReport{}, fmt.Errorf("sendgrid event: %w", err)
	}
	str := func(k string) string { s, _ := e[k].(string); return s }
	r := providers.EventReport{Provider: Name, EventID: str("sg_event_id"), Type: str("event"), Key: str(CustomArgKey),
		Outcome: providers.EventDone}
	if ts, ok := e["timestamp"].(float64); ok {
		r.At = time.Unix(int64(ts), 0)
	}
	// sg_message_id is the X-Message-Id of the send, plus a suffix.
	r.ObjectID, _, _ = strings.Cut(str("sg_message_id"), ".")
	if deliveryStatuses[r.Type] {
		r.Delivery = r.Type
		r.Detail = strings.TrimSpace(strings.Join([]string{str("reason"), str("response")}, " "))
	}
	return r, nil
}
