package webui_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/cmd/internal/webui"
	"github.com/outboxd/outboxd/internal/store"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/outbox/idempotency"
	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/webhook"
	"github.com/outboxd/outboxd/sideeffects"
)

// TestAnIncidentFromTheWebViewAlone plants the kinds of problems an
// on-call newcomer meets — drift, a partner that processed some webhooks
// and hung, an effect fired by a process that was killed, a bad payload
// at the head of an ordering key, a stuck Idempotency-Key — and resolves
// each from the web view alone, as a person would (no outboxctl, no SQL
// once the incident is set up), until the overview says nothing needs
// anyone. Nothing is sent twice, and nothing unprocessed is confirmed.
func TestAnIncidentFromTheWebViewAlone(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	ctx := context.Background()
	loop := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	keys, err := idempotency.NewKeys(s.db.Pool, s.db.Schema)
	require.NoError(t, err)
	op, err := sideeffects.NewOperator(s.db.Pool, sideeffects.OperatorConfig{Schema: s.db.Schema})
	require.NoError(t, err)
	h, err := webui.New(webui.Config{Schema: s.db.Schema, Operator: op, AdminToken: adminToken, Keys: keys,
		Validators: map[string]providers.Validator{"webhook": webhook.Schema{AllowedNetworks: loop}}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	ui := func(path string) string { return srv.URL + "/ui/" + path }
	ob, err := outbox.New(outbox.Config{Jobs: outbox.JobsInTransaction, Schema: s.db.Schema, WebhookAllowedNetworks: loop})
	require.NoError(t, err)
	enqueue := func(kind, path string, notBefore time.Time) uuid.UUID {
		var id uuid.UUID
		require.NoError(t, pgx.BeginFunc(ctx, s.db.Pool, func(tx pgx.Tx) error {
			res, err := ob.Enqueue(ctx, tx, outbox.Event{ID: uuid.New(), Type: "order.paid"},
				outbox.Effect{Kind: kind, Provider: "webhook", NotBefore: notBefore, Payload: json.RawMessage(`{"url": "` + s.recv.URL + path + `", "body": {}}`)})
			if err == nil {
				id = res.Effects[0].ID
			}
			return err
		}))
		return id
	}
	sql := func(q string, args ...any) {
		_, err := s.db.Pool.Exec(ctx, strings.ReplaceAll(q, "S.", s.db.Schema+"."), args...)
		require.NoError(t, err, q)
	}
	later := time.Now().Add(time.Hour)

	// 1. Drift: the receiver processed "gone" after all (it answered 410).
	gone := s.effect(t, "gone")
	require.NoError(t, pgx.BeginFunc(ctx, s.db.Pool, func(tx pgx.Tx) error {
		_, err := s.op.ApplyProviderEvent(ctx, tx, providers.EventReport{Provider: "webhook", EventID: "evt_late", Type: "order.paid.delivered",
			Key: gone.IdempotencyKey, ObjectID: "rcv_1", Outcome: providers.EventDone, At: time.Now()})
		return err
	}))
	// 2. A partner processed two of four webhooks, then hung: they wait.
	var partner []uuid.UUID
	for range 4 {
		partner = append(partner, enqueue("webhook.partner", "/partner", later))
	}
	partnerLog := []string{s.mustKey(t, partner[1]), s.mustKey(t, partner[3])}
	// 3. A call of a process that was killed 20 minutes ago.
	dead := enqueue("webhook.capture", "/captured", later)
	require.NoError(t, store.NewStore(s.db.Schema).RecordDispatcher(ctx, s.db.Pool, "outboxd-killed", "host-a", 4242, map[string]any{"rescue_after": "2m0s"}))
	sql(`UPDATE S.outboxd_dispatchers SET seen_at = now() - interval '20 minutes' WHERE id = 'outboxd-killed'`)
	sql(`UPDATE S.side_effects SET state = 'fired', attempts = 1, total_attempts = 1, fired_at = now() - interval '25 minutes',
		first_fired_at = now() - interval '25 minutes', key_window_from = now() - interval '25 minutes', not_before = NULL WHERE id = $1`, dead)
	sql(`UPDATE S.river_job SET state = 'running', attempt = 1, attempted_at = now(), attempted_by = ARRAY['outboxd-killed'] WHERE args->>'effect_id' = $1::text`, dead)
	// 4. A head with a bad payload (written by a backfill script) and an
	// effect behind it on its ordering key.
	head, next := uuid.New(), uuid.New()
	sql(`INSERT INTO S.side_effects (id, source_id, kind, provider, payload, ordering_key, ordering_seq)
		SELECT $2, source_id, 'webhook.refund', 'webhook', $3, 'pay_77', 1 FROM S.side_effects WHERE id = $1`,
		s.ids["ok"], head, `{"url": "`+strings.Replace(s.recv.URL, "http://", "ftp://", 1)+`/refund", "body": {}}`)
	sql(`INSERT INTO S.side_effects (id, source_id, kind, provider, payload, ordering_key, ordering_seq)
		SELECT $2, source_id, 'webhook.receipt', 'webhook', $3, 'pay_77', 2 FROM S.side_effects WHERE id = $1`,
		s.ids["ok"], next, `{"url": "`+s.recv.URL+`/receipt", "body": {}}`)
	_, err = op.Requeue(ctx, []uuid.UUID{head, next}, outboxtype.ActionOpts{Actor: "backfill", Reason: "written by SQL"})
	require.NoError(t, err)
	waitState(t, s, head, outboxtype.StateFailed)
	// 5. A payout whose process died between its commit and its response.
	var runs atomic.Int32
	hang := make(chan struct{})
	mw, err := idempotency.New(s.db.Pool, idempotency.Config{Schema: s.db.Schema, Unscoped: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	app := httptest.NewServer(mw.ThreePhase(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if runs.Add(1) == 1 {
			<-hang
		}
		w.WriteHeader(http.StatusCreated)
	})))
	t.Cleanup(app.Close)
	t.Cleanup(func() { close(hang) })
	payout := func() *http.Response {
		req, _ := http.NewRequest(http.MethodPost, app.URL+"/payouts", strings.NewReader(`{}`))
		req.Header.Set("Idempotency-Key", "payout-9")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		return resp
	}
	go func() { resp := payout(); resp.Body.Close() }()
	require.Eventually(t, func() bool {
		list, err := keys.List(ctx, idempotency.Filter{State: "in_progress"})
		return err == nil && len(list) == 1
	}, 10*time.Second, 10*time.Millisecond)
	sql(`UPDATE S.idempotency_keys SET locked_until = now() - interval '5 minutes'`)
	// Everything stuck has been so for a while.
	sql(`UPDATE S.side_effects SET updated_at = now() - interval '30 minutes' WHERE state <> 'confirmed'`)

	// The walk: the web view only, from the overview.
	br := b{t, browser(t)}
	br.authenticate("ada", adminToken)
	overview := func() string {
		br.do(chromedp.Navigate(ui("")), chromedp.WaitVisible(chromedp.CSS("#needs-you")))
		return br.text("#needs-you")
	}
	needs := overview()
	require.Contains(t, needs, "drift record(s) to review")
	require.Contains(t, needs, "Idempotency-Key(s) stuck")
	require.Contains(t, needs, "stuck or failed effect(s)")
	// act submits the action page's form with reason: done (#flash), or
	// refused (#error), which fails the test with what the page said.
	act := func(reason string) {
		t.Helper()
		br.do(chromedp.SetValue(chromedp.CSS(`form.action textarea[name="reason"]`), reason),
			chromedp.Click(chromedp.CSS(`form.action button[type="submit"]`)), chromedp.WaitVisible(chromedp.CSS("#flash, #error")))
		if br.count("#error") > 0 {
			require.Fail(t, "the action was refused", "%q: %s", reason, br.text("#error"))
		}
	}

	// 1. Drift: the effect's page; the receiver's log shows it processed,
	// so confirm it, then record the review of the drift.
	br.do(chromedp.Click(chromedp.CSS(`#overview-drift a.mono`)), chromedp.WaitVisible(chromedp.CSS("#drift")))
	br.do(chromedp.Click(chromedp.CSS(`a.action[href$="/actions/confirm"]`)), chromedp.WaitVisible(chromedp.CSS("#dryrun")))
	act("the partner's log shows it processed after the 410")
	br.do(chromedp.SetValue(chromedp.CSS(`form[action$="drift/ack"] textarea[name="reason"]`), "confirmed: it stands"),
		chromedp.Click(chromedp.CSS("#ack-drift")))
	br.waitText("#flash", "drift acknowledged")
	require.Equal(t, outboxtype.StateConfirmed, s.effect(t, "gone").State)

	// 2. The hanging partner: its log's webhook-ids, pasted, and only those confirmed.
	br.do(chromedp.Navigate(ui("effects")), chromedp.SetValue(chromedp.CSS(`textarea[name="ids"]`), strings.Join(partnerLog, "\n")),
		chromedp.Click(chromedp.CSS("#paste-search")), chromedp.WaitVisible(chromedp.CSS("#results")))
	require.Equal(t, 2, br.count(`#results input[name="id"]`))
	br.do(chromedp.Click(chromedp.CSS("#tickall")), chromedp.SetValue(chromedp.CSS(`select[name="action"]`), "confirm"),
		chromedp.Click(chromedp.CSS(`#bulkform button[type="submit"]`)), chromedp.WaitVisible(chromedp.CSS("#bulk")))
	act("in the partner's log")
	require.Contains(t, br.text("#flash"), "2 of 2 effects changed")

	// 3. The killed process's call: not in flight; the receiver got it.
	br.do(chromedp.Navigate(ui("effects/"+dead.String())), chromedp.WaitVisible(chromedp.CSS("#diagnosis")))
	require.Contains(t, br.text("#diagnosis"), "not in flight")
	require.Contains(t, br.text("#diagnosis"), "by outboxd-killed (silent since")
	br.do(chromedp.Click(chromedp.CSS(`a.action[href$="/actions/confirm"]`)), chromedp.WaitVisible(chromedp.CSS("#dryrun")))
	act("the receiver's log has this webhook-id at the time of the kill")

	// 4. The bad payload at the head of pay_77: edit it; the chain goes on.
	br.do(chromedp.Navigate(ui("effects/"+head.String())), chromedp.WaitVisible(chromedp.CSS("#diagnosis")))
	require.Contains(t, br.text("#diagnosis"), "outboxd refused it before making any request")
	br.do(chromedp.Click(chromedp.CSS("#edit")), chromedp.WaitVisible(chromedp.CSS("#dryrun")),
		chromedp.SetValue(chromedp.CSS(`textarea[name="payload"]`), `{"url": "`+s.recv.URL+`/refund", "body": {}}`),
		chromedp.SetValue(chromedp.CSS(`textarea[name="reason"]`), "the backfill wrote ftp://; fixed there too"),
		chromedp.Click(chromedp.CSS("#edit-submit")), chromedp.WaitVisible(chromedp.CSS("#diff")))
	br.do(chromedp.Click(chromedp.CSS("#edit-submit")), chromedp.WaitVisible(chromedp.CSS("#flash")))
	waitState(t, s, head, outboxtype.StateConfirmed)
	waitState(t, s, next, outboxtype.StateConfirmed)

	// 5. The payout: it was paid (the bank says so): complete the key.
	br.do(chromedp.Navigate(ui("keys")), chromedp.WaitVisible(chromedp.CSS("#keys")), chromedp.Click(chromedp.CSS("#keys a")), chromedp.WaitVisible(chromedp.CSS("#stuck")),
		chromedp.SetValue(chromedp.CSS(`input[name="status"]`), "201"), chromedp.SetValue(chromedp.CSS(`textarea[name="body"]`), `{"id": "po_9"}`),
		chromedp.SetValue(chromedp.CSS(`form[action$="/complete"] textarea[name="reason"]`), "po_9 at the bank"),
		chromedp.Click(chromedp.CSS("#complete-key")), chromedp.WaitVisible(chromedp.CSS("#plan")),
		chromedp.Click(chromedp.CSS("#complete-key")), chromedp.WaitVisible(chromedp.CSS("#flash")))

	// What was already there: a receiver that kept answering 409 (its
	// effect is acknowledged) and a row written by SQL without a job
	// (requeued: it is delivered).
	br.do(chromedp.Navigate(ui("effects/"+s.ids["busy"].String()+"/actions/acknowledge")), chromedp.WaitVisible(chromedp.CSS("#dryrun")))
	act("the partner retired this endpoint")
	br.do(chromedp.Navigate(ui("effects/"+s.ids["byhand"].String()+"/actions/requeue")), chromedp.WaitVisible(chromedp.CSS("#dryrun")))
	act("written by SQL without a job")
	s.wait(t, "byhand", outboxtype.StateConfirmed)

	require.Contains(t, overview(), "Nothing needs you")
	for i, id := range partner {
		e, err := s.op.Get(ctx, id)
		require.NoError(t, err)
		if i == 1 || i == 3 {
			require.Equal(t, outboxtype.StateConfirmed, e.State)
		} else {
			require.Equal(t, outboxtype.StatePending, e.State, "never processed: still to go")
		}
	}
	resp := payout()
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	require.EqualValues(t, 1, runs.Load(), "the payout ran once")
	for id, ds := range s.recv.ByID() {
		processed := 0
		for _, d := range ds {
			if d.Status < 300 {
				processed++
			}
		}
		require.LessOrEqual(t, processed, 1, "webhook-id %s was processed once at most", id)
	}
	for _, d := range s.recv.Deliveries() {
		require.NotEqual(t, "/partner", d.Path, "nothing was sent to the hanging partner by the walk")
		require.NotEqual(t, "/captured", d.Path, "the killed process's call was not sent again")
	}
}

// waitText waits until the element sel shows text (the page it is on may
// be loading meanwhile).
func (b b) waitText(sel, text string) {
	b.t.Helper()
	require.Eventually(b.t, func() bool {
		got, err := chromedp.Run(b.ctx, chromedp.Text(chromedp.CSS(sel), chromedp.AtLeast(0)))
		return err == nil && strings.Contains(got, text)
	}, 20*time.Second, 20*time.Millisecond, "%s never showed %q", sel, text)
}

func (s *site) mustKey(t *testing.T, id uuid.UUID) string {
	t.Helper()
	e, err := s.op.Get(context.Background(), id)
	require.NoError(t, err)
	return e.IdempotencyKey
}
