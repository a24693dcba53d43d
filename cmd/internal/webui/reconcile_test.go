package webui_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/cmd/internal/webui"
	"github.com/outboxd/outboxd/internal/fakes"
	"github.com/outboxd/outboxd/internal/testbrokers"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/providers"
	natsprovider "github.com/outboxd/outboxd/providers/nats"
	"github.com/outboxd/outboxd/providers/stripe"
	"github.com/outboxd/outboxd/sideeffects"
)

// TestAskTheProviderFromTheWebView: "ask the provider" on a Stripe effect
// in doubt reads what Stripe holds for its key (GET requests only), says
// what to do in the view's words, and links to the suggested action's dry
// run with the reference and a reason filled in; the click confirms it,
// audited. A webhook's answer sends the operator to the receiver's log.
func TestAskTheProviderFromTheWebView(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	ctx := context.Background()
	st := fakes.NewFakeStripe()
	t.Cleanup(st.Close)
	sp, err := stripe.New(stripe.Config{APIKey: "sk_test_ask", APIBase: st.URL})
	require.NoError(t, err)
	op, err := sideeffects.NewOperator(s.db.Pool, sideeffects.OperatorConfig{Schema: s.db.Schema,
		Guarantees: map[string]providers.Guarantees{"stripe": sp.Guarantees()}})
	require.NoError(t, err)
	h, err := webui.New(webui.Config{Schema: s.db.Schema, Operator: op, AdminToken: adminToken,
		Reconcilers: map[string]providers.Reconciler{"stripe": sp}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	ob, err := outbox.New(outbox.Config{Jobs: outbox.JobsInTransaction, Schema: s.db.Schema})
	require.NoError(t, err)
	var id uuid.UUID
	require.NoError(t, pgx.BeginFunc(ctx, s.db.Pool, func(tx pgx.Tx) error {
		res, err := ob.Enqueue(ctx, tx, outbox.Event{ID: uuid.New(), Type: "signup"},
			outbox.Effect{Kind: "stripe.customer", Provider: "stripe", NotBefore: time.Now().Add(time.Hour),
				Payload: json.RawMessage(`{"operation": "customer.create", "params": {"email": "ada@example.com"}}`)})
		if err == nil {
			id = res.Effects[0].ID
		}
		return err
	}))
	_, err = s.db.Pool.Exec(ctx, `UPDATE `+s.db.Schema+`.side_effects SET state = 'failed', in_doubt = true, attempts = 1,
		first_fired_at = now(), key_window_from = now(), last_error = 'in doubt: not re-sent: no response: timeout' WHERE id = $1`, id)
	require.NoError(t, err)
	e, err := s.op.Get(ctx, id)
	require.NoError(t, err)
	found := map[string]any{"id": "cus_found", "object": "customer", "created": 1700000000,
		"metadata": map[string]any{"outboxd_idempotency_key": e.IdempotencyKey}}
	st.Respond("/v1/customers/search", stripeList("search_result", found))

	br := b{t, browser(t)}
	br.authenticate("ada", adminToken)
	br.do(chromedp.Navigate(srv.URL+"/ui/effects/"+id.String()), chromedp.WaitVisible(chromedp.CSS("#diagnosis")))
	require.Contains(t, br.text("#diagnosis"), "Ask the provider asks Stripe", "the advice names the button")
	br.do(chromedp.Click(chromedp.CSS("#ask")), chromedp.WaitVisible(chromedp.CSS("#suggestion")))
	require.Contains(t, br.text("#asked"), "searched customers for metadata['outboxd_idempotency_key']:'"+e.IdempotencyKey+"'")
	require.Contains(t, br.text("#found"), "cus_found")
	require.Contains(t, br.text("#suggestion"), "the provider acted: Confirm on "+id.String()+" with reference cus_found")
	for _, r := range st.Requests() {
		require.Equal(t, http.MethodGet, r.Method, "asking reads only")
	}
	got, err := s.op.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, outboxtype.StateFailed, got.State, "asking changes nothing")

	br.do(chromedp.Click(chromedp.CSS("#next")), chromedp.WaitVisible(chromedp.CSS("#dryrun")))
	require.Contains(t, br.text("#dryrun"), "failed -> confirmed")
	br.do(chromedp.Click(chromedp.CSS(`form.action button[type="submit"]`)), chromedp.WaitVisible(chromedp.CSS("#flash")))
	got, err = s.op.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, outboxtype.StateConfirmed, got.State)
	require.Equal(t, "cus_found", *got.ProviderRef)
	audit, err := s.op.Audit(ctx, id)
	require.NoError(t, err)
	require.Equal(t, "web:ada", audit[len(audit)-1].Actor)
	require.Contains(t, audit[len(audit)-1].Reason, "asked stripe: customer cus_found found")

	// A webhook: nothing to ask but its receiver.
	gone := s.effect(t, "gone")
	br.do(chromedp.Navigate(srv.URL+"/ui/effects/"+gone.ID.String()+"/reconcile"), chromedp.WaitVisible(chromedp.CSS("#suggestion")))
	require.Contains(t, br.text("#suggestion"), "ask the receiver whether it processed webhook-id "+gone.IdempotencyKey)
	require.Zero(t, br.count("#next"))
}

// stripeList answers a Stripe search or list request with objects.
func stripeList(object string, objects ...map[string]any) fakes.Response {
	return func(w http.ResponseWriter, _ *http.Request) int {
		w.Header().Set("Content-Type", "application/json")
		b, _ := json.Marshal(map[string]any{"object": object, "data": objects, "has_more": false, "url": "/v1/x"})
		_, _ = w.Write(b)
		return http.StatusOK
	}
}

// TestAskJetStreamFromTheWebView: a nats effect whose publish reached the
// stream but whose confirmation was lost: asking reads the stream for its
// Nats-Msg-Id within the duplicate window, finds the message and suggests
// confirming with its stream/sequence; for an effect never published it
// finds nothing.
func TestAskJetStreamFromTheWebView(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	ctx := context.Background()
	broker, err := testbrokers.StartJetStream(ctx, time.Hour)
	require.NoError(t, err)
	t.Cleanup(broker.Close)
	np, err := natsprovider.New(ctx, natsprovider.Config{URL: broker.URL, Streams: []string{testbrokers.Stream}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = np.Close() })
	op, err := sideeffects.NewOperator(s.db.Pool, sideeffects.OperatorConfig{Schema: s.db.Schema,
		Guarantees: map[string]providers.Guarantees{np.Name(): np.Guarantees()}})
	require.NoError(t, err)
	h, err := webui.New(webui.Config{Schema: s.db.Schema, Operator: op, AdminToken: adminToken,
		Reconcilers: map[string]providers.Reconciler{np.Name(): np}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	ob, err := outbox.New(outbox.Config{Jobs: outbox.JobsInTransaction, Schema: s.db.Schema})
	require.NoError(t, err)
	var res *outbox.Result
	require.NoError(t, pgx.BeginFunc(ctx, s.db.Pool, func(tx pgx.Tx) error {
		res, err = ob.Enqueue(ctx, tx, outbox.Event{ID: uuid.New(), Type: "order.paid", Payload: json.RawMessage(`{"order": "o_1"}`)},
			outbox.Effect{Kind: "nats.order_paid", Provider: np.Name(), NotBefore: time.Now().Add(time.Hour), Payload: json.RawMessage(`{"subject": "orders.paid"}`)},
			outbox.Effect{Kind: "nats.order_paid_again", Provider: np.Name(), NotBefore: time.Now().Add(time.Hour), Payload: json.RawMessage(`{"subject": "orders.paid"}`)})
		return err
	}))
	published, never := res.Effects[0], res.Effects[1]
	// The publish of the first reached the stream; its confirmation did not.
	_, err = np.Send(ctx, providers.Request{EffectID: published.ID.String(), Kind: published.Kind, Key: published.Key,
		Payload: json.RawMessage(`{"subject": "orders.paid", "data": {"order": "o_1"}}`)})
	require.NoError(t, err)
	for _, e := range res.Effects {
		_, err = s.db.Pool.Exec(ctx, `UPDATE `+s.db.Schema+`.side_effects SET state = 'fired', attempts = 1, in_doubt = true,
			not_before = NULL, first_fired_at = now(), key_window_from = now(), fired_at = now() WHERE id = $1`, e.ID)
		require.NoError(t, err)
	}

	ask := func(id uuid.UUID) string {
		req, err := http.NewRequest(http.MethodGet, srv.URL+"/ui/effects/"+id.String()+"/reconcile", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		return string(body)
	}
	page := ask(published.ID)
	require.Contains(t, page, "ORDERS/1")
	require.Contains(t, page, "duplicate window")
	require.Contains(t, page, "with reference ORDERS/1")
	page = ask(never.ID)
	require.Contains(t, page, "none carries it")
	require.NotContains(t, page, "with reference ORDERS/1")
}
