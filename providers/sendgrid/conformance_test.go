package sendgrid_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/outboxd/outboxd/internal/fakes"
	"github.com/outboxd/outboxd/providers/providertest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	providertest.Run(t, providertest.Fixture{New: func(t *testing.T) providertest.Setup {
		f := fakes.NewFakeSendGrid()
		t.Cleanup(f.Close)
		return providertest.Setup{
			Kind:     "email.welcome",
			Provider: newProvider(t, f.URL),
			Payload:  json.RawMessage(welcome),
			Keys: func(*testing.T, int) []string {
				var keys []string
				for _, r := range f.Requests() {
					keys = append(keys, r.Key)
				}
				return keys
			},
			Throttle: func() {
				f.Respond(func(w http.ResponseWriter, _ *http.Request) int {
					w.WriteHeader(http.StatusTooManyRequests)
					return http.StatusTooManyRequests
				})
			},
			Reject: func() {
				f.Respond(func(w http.ResponseWriter, _ *http.Request) int {
					w.WriteHeader(http.StatusBadRequest)
					_, _ = w.Write([]byte(`{"errors": [{"message": "The to array is required.", "field": "personalizations.0.to"}]}`))
					return http.StatusBadRequest
				})
			},
			Unreachable: func(*testing.T) { f.Close() },
		}
	}})
}
