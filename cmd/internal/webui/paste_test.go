package webui_test

import (
	"context"
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/outboxtype"
)

// TestConfirmOnlyWhatTheReceiverLogged: a partner processed some of its
// webhooks and then hung (here: five wait for their next attempt). Its log's webhook-ids, pasted into the search
// (as logged, in any case, with an id it never got from us), find exactly
// those effects, each listed with its key; ticking all and confirming
// confirms those and nothing else: the ones it never processed stay
// live, to go when it answers again.
func TestConfirmOnlyWhatTheReceiverLogged(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	ctx := context.Background()
	ob, err := outbox.New(outbox.Config{Jobs: outbox.JobsInTransaction, Schema: s.db.Schema, WebhookAllowedNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	require.NoError(t, err)
	var effects []*outboxtype.Effect
	for range 5 {
		var id uuid.UUID
		require.NoError(t, pgx.BeginFunc(ctx, s.db.Pool, func(tx pgx.Tx) error {
			res, err := ob.Enqueue(ctx, tx, outbox.Event{ID: uuid.New(), Type: "order.paid"},
				// Waiting for their next attempt: what the partner does
				// meanwhile does not move them under the operator.
				outbox.Effect{Kind: "webhook.partner", Provider: "webhook", NotBefore: time.Now().Add(time.Hour),
					Payload: json.RawMessage(`{"url": "` + s.recv.URL + `/hang", "body": {}}`)})
			if err == nil {
				id = res.Effects[0].ID
			}
			return err
		}))
		e, err := s.op.Get(ctx, id)
		require.NoError(t, err)
		effects = append(effects, e)
	}
	logged := []string{strings.ToUpper(effects[0].IdempotencyKey), effects[2].IdempotencyKey, strings.Repeat("9", 64)}

	br := b{t, browser(t)}
	br.authenticate("ada", adminToken)
	br.do(chromedp.Navigate(s.url("effects")), chromedp.WaitVisible(chromedp.CSS("#pasteform")),
		chromedp.SetValue(chromedp.CSS(`textarea[name="ids"]`), strings.Join(logged, "\n")),
		chromedp.Click(chromedp.CSS("#paste-search")), chromedp.WaitVisible(chromedp.CSS("#results")))
	require.Equal(t, 2, br.count(`#results input[name="id"]`), "exactly the logged ones")
	results := br.text("#results")
	require.Contains(t, results, effects[0].IdempotencyKey, "the key column shows what the partner logs")
	require.Contains(t, results, effects[2].IdempotencyKey)
	require.NotContains(t, results, effects[1].ID.String())
	require.Contains(t, br.text("#missing"), strings.Repeat("9", 64))

	br.do(chromedp.Click(chromedp.CSS("#tickall")), chromedp.SetValue(chromedp.CSS(`select[name="action"]`), "confirm"),
		chromedp.Click(chromedp.CSS(`#bulkform button[type="submit"]`)), chromedp.WaitVisible(chromedp.CSS("#bulk")))
	br.do(chromedp.SendKeys(chromedp.CSS(`textarea[name="reason"]`), "in the partner's log"),
		chromedp.Click(chromedp.CSS(`form.action button[type="submit"]`)), chromedp.WaitVisible(chromedp.CSS("#flash")))
	require.Contains(t, br.text("#flash"), "confirm by web:ada: 2 of 2 effects changed")
	for i, e := range effects {
		got, err := s.op.Get(ctx, e.ID)
		require.NoError(t, err)
		if i == 0 || i == 2 {
			require.Equal(t, outboxtype.StateConfirmed, got.State, "effect %d was logged", i)
			require.Equal(t, "webhook-id "+e.IdempotencyKey, *got.ProviderRef)
		} else {
			require.NotEqual(t, outboxtype.StateConfirmed, got.State, "effect %d was never processed", i)
		}
	}
}
