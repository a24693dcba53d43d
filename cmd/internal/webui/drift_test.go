package webui_test

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/providers"
)

// TestDriftIsSeenAndReviewedFromTheWebView: a provider event about an
// effect outboxd failed shows on the overview as something that needs a
// person, on the drift page with what to check, and on the effect's page;
// an admin acknowledges it with a reason from either, and it leaves the
// overview, the list and the unacknowledged count, keeping the review.
func TestDriftIsSeenAndReviewedFromTheWebView(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	ctx := context.Background()
	apply := func(name, eventID string) {
		e := s.effect(t, name)
		require.NoError(t, pgx.BeginFunc(ctx, s.db.Pool, func(tx pgx.Tx) error {
			_, err := s.op.ApplyProviderEvent(ctx, tx, providers.EventReport{Provider: "webhook", EventID: eventID, Type: "order.paid.delivered",
				Key: e.IdempotencyKey, ObjectID: "rcv_" + eventID, Outcome: providers.EventDone, Status: "processed", At: time.Now()})
			return err
		}))
	}
	br := b{t, browser(t)}
	br.authenticate("ada", adminToken)
	br.do(chromedp.Navigate(s.url("")), chromedp.WaitVisible(chromedp.CSS("#needs-you")))
	require.NotContains(t, br.text("#needs-you"), "drift")
	require.Zero(t, br.count("#overview-drift"))

	apply("gone", "evt_1")
	br.do(chromedp.Navigate(s.url("")), chromedp.WaitVisible(chromedp.CSS("#needs-you")))
	require.Contains(t, br.text("#needs-you"), "1 drift record(s) to review")
	require.Contains(t, br.text("#overview-drift"), s.ids["gone"].String())
	require.Contains(t, br.text("#overview-drift"), "acted_while_failed")
	require.Contains(t, br.text("#overview-drift"), "rcv_evt_1: status processed")

	br.do(chromedp.Click(chromedp.CSS("#all-drift")), chromedp.WaitVisible(chromedp.CSS("#drift-list")))
	list := br.text("#drift-list")
	require.Contains(t, list, "webhook evt_1 (order.paid.delivered)")
	require.Contains(t, list, "failed when found, failed now")
	require.Contains(t, list, "not reviewed")
	br.do(chromedp.Click(chromedp.CSS(`#drift-list input[name="id"]`)),
		chromedp.SetValue(chromedp.CSS(`textarea[name="reason"]`), "receiver's log shows it processed; confirmed"),
		chromedp.Click(chromedp.CSS("#ack-drift")), chromedp.WaitVisible(chromedp.CSS("#flash")))
	require.Contains(t, br.text("#flash"), "1 drift record(s) acknowledged")
	require.Contains(t, br.text("#no-drift"), "No drift to review")
	n, err := s.op.UnacknowledgedDrift(ctx)
	require.NoError(t, err)
	require.Zero(t, n)
	recs, err := s.op.Drift(ctx, outboxtype.DriftFilter{Acknowledged: true})
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.Equal(t, "web:ada", *recs[0].AcknowledgedBy)
	require.Equal(t, "receiver's log shows it processed; confirmed", *recs[0].AckReason)
	br.do(chromedp.Click(chromedp.CSS(`input[name="all"]`)), chromedp.Click(chromedp.CSS(`form.filters button`)), chromedp.WaitVisible(chromedp.CSS("#drift-list")))
	require.Contains(t, br.text("#drift-list"), "acknowledged")
	require.Contains(t, br.text("#drift-list"), "by web:ada")

	// From the effect's page.
	apply("busy", "evt_2")
	br.do(chromedp.Navigate(s.url("effects/"+s.ids["busy"].String())), chromedp.WaitVisible(chromedp.CSS("#drift")))
	require.Contains(t, br.text("#drift"), "not reviewed")
	br.do(chromedp.SetValue(chromedp.CSS(`textarea[name="reason"]`), "partner confirmed by mail"),
		chromedp.Click(chromedp.CSS("#ack-drift")), chromedp.WaitVisible(chromedp.CSS("#flash")))
	require.Contains(t, br.text("#flash"), "drift acknowledged")
	require.Contains(t, br.text("#drift"), "acknowledged by web:ada: partner confirmed by mail")
	br.do(chromedp.Navigate(s.url("")), chromedp.WaitVisible(chromedp.CSS("#needs-you")))
	require.NotContains(t, br.text("#needs-you"), "drift")

	// No reason, or no record ticked: refused, nothing acknowledged.
	require.NoError(t, pgx.BeginFunc(ctx, s.db.Pool, func(tx pgx.Tx) error {
		_, err := s.op.ApplyProviderEvent(ctx, tx, providers.EventReport{Provider: "webhook", EventID: "evt_3", Type: "order.paid.delivered",
			Key: strings.Repeat("ab", 32), Outcome: providers.EventDone, At: time.Now()})
		return err
	}))
	tok := strings.Repeat("c", 64)
	post := func(form url.Values) int {
		form.Set("csrf", tok)
		req, err := http.NewRequest(http.MethodPost, s.url("drift/ack"), strings.NewReader(form.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.SetBasicAuth("ada", adminToken)
		req.AddCookie(&http.Cookie{Name: "outboxd_csrf", Value: tok})
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	open, err := s.op.Drift(ctx, outboxtype.DriftFilter{})
	require.NoError(t, err)
	require.Len(t, open, 1)
	id := strconv.FormatInt(open[0].ID, 10)
	require.Equal(t, http.StatusBadRequest, post(url.Values{"id": {id}}))
	require.Equal(t, http.StatusBadRequest, post(url.Values{"reason": {"x"}}))
	require.Equal(t, http.StatusBadRequest, post(url.Values{"id": {"#1; drop"}, "reason": {"x"}}))
	n, err = s.op.UnacknowledgedDrift(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
}
