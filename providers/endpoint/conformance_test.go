package endpoint_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/fakes"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/endpoint"
	"github.com/outboxd/outboxd/providers/endpoint/endpointschema"
	"github.com/outboxd/outboxd/providers/providertest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	providertest.Run(t, providertest.Fixture{New: func(t *testing.T) providertest.Setup {
		f := newFixture(t)
		// The receiver verifies with the endpoint's own secret, which
		// exists once the endpoint does.
		recv, err := fakes.NewReceiver("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
		require.NoError(t, err)
		t.Cleanup(recv.Close)
		ep, secret := f.create(t, endpoint.Endpoint{URL: recv.URL + "/hooks", EventTypes: []string{"order.paid"}})
		require.NoError(t, recv.Verify(secret))
		return providertest.Setup{
			Provider: f.provider(t),
			Kind:     endpointschema.KindPrefix + ep.ID.String(),
			Payload:  json.RawMessage(`{"endpoint_id": "` + ep.ID.String() + `"}`),
			Event:    &providers.SourceEvent{ID: "0190c3a0-7b1e-7c3d-9f00-000000000001", Type: "order.paid", Payload: json.RawMessage(`{"order": "o_42"}`), OccurredAt: time.Now()},
			Keys: func(t *testing.T, _ int) []string {
				var keys []string
				for _, d := range recv.Deliveries() {
					require.True(t, d.Verified, "signed with the endpoint's own secret")
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
