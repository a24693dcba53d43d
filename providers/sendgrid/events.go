package sendgrid

import (
	"crypto/ecdsa"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sendgrid/sendgrid-go/helpers/eventwebhook"

	"github.com/outboxd/outboxd/inbox"
	"github.com/outboxd/outboxd/providers"
)

// EventRetryWindow is how long SendGrid retries an Event Webhook delivery
// (24 hours).
const EventRetryWindow = 24 * time.Hour

// EventTolerance is how old a signed delivery may be: SendGrid's retries
// for a day, and an hour of margin. It stays below the inbox's retention
// of event ids (7 days), so no delivery is accepted after its id could
// have been forgotten. EventClockSkew is how far in the future one may be.
const (
	EventTolerance = EventRetryWindow + time.Hour
	EventClockSkew = 5 * time.Minute
)

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
	// The signature covers the timestamp: a delivery signed too long ago
	// is a replay the inbox may have forgotten, one from the future a
	// clock to fix.
	secs, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("%s %q: not a Unix time", eventwebhook.TimestampHTTPHeader, ts)
	}
	at := time.Unix(secs, 0)
	if age := time.Since(at); age > EventTolerance || age < -EventClockSkew {
		return nil, fmt.Errorf("%s %s: outside the accepted %s (SendGrid's retry window and a margin)", eventwebhook.TimestampHTTPHeader,
			at.UTC().Format(time.RFC3339), EventTolerance)
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

// acceptedEvents are the Event Webhook's event types, each about a mail
// SendGrid accepted: they prove the send request was applied. Any other
// event value proves nothing.
var acceptedEvents = map[string]bool{"processed": true, "deferred": true, "delivered": true, "bounce": true, "dropped": true,
	"open": true, "click": true, "spamreport": true, "unsubscribe": true, "group_unsubscribe": true, "group_resubscribe": true}

// ParseEvent reads one SendGrid event: an event of SendGrid's documented
// types about a mail shows SendGrid accepted the request (done), any other
// is informational; processed, deferred, delivered, bounce and dropped are
// also its delivery status.
func ParseEvent(body []byte) (providers.EventReport, error) {
	var e map[string]any
	if err := json.Unmarshal(body, &e); err != nil {
		return providers.EventReport{}, fmt.Errorf("sendgrid event: %w", err)
	}
	str := func(k string) string { s, _ := e[k].(string); return s }
	r := providers.EventReport{Provider: Name, EventID: str("sg_event_id"), Type: str("event"), Key: str(CustomArgKey),
		Outcome: providers.EventInformational}
	if acceptedEvents[r.Type] {
		r.Outcome = providers.EventDone
	}
	if ts, ok := e["timestamp"].(float64); ok {
		r.At = time.Unix(int64(ts), 0)
	}
	// sg_message_id is the X-Message-Id of the send, plus a suffix.
	r.ObjectID, _, _ = strings.Cut(str("sg_message_id"), ".")
	if deliveryStatuses[r.Type] {
		r.Delivery = r.Type
		r.Status = r.Type
		r.Detail = strings.TrimSpace(strings.Join([]string{str("reason"), str("response")}, " "))
	}
	return r, nil
}
