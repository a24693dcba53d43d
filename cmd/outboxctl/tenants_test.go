package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/outbox"
)

// TestTenantsShowsWhoWaitsForTheirTurn: effects enqueued for tenants wait
// in their queues until a dispatcher gives them jobs; tenants lists them,
// and stuck says what each waits for.
func TestTenantsShowsWhoWaitsForTheirTurn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	out, err := b.run(t, "", "tenants")
	require.NoError(t, err)
	require.Contains(t, out, "no tenant has effects queued")

	ob, err := outbox.New(outbox.Config{Jobs: outbox.JobsInTransaction, Schema: b.db.Schema})
	require.NoError(t, err)
	ctx := context.Background()
	var first uuid.UUID
	for i, tenant := range []string{"acme", "acme", "acme", "beta"} {
		require.NoError(t, pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
			eff := outbox.Effect{Kind: "webhook.order_paid", Provider: "webhook", Tenant: tenant,
				Payload: json.RawMessage(`{"url": "https://hooks.example.com/o", "body": {}}`)}
			if i == 2 {
				eff.NotBefore = time.Now().Add(time.Hour)
			}
			res, err := ob.Enqueue(ctx, tx, outbox.Event{ID: uuid.New(), Type: "order.paid"}, eff)
			if err == nil && i == 0 {
				first = res.Effects[0].ID
			}
			return err
		}))
	}
	_, err = b.db.Pool.Exec(ctx, `UPDATE `+b.db.Schema+`.side_effects SET updated_at = now() - interval '1 hour', waiting_since = now() - interval '1 hour' WHERE id = $1`, first)
	require.NoError(t, err)
	out, err = b.run(t, "", "tenants")
	require.NoError(t, err, out)
	require.Regexp(t, `webhook\s+acme\s+2\s+\S+\s+1\s+0`, out)
	require.Regexp(t, `webhook\s+beta\s+1\s+\S+\s+0\s+0`, out)
	why := b.stuckWhy(t)
	require.Contains(t, why[first], "waiting for its tenant's turn (tenant acme) since")
	require.Contains(t, why[first], "outboxctl tenants")
	out, err = b.run(t, "", "limits")
	require.NoError(t, err)
	require.NotContains(t, out, "turn:", "waiting for a turn is no rate limit")
}
