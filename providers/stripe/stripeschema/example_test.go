package stripeschema_test

import (
	"fmt"

	"github.com/outboxd/outboxd/providers/stripe/stripeschema"
)

// ExampleRefundCreate_EffectPayload is the JSON a typed refund stores
// (outbox.EffectOf builds the effect from it): the operation and its
// params, unset fields left out.
func ExampleRefundCreate_EffectPayload() {
	amount := int64(500)
	raw, err := stripeschema.RefundCreate{PaymentIntent: "pi_123", Amount: &amount, Reason: "requested_by_customer"}.EffectPayload()
	if err != nil {
		panic(err)
	}
	fmt.Println(string(raw))
	_, err = stripeschema.Parse(raw)
	fmt.Println("valid:", err == nil)
	// Output:
	// {"operation":"refund.create","params":{"payment_intent":"pi_123","amount":500,"reason":"requested_by_customer"}}
	// valid: true
}
