package outboxtest_test

import (
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/outbox/outboxtest"
	"github.com/outboxd/outboxd/providers/stripe/stripeschema"
)

// Example is the shape of an application's test: after the code under test
// ran in tx, assert inside tx (before any commit) what it enqueued and what
// it did not. The payload is compared as JSON, so the typed value the code
// enqueued serves as the expectation. (It needs a test's *testing.T, so it
// is shown, not run.)
func Example() {
	testRefund := func(t *testing.T, tx pgx.Tx) {
		// ... the code under test refunds order ord_42 in tx ...
		amount := int64(500)
		want, err := stripeschema.RefundCreate{PaymentIntent: "pi_123", Amount: &amount}.EffectPayload()
		if err != nil {
			t.Fatal(err)
		}
		e := outboxtest.RequireEnqueued(t, tx, "outboxd", "stripe.refund", want)
		t.Logf("refund effect %s, key %s", e.ID, e.IdempotencyKey)
		outboxtest.RequireNotEnqueued(t, tx, "outboxd", "email.receipt")
	}
	_ = testRefund
}
