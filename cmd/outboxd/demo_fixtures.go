package main

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/outboxd/outboxd/internal/fakes"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/providers/sendgrid"
	"github.com/outboxd/outboxd/providers/stripe"
	"github.com/outboxd/outboxd/providers/webhook"
)

// The demo's orders, their events and effects, and its Stripe.

func orderEvent(id string, amount int) outbox.Event {
	return outbox.Event{
		ID:            outbox.EventID("order.paid", id),
		AggregateType: "order",
		AggregateID:   id,
		Type:          "order.paid",
		Payload:       json.RawMessage(fmt.Sprintf(`{"order": %q, "amount": %d, "currency": "eur"}`, id, amount)),
	}
}

func orderEffects(base, id, path string, capture bool) []outbox.Effect {
	body := fmt.Sprintf(`{"type": "order.paid", "order": %q}`, id)
	effs := []outbox.Effect{{
		Kind: "webhook.order_paid", Provider: webhook.Name,
		Payload: json.RawMessage(fmt.Sprintf(`{"url": %q, "body": %s}`, base+path, body)),
	}}
	if capture {
		effs = append(effs, outbox.Effect{
			Kind: "stripe.capture", Provider: stripe.Name,
			Payload: json.RawMessage(fmt.Sprintf(`{"operation": "payment_intent.capture", "params": {"id": "pi_%s"}}`, strings.TrimPrefix(id, "ord_"))),
		})
	}
	if path == "/orders" {
		effs = append(effs, outbox.Effect{
			Kind: "email.receipt", Provider: sendgrid.Name,
			Payload: json.RawMessage(fmt.Sprintf(`{"from": {"email": "shop@example.com", "name": "Shop"},
				"to": [{"email": "customer+%s@example.com"}], "subject": "Receipt for %s", "text": "Thank you for order %s."}`, id, id, id)),
		})
	}
	return effs
}

// demoStripe runs stripe-mock when it is installed, else a local fake, and
// says which.
func demoStripe() (base, what string, stop func()) {
	if bin, err := fakes.FindStripeMock(); err == nil {
		if url, stop, err := fakes.RunStripeMock(bin); err == nil {
			return url, "stripe-mock " + url + " (Stripe's API spec and fixtures)", stop
		}
	}
	f := fakes.NewFakeStripe()
	return f.URL, "local fake Stripe " + f.URL + " (stripe-mock not installed: go install github.com/stripe/stripe-mock@" +
		fakes.StripeMockVersion + ")", f.Close
}
