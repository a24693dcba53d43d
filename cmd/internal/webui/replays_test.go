package webui_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/outboxtype"
)

// TestAReplayFromTheWebView: after an outage an admin replays what failed
// from the browser: a dry run first, then the replay, which outboxd runs
// and the page follows; a slow one is cancelled from its page. Bad input
// starts nothing.
func TestAReplayFromTheWebView(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	br := b{t, browser(t)}
	br.authenticate("ada", adminToken)

	// A link cannot make the page say something: the note names only a
	// replay the page lists.
	br.do(chromedp.Navigate(s.url("replays?started=Call+%2B1-555-0100+to+restore+service")), chromedp.WaitVisible(chromedp.CSS("#none")))
	require.NotContains(t, br.text("body"), "555-0100")

	br.do(chromedp.Navigate(s.url("replays")), chromedp.WaitVisible(chromedp.CSS("#none")))
	fill := func(since, pace, reason string) {
		br.do(chromedp.SetValue(chromedp.CSS(`input[name="failed_since"]`), since), chromedp.SetValue(chromedp.CSS(`input[name="provider"]`), "webhook"),
			chromedp.SetValue(chromedp.CSS(`input[name="pace"]`), pace), chromedp.SetValue(chromedp.CSS(`textarea[name="reason"]`), reason))
	}
	fill("1h", "5000", "partner back")
	br.do(chromedp.Click(chromedp.CSS("#replay-submit")), chromedp.WaitVisible(chromedp.CSS("#error")))
	require.Contains(t, br.text("#error"), "over the limit of 1000")
	require.Equal(t, 1, br.count("#none"), "nothing started")

	fill("1h", "50", "partner back")
	br.do(chromedp.Click(chromedp.CSS("#replay-submit")), chromedp.WaitVisible(chromedp.CSS("#plan")))
	require.Contains(t, br.text("#plan"), "Would replay 2 failed effects")
	require.Contains(t, br.text("#plan"), "Nothing is started yet")
	require.Equal(t, outboxtype.StateFailed, s.effect(t, "gone").State, "a dry run changes nothing")
	br.do(chromedp.Click(chromedp.CSS("#replay-submit")), chromedp.WaitVisible(chromedp.CSS("#flash")))
	require.Contains(t, br.text("#flash"), "Started")
	require.Eventually(t, func() bool {
		br.do(chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#replay-state")))
		return br.text("#replay-state") == "done"
	}, 30*time.Second, 50*time.Millisecond)
	require.Contains(t, br.text("#replay-progress"), "2 selected: 2 retried, 0 skipped, 0 left")
	s.wait(t, "gone", outboxtype.StateConfirmed)
	s.wait(t, "busy", outboxtype.StateConfirmed)
	audit, err := s.op.Audit(context.Background(), s.ids["gone"])
	require.NoError(t, err)
	require.Equal(t, "web:ada (replay 1)", audit[len(audit)-1].Actor)

	// A slow one, cancelled from its page.
	_, err = s.db.Pool.Exec(context.Background(), `UPDATE `+s.db.Schema+`.side_effects SET state = 'failed' WHERE id = ANY($1)`,
		[]any{s.ids["gone"], s.ids["busy"]})
	require.NoError(t, err)
	br.do(chromedp.Navigate(s.url("replays")), chromedp.WaitVisible(chromedp.CSS("#replays")))
	fill("1h", "0.01", "one at a time")
	br.do(chromedp.Click(chromedp.CSS("#replay-submit")), chromedp.WaitVisible(chromedp.CSS("#plan")))
	br.do(chromedp.Click(chromedp.CSS("#replay-submit")), chromedp.WaitVisible(chromedp.CSS("#cancel-replay")))
	require.Contains(t, br.text("#replay-pace"), "0.01/s")

	// Its pace, changed from its page: refused without a reason or over
	// the limit, then recorded with who and why. Each try starts from the
	// page afresh, so that what is waited for is the answer's.
	page, err := chromedp.Run(br.ctx, chromedp.Location())
	require.NoError(t, err)
	page, _, _ = strings.Cut(page, "?")
	pace := func(p, reason, answer string) {
		br.do(chromedp.Navigate(page), chromedp.WaitVisible(chromedp.CSS("#pace-replay")),
			chromedp.SetValue(chromedp.CSS(`form[action$="/pace"] input[name="pace"]`), p))
		if reason != "" {
			br.do(chromedp.SendKeys(chromedp.CSS(`form[action$="/pace"] textarea[name="reason"]`), reason))
		}
		// The form's required fields are the browser's; the server checks
		// them too.
		br.do(chromedp.Evaluate[chromedp.Void](`document.querySelector('form[action$="/pace"]').noValidate = true`),
			chromedp.Click(chromedp.CSS("#pace-replay")), chromedp.WaitVisible(chromedp.CSS(answer)))
	}
	pace("5000", "faster", "#error")
	require.Contains(t, br.text("#error"), "over the limit of 1000")
	pace("0.02", "", "#error")
	require.Contains(t, br.text("#error"), "a reason is required")
	require.Contains(t, br.text("#replay-pace"), "0.01/s")
	require.NotContains(t, br.text("#replay-pace"), "0.02/s", "nothing changed")
	pace("0.02", "partner copes", "#flash")
	require.Contains(t, br.text("#flash"), "Pace changed")
	require.Contains(t, br.text("#replay-pace"), "0.02/s from 0.01/s")
	require.Contains(t, br.text("#replay-pace"), "by web:ada: partner copes")

	br.do(chromedp.SendKeys(chromedp.CSS(`form[action$="/cancel"] textarea[name="reason"]`), "partner asked to wait"),
		chromedp.Click(chromedp.CSS("#cancel-replay")), chromedp.WaitNotPresent(chromedp.CSS("#cancel-replay")), chromedp.WaitVisible(chromedp.CSS("#flash")))
	require.Contains(t, br.text("#flash"), "Cancelled")
	require.True(t, strings.HasPrefix(br.text("#replay-state"), "cancelled"))
	require.Equal(t, 0, br.count("#cancel-replay"), "nothing left to cancel")
	br.do(chromedp.Navigate(s.url("replays")), chromedp.WaitVisible(chromedp.CSS("#replays")))
	require.Contains(t, br.text("#replays"), "cancelled")
}
