package sendgrid_test

import (
	"fmt"

	"github.com/outboxd/outboxd/providers/sendgrid"
)

// ExampleParseEvent reads one SendGrid event (after the batch's signature
// is verified) as outboxd applies it: the effect's key from the mail's
// custom arguments and the delivery status it records.
func ExampleParseEvent() {
	ev, err := sendgrid.ParseEvent([]byte(`{"sg_event_id": "sg_1", "event": "delivered", "timestamp": 1700000000,
		"sg_message_id": "msg_1.filter", "outboxd_idempotency_key": "4bccfbccfcac8e1f"}`))
	if err != nil {
		panic(err)
	}
	fmt.Println(ev.Provider, ev.Type, ev.Key, ev.Delivery, ev.Outcome)
	// Output:
	// sendgrid delivered 4bccfbccfcac8e1f delivered done
}
