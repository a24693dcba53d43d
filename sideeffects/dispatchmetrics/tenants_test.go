package dispatchmetrics_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/testdb"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/sideeffects/dispatchmetrics"
)

// TestTenantSeries: the tenants' queues by provider over every tenant
// (how many tenants wait, their effects, the longest wait), and one by one
// for the tenants with the most waiting only. A tenant outside the top
// still moves the provider's longest wait, which is what an alert reads.
func TestTenantSeries(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	ob, err := outbox.New(outbox.Config{Schema: db.Schema})
	require.NoError(t, err)
	enqueue := func(tenant string, notBefore time.Time) uuid.UUID {
		return enqueueWebhook(t, db, ob, outbox.Effect{Tenant: tenant, NotBefore: notBefore})
	}
	// acme: four effects, one of them given its job (in flight); beta:
	// one due for ten minutes, one scheduled for tomorrow.
	acme := enqueue("acme", time.Time{})
	for range 3 {
		enqueue("acme", time.Time{})
	}
	enqueue("beta", time.Time{})
	enqueue("beta", time.Now().Add(24*time.Hour))
	_, err = db.Pool.Exec(ctx, `WITH taken AS (DELETE FROM `+db.Schema+`.outboxd_tenant_queue WHERE effect_id = $1
		RETURNING effect_id, provider, tenant)
		INSERT INTO `+db.Schema+`.outboxd_tenant_inflight (effect_id, provider, tenant) SELECT * FROM taken`, acme)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `UPDATE `+db.Schema+`.outboxd_tenant_queue SET due_at = now() - interval '10 minutes'
		WHERE tenant = 'beta' AND due_at <= now()`)
	require.NoError(t, err)

	reg := prometheus.NewRegistry()
	reg.MustRegister(dispatchmetrics.NewTenantCollector(db.Pool, db.Schema, 1))
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP outboxd_tenant_in_flight_effects A tenant's effects given a job and not ended: the part of its window in use (the tenants with the most waiting).
# TYPE outboxd_tenant_in_flight_effects gauge
outboxd_tenant_in_flight_effects{provider="webhook",tenant="acme"} 1
# HELP outboxd_tenant_queued_effects A tenant's effects due and waiting for a place in its window (the tenants with the most).
# TYPE outboxd_tenant_queued_effects gauge
outboxd_tenant_queued_effects{provider="webhook",tenant="acme"} 3
# HELP outboxd_tenants_queued_effects Effects due and waiting for a place in their tenant's window, all tenants; waiting is not an attempt.
# TYPE outboxd_tenants_queued_effects gauge
outboxd_tenants_queued_effects{provider="webhook"} 4
# HELP outboxd_tenants_scrape_ok 1 if the tenants' queues could be read for this scrape, 0 otherwise.
# TYPE outboxd_tenants_scrape_ok gauge
outboxd_tenants_scrape_ok 1
# HELP outboxd_tenants_waiting Tenants with effects due and waiting for a place in their window, all tenants.
# TYPE outboxd_tenants_waiting gauge
outboxd_tenants_waiting{provider="webhook"} 2
`), "outboxd_tenant_in_flight_effects", "outboxd_tenant_queued_effects", "outboxd_tenants_queued_effects",
		"outboxd_tenants_scrape_ok", "outboxd_tenants_waiting"))
	require.InDelta(t, 600, gauge(t, reg, "outboxd_tenants_oldest_wait_seconds"), 60,
		"beta's effect, due ten minutes ago, is the longest wait, though beta is not among the tenants listed one by one")
}

// enqueueWebhook commits one event with effect, made a webhook to
// hooks.example.com, and returns the effect's id.
func enqueueWebhook(t *testing.T, db *testdb.DB, ob *outbox.Outbox, effect outbox.Effect) uuid.UUID {
	t.Helper()
	ctx := context.Background()
	effect.Kind, effect.Provider = "webhook.order_paid", "webhook"
	effect.Payload = json.RawMessage(`{"url": "https://hooks.example.com/o", "body": {}}`)
	var id uuid.UUID
	require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		res, err := ob.Enqueue(ctx, tx, outbox.Event{ID: uuid.New(), Type: "order.paid"}, effect)
		if err == nil {
			id = res.Effects[0].ID
		}
		return err
	}))
	return id
}

// TestScrapesThatCannotReadSaySo: each collector that reads the database
// reports its scrape_ok as 0 when the read fails (here, a schema outboxd
// was never migrated into), which is what an alert on it watches.
func TestScrapesThatCannotReadSaySo(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	const missing = "outboxd_never_migrated"
	reg := prometheus.NewRegistry()
	reg.MustRegister(dispatchmetrics.NewStateCollector(db.Pool, missing), dispatchmetrics.NewLimitCollector(db.Pool, missing),
		dispatchmetrics.NewTenantCollector(db.Pool, missing, 0))
	for _, name := range []string{"outboxd_effects_scrape_ok", "outboxd_limits_scrape_ok", "outboxd_tenants_scrape_ok"} {
		require.Zero(t, gauge(t, reg, name), name)
	}
}
