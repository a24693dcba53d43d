package main

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/cli"
	"github.com/outboxd/outboxd/internal/fakes"
	"github.com/outboxd/outboxd/internal/testbrokers"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/nats"
)

// stripeList answers a Stripe search or list request with objects.
func stripeList(object string, objects ...map[string]any) fakes.Response {
	return func(w http.ResponseWriter, _ *http.Request) int {
		w.Header().Set("Content-Type", "application/json")
		b, _ := json.Marshal(map[string]any{"object": object, "data": objects, "has_more": false, "url": "/v1/x"})
		_, _ = w.Write(b)
		return http.StatusOK
	}
}

func TestReconcileAsksStripeAndSuggests(t *testing.T) {
	t.Parallel()
	b := newTestBundle(t)
	db := b.db
	st := fakes.NewFakeStripe()
	t.Cleanup(st.Close)
	ob, err := outbox.New(outbox.Config{Jobs: outbox.JobsInTransaction, Schema: db.Schema})
	require.NoError(t, err)
	ctx := context.Background()
	enqueue := func(name, payload string) *outboxtype.Effect {
		require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			res, err := ob.Enqueue(ctx, tx, outbox.Event{ID: uuid.New(), Type: "order.paid"},
				outbox.Effect{Kind: "stripe." + name, Provider: "stripe", Payload: json.RawMessage(payload)})
			if err == nil {
				b.ids[name] = res.Effects[0].ID
			}
			return err
		}))
		_, err := db.Pool.Exec(ctx, `UPDATE `+db.Schema+`.side_effects SET state = 'failed', in_doubt = true, attempts = 1,
			first_fired_at = now(), key_window_from = now(), last_error = 'retries exhausted: no response: timeout' WHERE id = $1`, b.ids[name])
		require.NoError(t, err)
		return b.effect(t, name)
	}
	run := func(args ...string) (string, error) {
		return b.run(t, "", append(args, "--stripe-api-key", "sk_test_reconcile", "--stripe-api-base", st.URL)...)
	}

	// One customer carries the key: confirm it, or --apply.
	cust := enqueue("customer", `{"operation": "customer.create", "params": {"email": "ada@example.com"}}`)
	found := []map[string]any{{"id": "cus_found", "object": "customer", "created": 1700000000,
		"metadata": map[string]any{"outboxd_idempotency_key": cust.IdempotencyKey}}}
	st.Respond("/v1/customers/search", stripeList("search_result", found...), stripeList("search_result", found...))
	out, err := run("reconcile", cust.ID.String())
	require.NoError(t, err, out)
	require.Contains(t, out, "stripe: searched customers for metadata['outboxd_idempotency_key']:'"+cust.IdempotencyKey+"'")
	require.Contains(t, out, "found: customer cus_found")
	require.Contains(t, out, "`outboxctl confirm "+cust.ID.String()+" --ref cus_found")
	reqs := st.Requests()
	require.Equal(t, "GET", reqs[len(reqs)-1].Method, "reads only")
	out, err = run("reconcile", cust.ID.String(), "--apply")
	require.NoError(t, err, out)
	require.Contains(t, out, "applied: failed -> confirmed with ref cus_found (audited)")
	got := b.effect(t, "customer")
	require.Equal(t, outboxtype.StateConfirmed, got.State)
	require.Equal(t, "cus_found", *got.ProviderRef)
	audit, err := b.store.Audit(ctx, db.Pool, got.ID)
	require.NoError(t, err)
	require.Contains(t, audit[len(audit)-1].Reason, "reconcile: customer cus_found found at stripe")

	// Refunds are listed by payment intent and matched on the key.
	refund := enqueue("refund", `{"operation": "refund.create", "params": {"payment_intent": "pi_9"}}`)
	st.Respond("/v1/refunds", stripeList("list",
		map[string]any{"id": "re_other", "object": "refund", "status": "succeeded", "metadata": map[string]any{"outboxd_idempotency_key": "not-this-one"}},
		map[string]any{"id": "re_ours", "object": "refund", "status": "succeeded", "metadata": map[string]any{"outboxd_idempotency_key": refund.IdempotencyKey}}))
	out, err = run("reconcile", refund.ID.String())
	require.NoError(t, err, out)
	require.Contains(t, out, "listed refunds of payment intent pi_9")
	require.Contains(t, out, "found: refund re_ours succeeded")
	require.NotContains(t, out, "re_other")
	last := st.Requests()[len(st.Requests())-1]
	require.Equal(t, "/v1/refunds", last.Path)

	// Nothing found: a retry is safe; --apply has nothing to confirm.
	none := enqueue("customer2", `{"operation": "customer.create", "params": {"email": "bob@example.com"}}`)
	st.Respond("/v1/customers/search", stripeList("search_result"), stripeList("search_result"))
	out, err = run("reconcile", none.ID.String())
	require.NoError(t, err, out)
	require.Contains(t, out, "found: nothing")
	require.Contains(t, out, "a retry is safe within the key window")
	_, err = run("reconcile", none.ID.String(), "--apply")
	require.Error(t, err)
	require.Equal(t, outboxtype.StateFailed, b.effect(t, "customer2").State)

	// Two objects for one key.
	st.Respond("/v1/customers/search", stripeList("search_result",
		map[string]any{"id": "cus_1", "object": "customer"}, map[string]any{"id": "cus_2", "object": "customer"}))
	out, err = run("reconcile", none.ID.String())
	require.NoError(t, err, out)
	require.Contains(t, out, "2 objects carry the key: the request was applied more than once")

	// Without a key to read with, it says which.
	out, err = b.run(t, "", "reconcile", none.ID.String())
	require.Equal(t, 1, cli.ExitCode(err), out)
	require.ErrorContains(t, err, "STRIPE_API_KEY")
}

// TestReconcileAsksJetStream: a nats effect in doubt whose publish reached
// the stream is found there by its Nats-Msg-Id, and --apply confirms it
// with the message's stream/sequence; one never published is not found.
func TestReconcileAsksJetStream(t *testing.T) {
	t.Parallel()
	b := newTestBundle(t)
	db := b.db
	ctx := context.Background()
	broker, err := testbrokers.StartJetStream(ctx, time.Hour)
	require.NoError(t, err)
	t.Cleanup(broker.Close)
	np, err := nats.New(ctx, nats.Config{URL: broker.URL, Streams: []string{testbrokers.Stream}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = np.Close() })
	ob, err := outbox.New(outbox.Config{Jobs: outbox.JobsInTransaction, Schema: db.Schema})
	require.NoError(t, err)
	for _, name := range []string{"published", "lost"} {
		require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			res, err := ob.Enqueue(ctx, tx, outbox.Event{ID: uuid.New(), Type: "order.paid", Payload: json.RawMessage(`{"order": "o_1"}`)},
				outbox.Effect{Kind: "nats." + name, Provider: nats.Name, Payload: json.RawMessage(`{"subject": "orders.paid"}`)})
			if err == nil {
				b.ids[name] = res.Effects[0].ID
			}
			return err
		}))
		_, err := db.Pool.Exec(ctx, `UPDATE `+db.Schema+`.side_effects SET state = 'failed', in_doubt = true, attempts = 1,
			first_fired_at = now(), key_window_from = now(), last_error = 'retries exhausted: no response: timeout' WHERE id = $1`, b.ids[name])
		require.NoError(t, err)
	}
	pub := b.effect(t, "published")
	_, err = np.Send(ctx, providers.Request{EffectID: pub.ID.String(), Kind: pub.Kind, Key: pub.IdempotencyKey,
		Payload: json.RawMessage(`{"subject": "orders.paid", "data": {"order": "o_1"}}`)})
	require.NoError(t, err)

	_, err = b.run(t, "", "reconcile", pub.ID.String())
	require.ErrorContains(t, err, "OUTBOXD_NATS_URL", "asking JetStream needs its address")
	out, err := b.run(t, "", "reconcile", pub.ID.String(), "--nats-url", broker.URL, "--apply")
	require.NoError(t, err, out)
	require.Contains(t, out, "Nats-Msg-Id: "+pub.IdempotencyKey)
	require.Contains(t, out, "applied: failed -> confirmed with ref ORDERS/1 (audited)")
	require.Equal(t, "ORDERS/1", *b.effect(t, "published").ProviderRef)

	out, err = b.run(t, "", "reconcile", b.ids["lost"].String(), "--nats-url", broker.URL)
	require.NoError(t, err, out)
	require.Contains(t, out, "none carries it")
	require.Equal(t, outboxtype.StateFailed, b.effect(t, "lost").State, "asking changes nothing")
}
