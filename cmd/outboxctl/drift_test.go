package main

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/engine"
	"github.com/outboxd/outboxd/providers"
)

// What provider events recorded is visible to the operator: a confirmed
// email that bounced shows as such in show, and drift is listed with what
// to check, in drift and in the effect's show.
func TestShowAndDriftReportProviderEvents(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	apply := func(ev providers.EventReport) {
		require.NoError(t, pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
			_, err := b.store.ApplyProviderEvent(ctx, tx, ev)
			return err
		}))
	}
	confirmed := b.effect(t, "confirmed")
	apply(providers.EventReport{Provider: "sendgrid", EventID: "sg_b1", Type: "bounce", Key: confirmed.IdempotencyKey, ObjectID: "msg_1",
		Outcome: providers.EventDone, Delivery: "bounce", Detail: "550 5.1.1 user unknown", At: time.Now()})
	cancelled := b.effect(t, "cancelled")
	apply(providers.EventReport{Provider: "webhook", EventID: "evt_c1", Type: "order.paid.delivered", Key: cancelled.IdempotencyKey, ObjectID: "rcv_9",
		Outcome: providers.EventDone, At: time.Now()})

	out, err := b.run(t, "", "show", confirmed.ID.String())
	require.NoError(t, err, out)
	require.Contains(t, out, "bounce at ")
	require.Contains(t, out, "550 5.1.1 user unknown; the provider accepted the request but the mail did not arrive")

	out, err = b.run(t, "", "drift")
	require.NoError(t, err, out)
	require.Contains(t, out, "acted_while_cancelled  effect "+cancelled.ID.String())
	require.Contains(t, out, "check: webhook acted on "+cancelled.ID.String()+" although it was cancelled")
	out, err = b.run(t, "", "show", cancelled.ID.String())
	require.NoError(t, err, out)
	require.Contains(t, out, "Drift found in provider events (1):")
	out, err = b.run(t, "", "drift", "--reason", engine.DriftTwoObjects)
	require.NoError(t, err, out)
	require.Contains(t, out, "no drift in the last 168h")
	_, err = b.run(t, "", "drift", "--since", "yesterday")
	require.ErrorContains(t, err, "--since")
}
