package stripe_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/fakes"
	"github.com/outboxd/outboxd/providers/providertest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	providertest.Run(t, providertest.Fixture{New: func(t *testing.T) providertest.Setup {
		f := fakes.NewFakeStripe()
		t.Cleanup(f.Close)
		return providertest.Setup{
			Kind:     "stripe.refund",
			Provider: newProvider(t, f.URL, 5*time.Second),
			Payload:  json.RawMessage(operationPayloads["refund.create"].payload),
			Keys: func(t *testing.T, _ int) []string {
				var keys []string
				for _, r := range f.Requests() {
					require.Equal(t, "/v1/refunds", r.Path)
					keys = append(keys, r.IdempotencyKey)
				}
				return keys
			},
			Throttle: func() { f.Respond("/v1/refunds", fakes.StripeError(429, "rate_limit_error", "rate_limit")) },
			Reject: func() {
				f.Respond("/v1/refunds", fakes.StripeError(400, "invalid_request_error", "parameter_invalid_integer"))
			},
			Unreachable: func(*testing.T) { f.Close() },
		}
	}})
}
