package outboxmetrics_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/outbox/idempotency"
	"github.com/outboxd/outboxd/outbox/outboxmetrics"
	"github.com/outboxd/outboxd/outboxtype"
)

func TestIdempotencyOutcomesAreCounted(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := outboxmetrics.NewIdempotency(reg)
	require.NoError(t, err)
	m.Observe(outboxtype.KeyRequest{Outcome: string(idempotency.Executed)})
	m.Observe(outboxtype.KeyRequest{Outcome: string(idempotency.Replayed)})
	m.Observe(outboxtype.KeyRequest{Outcome: string(idempotency.Replayed)})
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP outboxd_idempotency_requests_total Requests carrying an idempotency key by outcome: executed, replayed, in_flight (409), fingerprint_mismatch (422), invalid (4xx), rolled_back (5xx, panic or failed commit: nothing stored).
# TYPE outboxd_idempotency_requests_total counter
outboxd_idempotency_requests_total{outcome="executed"} 1
outboxd_idempotency_requests_total{outcome="fingerprint_mismatch"} 0
outboxd_idempotency_requests_total{outcome="in_flight"} 0
outboxd_idempotency_requests_total{outcome="invalid"} 0
outboxd_idempotency_requests_total{outcome="replayed"} 2
outboxd_idempotency_requests_total{outcome="rolled_back"} 0
`)))
	_, err = outboxmetrics.NewIdempotency(reg)
	require.ErrorContains(t, err, "outboxmetrics:", "registered twice")
}
