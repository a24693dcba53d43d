package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/testdb"
)

// TestBenchRuns runs every phase at a tiny size: it checks that the
// benchmark works end to end and reports every figure, not how fast anything
// is.
func TestBenchRuns(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "bench.json")
	var buf bytes.Buffer
	err := run(context.Background(), &buf, settings{
		DatabaseURL: testdb.URL(), EnqueueDuration: 300 * time.Millisecond, Effects: 200, WebhookEffects: 200,
		Workers: 10, PoolSize: 20, FetchCooldown: 5 * time.Millisecond, FetchPollInterval: 100 * time.Millisecond,
		Rates: []int{100}, RateDuration: 500 * time.Millisecond, AdminRows: 5000, Out: out,
	})
	require.NoError(t, err, buf.String())
	raw, err := os.ReadFile(out)
	require.NoError(t, err)
	var rep report
	require.NoError(t, json.Unmarshal(raw, &rep))
	require.Len(t, rep.Enqueue, 8, "bare and three ways of enqueueing, at two concurrencies")
	require.Len(t, rep.Idempotency, 4, "with and without the middleware, at two concurrencies")
	require.Positive(t, rep.Idempotency[1].CostRatio)
	require.Len(t, rep.Dispatch, 4, "River fast, River with outboxd's settings, outboxd no-op, outboxd webhook")
	require.Len(t, rep.Latency, 3, "one rate, three ways of enqueueing")
	require.NotEmpty(t, rep.Machine.Autovacuum)
	require.Len(t, rep.Admin, 3)
	require.Len(t, rep.Web, 6, "every web view page timed")
	require.Equal(t, 200, rep.Dispatch[2].N)
	require.Positive(t, rep.Dispatch[2].VsRiver)
	require.Positive(t, rep.Dispatch[2].VsRiverSame)
	require.Positive(t, rep.Enqueue[1].CostRatio)
	require.Equal(t, 50, rep.Latency[0].N)
	require.Equal(t, latencyRuns, rep.Latency[0].Runs)
	require.LessOrEqual(t, rep.Latency[0].CallP99Min, rep.Latency[0].CallP99)
	require.GreaterOrEqual(t, rep.Latency[0].CallP99Max, rep.Latency[0].CallP99)
	require.GreaterOrEqual(t, rep.Dispatch[2].Updates, int64(2*200), "a claim and a confirmation per effect counted")
	require.Positive(t, rep.Dispatch[2].HOTUpdates, "claims are HOT updates")
	for _, a := range rep.Admin {
		require.True(t, a.IndexUsed, "%s: %s", a.Name, a.Plan)
	}
	require.Contains(t, buf.String(), "DISPATCH")
	require.Contains(t, buf.String(), "HOT UPDATES")
	require.Contains(t, buf.String(), "autovacuum")
	require.Contains(t, buf.String(), "IDEMPOTENCY-KEY MIDDLEWARE")
}
