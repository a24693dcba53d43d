package webui_test

import (
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/outboxtype"
)

// TestRequeueAndDispatchersFromTheWebView: an effect written by SQL with no
// River job is advised, in the view's words, to be requeued; the requeue
// button (its dry run first) gives it a job and it is delivered. The
// Dispatchers page lists the running outboxd with its settings.
func TestRequeueAndDispatchersFromTheWebView(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	br := b{t, browser(t)}
	br.authenticate("ada", adminToken)
	id := s.ids["byhand"].String()
	br.do(chromedp.Navigate(s.url("effects/"+id)), chromedp.WaitVisible(chromedp.CSS("#diagnosis")))
	require.Contains(t, br.text("#diagnosis"), "no live River job: nothing will fire it. Requeue gives it one")
	br.do(chromedp.Click(chromedp.CSS(`a.action[href$="/actions/requeue"]`)), chromedp.WaitVisible(chromedp.CSS("#dryrun")))
	require.Contains(t, br.text("#dryrun"), "pending -> pending")
	br.do(chromedp.SetValue(chromedp.CSS(`textarea[name="reason"]`), "written by SQL without a job"),
		chromedp.Click(chromedp.CSS(`form.action button[type="submit"]`)), chromedp.WaitVisible(chromedp.CSS("#flash")))
	require.Contains(t, br.text("#flash"), "requeue by web:ada")
	s.wait(t, "byhand", outboxtype.StateConfirmed)

	// Requeued twice: refused, a job is live or the effect is done.
	br.do(chromedp.Navigate(s.url("effects/"+id+"/actions/requeue")), chromedp.WaitVisible(chromedp.CSS("#dryrun")))
	require.Contains(t, br.text("#dryrun"), "Would be refused")

	br.do(chromedp.Click(chromedp.CSS(`nav a[href$="dispatchers"]`)), chromedp.WaitVisible(chromedp.CSS("#dispatchers")))
	require.Contains(t, br.text("#dispatchers"), "running")
	require.Contains(t, br.text("#dispatchers"), "rescue_after")
}
