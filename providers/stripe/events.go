package stripe

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	stripego "github.com/stripe/stripe-go/v79"
	"github.com/stripe/stripe-go/v79/webhook"

	"github.com/outboxd/outboxd/inbox"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/stripe/stripeschema"
)

// EventRetryWindow is how long Stripe retries an event delivery (live
// mode: up to 3 days).
const EventRetryWindow = 3 * 24 * time.Hour

// EventVerifier verifies Stripe's Stripe-Signature header with stripe-go's
// webhook package (signing secret whsec_…, timestamp within tolerance;
// webhook.DefaultTolerance when 0). Events of any API version are accepted:
// outboxd reads only the id, the type and the object's id, status and
// metadata.
func EventVerifier(secret string, tolerance time.Duration) (inbox.Verifier, error) {
	if !strings.HasPrefix(secret, "whsec_") {
		return nil, errors.New("stripe: the webhook signing secret starts with whsec_ (Dashboard → Developers → Webhooks → Signing secret)")
	}
	if tolerance <= 0 {
		tolerance = webhook.DefaultTolerance
	}
	return &eventVerifier{secret: secret, tolerance: tolerance}, nil
}

type eventVerifier struct {
	secret    string
	tolerance time.Duration
}

func (v *eventVerifier) RetryWindow() time.Duration { return EventRetryWindow }

func (v *eventVerifier) Verify(h http.Header, body []byte) ([]inbox.Message, error) {
	ev, err := webhook.ConstructEventWithOptions(body, h.Get("Stripe-Signature"), v.secret,
		webhook.ConstructEventOptions{Tolerance: v.tolerance, IgnoreAPIVersionMismatch: true})
	if err != nil {
		return nil, err
	}
	if ev.ID == "" {
		return nil, errors.New("event without an id")
	}
	return []inbox.Message{{ID: ev.ID, Type: string(ev.Type), Body: body}}, nil
}

// ParseEvent reads what a verified Stripe event says about the object
// outboxd created with an effect's key: created, succeeded (done), or
// failed, canceled, reversed afterwards (undone).
func ParseEvent(body []byte) (providers.EventReport, error) {
	var ev stripego.Event
	if err := json.Unmarshal(body, &ev); err != nil {
		return providers.EventReport{}, fmt.Errorf("stripe event: %w", err)
	}
	r := providers.EventReport{Provider: Name, EventID: ev.ID, Type: string(ev.Type), Outcome: providers.EventInformational,
		At: time.Unix(ev.Created, 0)}
	if ev.Data == nil || ev.Data.Object == nil {
		return r, nil
	}
	obj := ev.Data.Object
	r.ObjectID, _ = obj["id"].(string)
	if md, ok := obj["metadata"].(map[string]any); ok {
		r.Key, _ = md[MetadataKey].(string)
	}
	status, _ := obj["status"].(string)
	objType, _ := obj["object"].(string)
	r.Status = status
	if amount, ok := obj["amount"].(float64); ok {
		a := int64(amount)
		r.Amount = &a
	}
	r.Currency, _ = obj["currency"].(string)
	r.Outcome = classifyEvent(r.Type, objType, status)
	r.Operations = operationsOn(objType)
	r.Target = stripeschema.Target
	if r.Outcome == providers.EventUndone {
		r.Detail = status
		if reason, _ := obj["failure_reason"].(string); reason != "" {
			r.Detail += ": " + reason
		}
		if reason, _ := obj["cancellation_reason"].(string); reason != "" {
			r.Detail += ": " + reason
		}
	}
	return r, nil
}

// classifyEvent maps an event on an object outboxd creates (payment intent,
// refund, customer, transfer) to what it says about the creating request.
func classifyEvent(eventType, objType, status string) providers.EventOutcome {
	switch {
	case eventType == "payment_intent.canceled", eventType == "refund.failed", eventType == "transfer.reversed":
		return providers.EventUndone
	case objType == "refund" && (status == "failed" || status == "canceled"):
		return providers.EventUndone
	case strings.HasSuffix(eventType, ".deleted"):
		return providers.EventInformational
	case objType == "payment_intent", objType == "refund", objType == "customer", objType == "transfer":
		// Any other event on the object shows it exists: the request that
		// created it was applied.
		return providers.EventDone
	}
	return providers.EventInformational
}

// operationsOn is what an event about an object of objType can speak for:
// the operations whose requests create or change such an object, and so
// carry their key in its metadata. None for any other object.
func operationsOn(objType string) []string {
	switch objType {
	case "payment_intent":
		return []string{"payment_intent.create", "payment_intent.capture", "payment_intent.cancel"}
	case "refund":
		return []string{"refund.create"}
	case "customer":
		return []string{"customer.create"}
	case "transfer":
		return []string{"transfer.create"}
	}
	return []string{}
}
