package webui_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/cmd/internal/webui"
	"github.com/outboxd/outboxd/outbox/idempotency"
	"github.com/outboxd/outboxd/sideeffects"
)

// TestAStuckIdempotencyKeyIsResolvedFromTheWebView: a payout whose process
// died between its commit and storing the response leaves its key in
// progress; the overview says a key needs someone, the Idempotency-Keys
// page lists it as stuck, and an admin completes it with the response the
// payout gave (a dry run first): the client's retry gets that response and
// the handler does not run again.
func TestAStuckIdempotencyKeyIsResolvedFromTheWebView(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	ctx := context.Background()
	mw, err := idempotency.New(s.db.Pool, idempotency.Config{Schema: s.db.Schema, Unscoped: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	var runs atomic.Int32
	hang := make(chan struct{})
	app := httptest.NewServer(mw.ThreePhase(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if runs.Add(1) == 1 {
			<-hang // the payout's process dies here, after its commit
		}
		w.WriteHeader(http.StatusCreated)
	})))
	t.Cleanup(app.Close)
	t.Cleanup(func() { close(hang) })
	post := func() *http.Response {
		req, _ := http.NewRequest(http.MethodPost, app.URL+"/payouts", strings.NewReader(`{"amount": 500}`))
		req.Header.Set("Idempotency-Key", "payout-7")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		return resp
	}
	go func() { resp := post(); resp.Body.Close() }()
	keys, err := idempotency.NewKeys(s.db.Pool, s.db.Schema)
	require.NoError(t, err)
	var id string
	require.Eventually(t, func() bool {
		list, err := keys.List(ctx, idempotency.Filter{State: "in_progress"})
		if err != nil || len(list) != 1 {
			return false
		}
		id = list[0].ID.String()
		return true
	}, 10*time.Second, 10*time.Millisecond)
	_, err = s.db.Pool.Exec(ctx, `UPDATE `+s.db.Schema+`.idempotency_keys SET locked_until = now() - interval '10 minutes' WHERE id = $1`, id)
	require.NoError(t, err)

	op, err := sideeffects.NewOperator(s.db.Pool, sideeffects.OperatorConfig{Schema: s.db.Schema})
	require.NoError(t, err)
	h, err := webui.New(webui.Config{Schema: s.db.Schema, Operator: op, AdminToken: adminToken, Keys: keys,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	br := b{t, browser(t)}
	br.authenticate("ada", adminToken)
	br.do(chromedp.Navigate(srv.URL+"/ui/"), chromedp.WaitVisible(chromedp.CSS("#needs-you")))
	require.Contains(t, br.text("#needs-you"), "1 Idempotency-Key(s) stuck in progress")
	br.do(chromedp.Click(chromedp.CSS(`#needs-you a[href$="keys?state=in_progress"]`)), chromedp.WaitVisible(chromedp.CSS("#keys")))
	require.Regexp(t, `payout-7\s+in_progress stuck\s+POST /payouts`, br.text("#keys"))
	br.do(chromedp.Click(chromedp.CSS("#keys a")), chromedp.WaitVisible(chromedp.CSS("#stuck")))
	br.do(chromedp.SetValue(chromedp.CSS(`input[name="status"]`), "201"),
		chromedp.SetValue(chromedp.CSS(`textarea[name="body"]`), `{"id": "po_42"}`),
		chromedp.SetValue(chromedp.CSS(`form[action$="/complete"] textarea[name="reason"]`), "po_42 seen at the bank"),
		chromedp.Click(chromedp.CSS("#complete-key")), chromedp.WaitVisible(chromedp.CSS("#plan")))
	require.Contains(t, br.text("#plan"), "Would record HTTP 201 with a body of 15 bytes (application/json)")
	k, _, err := keys.Get(ctx, mustUUID(t, id))
	require.NoError(t, err)
	require.Equal(t, "in_progress", k.State, "the dry run changes nothing")
	br.do(chromedp.Click(chromedp.CSS("#complete-key")), chromedp.WaitVisible(chromedp.CSS("#flash")))
	require.Contains(t, br.text("#flash"), "Completed")
	require.Contains(t, br.text("#key-audit"), "web:ada")

	resp := post()
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	require.JSONEq(t, `{"id": "po_42"}`, string(body))
	require.EqualValues(t, 1, runs.Load(), "the handler did not run again")
	br.do(chromedp.Navigate(srv.URL+"/ui/"), chromedp.WaitVisible(chromedp.CSS("#needs-you")))
	require.NotContains(t, br.text("#needs-you"), "Idempotency-Key")
}

func mustUUID(t *testing.T, s string) uuid.UUID {
	t.Helper()
	id, err := uuid.Parse(s)
	require.NoError(t, err)
	return id
}
