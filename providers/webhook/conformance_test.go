package webhook_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/fakes"
	"github.com/outboxd/outboxd/providers/providertest"
	"github.com/outboxd/outboxd/providers/webhook"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	providertest.Run(t, providertest.Fixture{New: func(t *testing.T) providertest.Setup {
		recv, err := fakes.NewReceiver(secret)
		require.NoError(t, err)
		t.Cleanup(recv.Close)
		return providertest.Setup{
			Kind:     "webhook.order_paid",
			Provider: newProvider(t, webhook.Config{AllowedNetworks: loopback}),
			Payload:  json.RawMessage(`{"url": "` + recv.URL + `/hooks", "body": {"order": "o_42"}}`),
			Keys: func(t *testing.T, _ int) []string {
				var keys []string
				for _, d := range recv.Deliveries() {
					require.True(t, d.Verified, "signed per Standard Webhooks")
					require.Equal(t, d.ID, d.Key, "webhook-id and Idempotency-Key are the key")
					keys = append(keys, d.Key)
				}
				return keys
			},
			Throttle:    func() { recv.Respond("/hooks", fakes.Status(http.StatusTooManyRequests, "Retry-After", "1")) },
			Reject:      func() { recv.Respond("/hooks", fakes.Status(http.StatusGone)) },
			Unreachable: func(*testing.T) { recv.Close() },
		}
	}})
}
