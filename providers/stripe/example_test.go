package stripe_test

import (
	"fmt"

	"github.com/outboxd/outboxd/providers/stripe"
)

// ExampleParseEvent reads a Stripe event (after its signature is verified)
// as outboxd applies it: the effect's key from the object's metadata, and
// what the event proves about the request that created the object.
func ExampleParseEvent() {
	ev, err := stripe.ParseEvent([]byte(`{"id": "evt_1", "object": "event", "type": "refund.created", "created": 1700000000,
		"data": {"object": {"id": "re_1", "object": "refund", "status": "succeeded", "amount": 500, "currency": "eur",
			"metadata": {"outboxd_idempotency_key": "4bccfbccfcac8e1f"}}}}`))
	if err != nil {
		panic(err)
	}
	fmt.Println(ev.Provider, ev.Type, ev.ObjectID, ev.Key, ev.Outcome)
	fmt.Println(ev.Status, *ev.Amount, ev.Currency)
	// Output:
	// stripe refund.created re_1 4bccfbccfcac8e1f done
	// succeeded 500 eur
}
