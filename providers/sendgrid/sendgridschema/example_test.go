package sendgridschema_test

import (
	"fmt"

	"github.com/outboxd/outboxd/providers/sendgrid/sendgridschema"
)

// ExamplePayload_EffectPayload is the JSON a typed mail stores, and what
// the schema says of a mail without a recipient.
func ExamplePayload_EffectPayload() {
	mail := sendgridschema.Payload{
		From:    sendgridschema.Address{Email: "shop@example.com", Name: "Shop"},
		To:      []sendgridschema.Address{{Email: "ada@example.com"}},
		Subject: "Your receipt",
		Text:    "Thanks for your order.",
	}
	raw, _ := mail.EffectPayload()
	fmt.Println(string(raw))
	mail.To = nil
	raw, _ = mail.EffectPayload()
	fmt.Println(sendgridschema.Schema{}.ValidatePayload("email.receipt", raw))
	// Output:
	// {"from":{"email":"shop@example.com","name":"Shop"},"to":[{"email":"ada@example.com"}],"subject":"Your receipt","text":"Thanks for your order."}
	// payload.to: required: at least one recipient
}
