package main

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/cli"
	"github.com/outboxd/outboxd/outboxtype"
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
	out, err = b.run(t, "", "drift", "--reason", outboxtype.DriftTwoObjects)
	require.NoError(t, err, out)
	require.Contains(t, out, "no unacknowledged drift in the last 168h")
	_, err = b.run(t, "", "drift", "--since", "yesterday")
	require.ErrorContains(t, err, "--since")
}

// TestDriftShowsTheObjectAndCanBeAcknowledged: a drift record says what
// the provider's object was (status, amount, currency, when) and what the
// effect is now; an operator acknowledges it with a reason, and it leaves
// the list (and the gauge) but stays in --all with the review.
func TestDriftShowsTheObjectAndCanBeAcknowledged(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	_, err := b.db.Pool.Exec(ctx, `UPDATE `+b.db.Schema+`.side_effects SET provider = 'stripe',
		payload = '{"operation": "refund.create", "params": {"payment_intent": "pi_1"}}' WHERE id = $1`, b.ids["failed"])
	require.NoError(t, err)
	failed := b.effect(t, "failed")
	amount := int64(4200)
	require.NoError(t, pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
		_, err := b.store.ApplyProviderEvent(ctx, tx, providers.EventReport{Provider: "stripe", EventID: "evt_r1", Type: "refund.created",
			Key: failed.IdempotencyKey, ObjectID: "re_77", Outcome: providers.EventDone, Status: "succeeded", Amount: &amount, Currency: "eur",
			At: time.Date(2026, 11, 25, 9, 30, 0, 0, time.UTC)})
		return err
	}))
	out, err := b.run(t, "", "drift")
	require.NoError(t, err, out)
	require.Regexp(t, `#\d+  \S+  acted_while_failed  effect `+failed.ID.String()+` \(webhook.order_paid; failed when found, failed now\)`, out)
	require.Contains(t, out, "stripe event evt_r1 (refund.created) at 2026-11-25T09:30:00Z")
	require.Contains(t, out, "object re_77: status succeeded, amount 4200 EUR")
	require.Contains(t, out, "reviewed? outboxctl drift ack")
	gauge, err := b.store.UnacknowledgedDrift(ctx, b.db.Pool)
	require.NoError(t, err)
	require.EqualValues(t, 1, gauge)

	var recs []struct {
		ID int64 `json:"id"`
	}
	out, err = b.run(t, "", "drift", "--json")
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal([]byte(out), &recs))
	require.Len(t, recs, 1)
	id := strconv.FormatInt(recs[0].ID, 10)

	_, err = b.run(t, "", "drift", "ack", id)
	require.Equal(t, 2, cli.ExitCode(err))
	require.ErrorContains(t, err, "--reason is required")
	_, err = b.run(t, "", "drift", "ack", "re_77", "--reason", "x")
	require.ErrorContains(t, err, "give drift record ids")
	out, err = b.run(t, "", "drift", "ack", "#"+id, "--reason", "refund re_77 is real: confirmed the effect by hand")
	require.NoError(t, err, out)
	require.Contains(t, out, "acknowledged drift #"+id)
	_, err = b.run(t, "", "drift", "ack", id, "--reason", "again")
	require.ErrorContains(t, err, "#"+id+" not acknowledged")

	out, err = b.run(t, "", "drift")
	require.NoError(t, err)
	require.Contains(t, out, "no unacknowledged drift")
	out, err = b.run(t, "", "drift", "--all")
	require.NoError(t, err)
	require.Contains(t, out, "by oncall@example.com: refund re_77 is real")
	gauge, err = b.store.UnacknowledgedDrift(ctx, b.db.Pool)
	require.NoError(t, err)
	require.Zero(t, gauge)
}
