package dispatchmetrics_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/engine"
	"github.com/outboxd/outboxd/internal/store"
	"github.com/outboxd/outboxd/internal/testdb"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/sideeffects/dispatchmetrics"
)

// TestLimitSeries: each limit key's rate, pause, 429s, waiting effects,
// the longest wait, and the age of the oldest key window among the
// waiting effects, so that an alert names them before the window closes.
func TestLimitSeries(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	st := store.NewStore(db.Schema)
	const key = "webhook:hooks.example.com"
	_, _, err := engine.Throttle(ctx, st, db.Pool, key, engine.A429{After: time.Minute, Base: time.Second, Observed: 12, Again: true})
	require.NoError(t, err)
	ob, err := outbox.New(outbox.Config{Jobs: outbox.JobsInTransaction, Schema: db.Schema})
	require.NoError(t, err)
	id := enqueueWebhook(t, db, ob, outbox.Effect{})
	require.NoError(t, st.MarkWaiting(ctx, db.Pool, id, key))
	_, err = db.Pool.Exec(ctx, `UPDATE `+db.Schema+`.side_effects SET key_window_from = now() - interval '20 hours' WHERE id = $1`, id)
	require.NoError(t, err)

	reg := prometheus.NewRegistry()
	reg.MustRegister(dispatchmetrics.NewLimitCollector(db.Pool, db.Schema))
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP outboxd_limit_throttled_total 429s a limit key's provider answered, all replicas.
# TYPE outboxd_limit_throttled_total counter
outboxd_limit_throttled_total{key="webhook:hooks.example.com"} 1
# HELP outboxd_limit_waiting_effects Effects waiting for a limit key (a pause, or no token when due); waiting is not an attempt.
# TYPE outboxd_limit_waiting_effects gauge
outboxd_limit_waiting_effects{key="webhook:hooks.example.com"} 1
`), "outboxd_limit_throttled_total", "outboxd_limit_waiting_effects"))
	age := gauge(t, reg, "outboxd_limit_waiting_key_window_age_seconds")
	require.InDelta(t, 20*3600, age, 60, "the oldest key window among the waiting is 20 hours old")
	require.Positive(t, gauge(t, reg, "outboxd_limit_paused_seconds"))
}

func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no series %s", name)
	return 0
}
