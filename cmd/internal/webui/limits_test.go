package webui_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/engine"
	"github.com/outboxd/outboxd/internal/store"
	"github.com/outboxd/outboxd/outbox"
)

// TestLimitsAndTenantsInTheWebView: the limits page lists each key as the
// replicas share it (a 429's pause included) and each tenant's queue; an
// admin sets a key's rate with a reason, ending its pause, and a bad key
// changes nothing.
func TestLimitsAndTenantsInTheWebView(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	ctx := context.Background()
	const key = "webhook:api.partner.example"
	_, _, err := engine.Throttle(ctx, store.NewStore(s.db.Schema), s.db.Pool, key, engine.A429{After: time.Minute, Base: time.Second, Observed: 12, Again: true})
	require.NoError(t, err)
	ob, err := outbox.New(outbox.Config{Jobs: outbox.JobsInTransaction, Schema: s.db.Schema})
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(ctx, s.db.Pool, func(tx pgx.Tx) error {
		_, err := ob.Enqueue(ctx, tx, outbox.Event{ID: uuid.New(), Type: "reminder", Tenant: "acme"},
			outbox.Effect{Kind: "webhook.reminder", Provider: "webhook", NotBefore: time.Now().Add(time.Hour),
				Payload: json.RawMessage(`{"url": "https://hooks.example.com/r", "body": {}}`)})
		return err
	}))

	br := b{t, browser(t)}
	br.authenticate("ada", adminToken)
	br.do(chromedp.Navigate(s.url("limits")), chromedp.WaitVisible(chromedp.CSS("#limits")))
	require.Regexp(t, key+`\s+-\s+-\s+12/s\s+for \S+\s+1\s+0\s+0`, br.text("#limits"))
	require.Regexp(t, `webhook\s+acme\s+0\s+-\s+1\s+0`, br.text("#tenants"))

	set := func(k, rate, reason string) {
		br.do(chromedp.SetValue(chromedp.CSS(`input[name="key"]`), k), chromedp.SetValue(chromedp.CSS(`input[name="rate"]`), rate),
			chromedp.SetValue(chromedp.CSS(`form[action$="limits"] textarea[name="reason"]`), reason))
	}
	set("api.partner.example", "20", "partner asked")
	br.do(chromedp.Click(chromedp.CSS("#set-limit")), chromedp.WaitVisible(chromedp.CSS("#error")))
	require.Contains(t, br.text("#error"), "a limit key is <provider>:<what it limits>")

	set(key, "20", "partner asked for 20/s")
	br.do(chromedp.Click(chromedp.CSS(`input[name="resume"]`)), chromedp.Click(chromedp.CSS("#set-limit")), chromedp.WaitVisible(chromedp.CSS("#flash")))
	require.Contains(t, br.text("#flash"), "Limit "+key+" changed")
	require.Regexp(t, key+`\s+20/s\s+operator:web:ada\s+\S+\s+-\s+1`, br.text("#limits"), "rate set, pause ended")
	hist, err := s.op.LimitHistory(ctx, key, 5)
	require.NoError(t, err)
	require.Len(t, hist, 1)
	require.Equal(t, "web:ada", hist[0].Actor)
	require.Equal(t, "partner asked for 20/s", hist[0].Reason)
	require.True(t, hist[0].Resumed)

	// A partner's "at most 4 in any second": the checkbox holds it so.
	br.do(chromedp.Navigate(s.url("limits")), chromedp.WaitVisible(chromedp.CSS("#set-limit")))
	set(key, "4", "contract: at most 4 in any second")
	br.do(chromedp.Click(chromedp.CSS("#in-any-second")), chromedp.Click(chromedp.CSS("#set-limit")), chromedp.WaitVisible(chromedp.CSS("#flash")))
	require.Regexp(t, key+`\s+at most 4 in any second\s+operator:web:ada`, br.text("#limits"))
	hist, err = s.op.LimitHistory(ctx, key, 5)
	require.NoError(t, err)
	require.True(t, hist[0].InAnySecond)

	// A key paused by a broker out of reach: the admin lifts every hold
	// at once, with a reason, as outboxctl limits resume --all does.
	const broker = "nats:nats://127.0.0.1:4222"
	_, err = store.NewStore(s.db.Schema).Hold(ctx, s.db.Pool, broker, time.Hour)
	require.NoError(t, err)
	br.do(chromedp.Navigate(s.url("limits")), chromedp.WaitVisible(chromedp.CSS("#resume-key")))
	require.Regexp(t, broker+`\s+-\s+-\s+-\s+for \S+`, br.text("#limits"), "paused")
	br.do(chromedp.SetValue(chromedp.CSS("#resume-key"), "*"), chromedp.SetValue(chromedp.CSS("#resume-reason"), "broker back"),
		chromedp.Click(chromedp.CSS("#resume-limits")), chromedp.WaitVisible(chromedp.CSS("#flash")))
	require.Contains(t, br.text("#flash"), "Every hold lifted")
	require.Regexp(t, broker+`\s+-\s+-\s+-\s+-\s+0`, br.text("#limits"), "its pause ended")
	hist, err = s.op.LimitHistory(ctx, broker, 5)
	require.NoError(t, err)
	require.Len(t, hist, 1)
	require.True(t, hist[0].Resumed)
	require.Equal(t, "web:ada", hist[0].Actor)
	require.Equal(t, "broker back", hist[0].Reason)

	// A link cannot make the page say something: the note names only a
	// limit the page lists.
	br.do(chromedp.Navigate(s.url("limits?set=Call+%2B1-555-0100+to+restore+service")), chromedp.WaitVisible(chromedp.CSS("#limits")))
	require.NotContains(t, br.text("body"), "555-0100")
	br.do(chromedp.Navigate(s.url("limits?resumed=Call+%2B1-555-0100+to+restore+service")), chromedp.WaitVisible(chromedp.CSS("#limits")))
	require.NotContains(t, br.text("body"), "555-0100")
}
