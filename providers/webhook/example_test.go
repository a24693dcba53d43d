package webhook_test

import (
	"encoding/json"
	"fmt"

	"github.com/outboxd/outboxd/providers/webhook"
)

// ExamplePayload_EffectPayload is a typed webhook call and what the schema
// says of it: a public HTTPS URL passes, a loopback one is refused unless
// the network is allowed.
func ExamplePayload_EffectPayload() {
	call := webhook.Payload{URL: "https://hooks.example.com/orders", Body: json.RawMessage(`{"type": "order.paid", "order": "ord_42"}`)}
	raw, _ := call.EffectPayload()
	fmt.Println(string(raw))
	fmt.Println(webhook.Schema{}.ValidatePayload("webhook.order_paid", raw))
	call.URL = "http://127.0.0.1:9000/in"
	raw, _ = call.EffectPayload()
	fmt.Println(webhook.Schema{}.ValidatePayload("webhook.order_paid", raw))
	// Output:
	// {"url":"https://hooks.example.com/orders","body":{"type":"order.paid","order":"ord_42"}}
	// <nil>
	// payload.url: 127.0.0.1 is a loopback address: to reach it, allow its network (outboxd and outboxctl: --webhook-allow-cidrs, OUTBOXD_WEBHOOK_ALLOW_CIDRS; in Go, webhook.Schema.AllowedNetworks at enqueue and the provider's AllowedNetworks at dispatch)
}
