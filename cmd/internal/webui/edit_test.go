package webui_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/cmd/internal/webui"
	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/webhook"
	"github.com/outboxd/outboxd/sideeffects"
)

// TestEditAPayloadNoProviderSaw: a webhook written by SQL with a payload
// outboxd's own checks refuse fails "refused before sending", and its page
// says no provider saw it. An admin edits its payload (the diff and the
// dry run first), audited with both payloads; it keeps its key and is
// delivered. A webhook its receiver answered 410 cannot be edited: the
// refusal says why and who fixes it.
func TestEditAPayloadNoProviderSaw(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	ctx := context.Background()
	loop := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	op, err := sideeffects.NewOperator(s.db.Pool, sideeffects.OperatorConfig{Schema: s.db.Schema})
	require.NoError(t, err)
	h, err := webui.New(webui.Config{Schema: s.db.Schema, Operator: op, AdminToken: adminToken,
		Validators: map[string]providers.Validator{"webhook": webhook.Schema{AllowedNetworks: loop}}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	id := uuid.New()
	bad := `{"url": "` + strings.Replace(s.recv.URL, "http://", "ftp://", 1) + `/fixed", "body": {"order": "ord_9"}}`
	_, err = s.db.Pool.Exec(ctx, `INSERT INTO `+s.db.Schema+`.side_effects (id, source_id, kind, provider, payload)
		SELECT $2, source_id, 'webhook.by_sql', provider, $3 FROM `+s.db.Schema+`.side_effects WHERE id = $1`, s.ids["ok"], id, bad)
	require.NoError(t, err)
	_, err = op.Requeue(ctx, []uuid.UUID{id}, outboxtype.ActionOpts{Actor: "test", Reason: "give it a job"})
	require.NoError(t, err)
	e := waitState(t, s, id, outboxtype.StateFailed)
	require.Contains(t, *e.LastError, "refused before sending (no request made)")
	key := e.IdempotencyKey

	br := b{t, browser(t)}
	br.authenticate("ada", adminToken)
	br.do(chromedp.Navigate(srv.URL+"/ui/effects/"+id.String()), chromedp.WaitVisible(chromedp.CSS("#diagnosis")))
	require.Contains(t, br.text("#diagnosis"), "outboxd refused it before making any request: no provider saw it")
	require.Contains(t, br.text("#diagnosis"), "Edit payload")
	require.NotContains(t, br.text("#timeline"), s.recv.URL[len("http://"):], "no host was called")
	br.do(chromedp.Click(chromedp.CSS("#edit")), chromedp.WaitVisible(chromedp.CSS("#dryrun")))
	require.Contains(t, br.text("#dryrun"), `Would be refused: the new payload is invalid: payload.url: scheme "ftp" not allowed`, "names the field to fix")
	fixed := strings.Replace(bad, "ftp://", "http://", 1)
	br.do(chromedp.SetValue(chromedp.CSS(`textarea[name="payload"]`), fixed),
		chromedp.SetValue(chromedp.CSS(`textarea[name="reason"]`), "partner URL scheme typo; fixed in the app too"),
		chromedp.Click(chromedp.CSS("#edit-submit")), chromedp.WaitVisible(chromedp.CSS("#diff")))
	require.Contains(t, br.text("#diff"), `url: "ftp://`)
	require.Contains(t, br.text("#dryrun"), "would move failed -> pending with this payload and the same key")
	got, err := s.op.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, outboxtype.StateFailed, got.State, "the first click shows the dry run")
	br.do(chromedp.Click(chromedp.CSS("#edit-submit")), chromedp.WaitVisible(chromedp.CSS("#flash")))
	require.Contains(t, br.text("#flash"), "edit_payload by web:ada: failed -> pending")
	got = waitState(t, s, id, outboxtype.StateConfirmed)
	require.Equal(t, key, got.IdempotencyKey, "the same key")
	require.JSONEq(t, fixed, string(got.Payload))
	audit, err := s.op.Audit(ctx, id)
	require.NoError(t, err)
	var details struct {
		Before json.RawMessage `json:"payload_before"`
		After  json.RawMessage `json:"payload_after"`
	}
	last := audit[len(audit)-2] // before the confirmation's own row, if any
	for _, a := range audit {
		if a.Action == outboxtype.ActionEditPayload {
			last = a
		}
	}
	require.NoError(t, json.Unmarshal(last.Details, &details))
	require.JSONEq(t, bad, string(details.Before))
	require.JSONEq(t, fixed, string(details.After))

	// A webhook its receiver refused with 410 reached the receiver.
	br.do(chromedp.Navigate(srv.URL+"/ui/effects/"+s.ids["gone"].String()+"/edit"), chromedp.WaitVisible(chromedp.CSS("#dryrun")))
	br.do(chromedp.SetValue(chromedp.CSS(`textarea[name="payload"]`), `{"url": "`+s.recv.URL+`/ok", "body": {}}`),
		chromedp.SetValue(chromedp.CSS(`textarea[name="reason"]`), "try another URL"),
		chromedp.Click(chromedp.CSS("#edit-submit")), chromedp.WaitVisible(chromedp.CSS("#diff")))
	require.Contains(t, br.text("#dryrun"), "Would be refused: attempt 1 reached webhook")
	require.Contains(t, br.text("#dryrun"), "fix the payload where the effect was enqueued and enqueue it as a new event")
}

func waitState(t *testing.T, s *site, id uuid.UUID, state outboxtype.State) *outboxtype.Effect {
	t.Helper()
	var e *outboxtype.Effect
	require.Eventually(t, func() bool {
		var err error
		e, err = s.op.Get(context.Background(), id)
		return err == nil && e.State == state
	}, 30*time.Second, 10*time.Millisecond, "want %s", state)
	return e
}
