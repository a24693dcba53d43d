package webui_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/cmd/internal/webui"
	"github.com/outboxd/outboxd/internal/fakes"
	"github.com/outboxd/outboxd/internal/testdb"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/webhook"
	"github.com/outboxd/outboxd/sideeffects"
	"github.com/outboxd/outboxd/sideeffects/sideeffectstest"
)

const (
	secret     = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	adminToken = "test-admin-token-0123456789"
)

// site is a real dispatcher on real Postgres with a recording webhook
// receiver, the web view in front of it, and effects in the situations an
// operator meets.
type site struct {
	db   *testdb.DB
	op   *sideeffects.Operator
	recv *fakes.Receiver
	ui   *httptest.Server
	ids  map[string]uuid.UUID
}

func newSite(t *testing.T) *site {
	t.Helper()
	s := &site{db: testdb.New(t), ids: map[string]uuid.UUID{}}
	var err error
	s.recv, err = fakes.NewReceiver(secret)
	require.NoError(t, err)
	t.Cleanup(s.recv.Close)
	hostile := func(w http.ResponseWriter, _ *http.Request) int {
		w.WriteHeader(http.StatusGone)
		_, _ = io.WriteString(w, `<script>alert("pwned")</script> endpoint retired`)
		return http.StatusGone
	}
	s.recv.Respond("/gone", hostile)
	s.recv.Respond("/busy", fakes.Status(409), fakes.Status(409))
	loop := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	wh, err := webhook.New(webhook.Config{Secret: secret, AllowedNetworks: loop, Timeout: 2 * time.Second})
	require.NoError(t, err)
	// The site stages effects an operator must act on, such as a row
	// written by SQL without a job ("byhand"): a sweep in the middle of a
	// test would give it a job by itself, and the operator's requeue would
	// be refused. So the leader sweeps when it starts and then not for an
	// hour (the default, a minute, is shorter than a test on a loaded box).
	sideeffectstest.Start(t, s.db.Pool, sideeffects.Config{Schema: s.db.Schema, Providers: []providers.Provider{wh}, Retry: outboxtype.RetryPolicy{MaxAttempts: 2},
		SweepInterval: time.Hour, Settings: map[string]any{"rescue_after": "2m0s"}})
	op, err := sideeffects.NewOperator(s.db.Pool, sideeffects.OperatorConfig{Schema: s.db.Schema,
		Guarantees: map[string]providers.Guarantees{"webhook": wh.Guarantees()}})
	require.NoError(t, err)
	s.op = op
	h, err := webui.New(webui.Config{Schema: s.db.Schema, Operator: op, AdminToken: adminToken,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	s.ui = httptest.NewServer(h)
	t.Cleanup(s.ui.Close)

	ob, err := outbox.New(outbox.Config{Jobs: outbox.JobsInTransaction, Schema: s.db.Schema, WebhookAllowedNetworks: loop})
	require.NoError(t, err)
	for _, name := range []string{"ok", "gone", "busy", "nojob"} {
		require.NoError(t, pgx.BeginFunc(context.Background(), s.db.Pool, func(tx pgx.Tx) error {
			res, err := ob.Enqueue(context.Background(), tx, outbox.Event{ID: uuid.New(), Type: "order.paid", AggregateType: "order", AggregateID: "ord_" + name},
				outbox.Effect{Kind: "webhook.order_paid", Provider: "webhook", Payload: json.RawMessage(`{"url": "` + s.recv.URL + "/" + name + `", "body": {}}`)})
			if err == nil {
				s.ids[name] = res.Effects[0].ID
			}
			return err
		}))
	}
	s.wait(t, "ok", outboxtype.StateConfirmed)
	s.wait(t, "gone", outboxtype.StateFailed)
	s.wait(t, "busy", outboxtype.StateFailed)
	s.wait(t, "nojob", outboxtype.StateConfirmed)
	// A row an application wrote by SQL an hour ago, with no job: stuck.
	s.ids["byhand"] = uuid.New()
	_, err = s.db.Pool.Exec(context.Background(), `INSERT INTO `+s.db.Schema+`.side_effects (id, source_id, kind, provider, payload, created_at, updated_at)
		SELECT $2, source_id, 'webhook.by_hand', provider, payload, now() - interval '1 hour', now() - interval '1 hour'
		FROM `+s.db.Schema+`.side_effects WHERE id = $1`, s.ids["nojob"], s.ids["byhand"])
	require.NoError(t, err)
	return s
}

func (s *site) wait(t *testing.T, name string, state outboxtype.State) {
	t.Helper()
	require.Eventually(t, func() bool {
		e, err := s.op.Get(context.Background(), s.ids[name])
		return err == nil && e.State == state
	}, 30*time.Second, 10*time.Millisecond, "%s: want %s", name, state)
}

func (s *site) url(path string) string { return s.ui.URL + "/ui/" + path }

// theBrowser is one headless Chromium for the package's tests, started by
// the first that needs it and closed by TestMain: each test works in a
// browser context of its own (no cookies, storage or headers shared), and
// the package no longer starts a Chromium a test.
var theBrowser struct {
	once   sync.Once
	ctx    context.Context
	cancel context.CancelFunc
	err    error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if theBrowser.cancel != nil {
		theBrowser.cancel()
	}
	os.Exit(code)
}

// browser opens a tab in a browser context of the test's own, in headless
// Chromium (Debian's chromium package); without it the test is skipped
// locally and fails in CI, where .ci/run installs it.
func browser(t *testing.T) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("chromium is not installed: .ci/run installs Debian's chromium package")
		}
		t.Skip("chromium not installed (apt-get install chromium)")
	}
	theBrowser.once.Do(func() {
		opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.DisableGPU,
			chromedp.Flag("disable-quic", true), chromedp.Flag("disable-component-update", true),
			chromedp.WindowSize(1280, 1000))
		actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
		bctx, bcancel := chromedp.NewContext(actx)
		theBrowser.ctx, theBrowser.cancel = bctx, func() { bcancel(); acancel() }
		theBrowser.err = chromedp.Do(bctx) // no timeout on the first run: it would stop the browser
	})
	require.NoError(t, theBrowser.err, "start chromium")
	tctx, cancel := chromedp.NewContext(theBrowser.ctx, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	// A bound on a hung browser, not on speed: under -race with other
	// packages' tests beside it, a test's pages took over 2 minutes on a
	// 2-core box (TestTheOverviewNamesTheIncidentNow, 132 s).
	ctx, cancel := context.WithTimeout(tctx, 6*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// b drives one browser tab in a test.
type b struct {
	t   *testing.T
	ctx context.Context
}

func (b b) do(steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	require.NoError(b.t, chromedp.Do(b.ctx, steps...))
}

func (b b) text(sel string) string {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Text(chromedp.CSS(sel)))
	require.NoError(b.t, err)
	return v
}

func (b b) count(sel string) int {
	b.t.Helper()
	n, err := chromedp.Run(b.ctx, chromedp.Evaluate[int](fmt.Sprintf("document.querySelectorAll(%q).length", sel)))
	require.NoError(b.t, err)
	return n
}

// authenticate makes the tab send HTTP basic auth with user and password
// on every request, as a browser does once its prompt was answered.
func (b b) authenticate(user, password string) {
	b.t.Helper()
	auth := "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password))
	b.do(chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		if _, err := cdp.Call(ctx, tg, network.Enable, network.EnableParams{}); err != nil {
			return err
		}
		_, err := cdp.Call(ctx, tg, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: network.Headers{"Authorization": auth}})
		return err
	}))
}

// shot saves a screenshot of the page for a person to look at (not
// committed): OUTBOXD_SCREENSHOTS, else .screenshots at the repository root.
func (b b) shot(name string) {
	b.t.Helper()
	dir := os.Getenv("OUTBOXD_SCREENSHOTS")
	if dir == "" {
		dir = filepath.Join("..", "..", "..", ".screenshots")
	}
	require.NoError(b.t, os.MkdirAll(dir, 0o755))
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	require.NoError(b.t, err)
	p := filepath.Join(dir, name+".png")
	require.NoError(b.t, os.WriteFile(p, png, 0o644))
	b.t.Logf("screenshot: %s", p)
}

func TestWebViewInABrowser(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	br := b{t, browser(t)}

	// Overview: the stuck and failed effects, with the diagnosis.
	br.do(chromedp.Navigate(s.url("")), chromedp.WaitVisible(chromedp.CSS("#stuck")))
	text := br.text("#stuck")
	require.Contains(t, text, s.ids["gone"].String())
	require.Contains(t, text, s.ids["busy"].String())
	require.Contains(t, text, "no live River job")
	require.Contains(t, text, "The provider refused it (permanent)")
	require.Contains(t, br.text("#reasons"), "HTTP 410 (endpoint gone)")
	require.Contains(t, br.text("#counts"), "failed")
	require.Positive(t, br.count("#chart rect.confirmed"), "the chart shows the confirmed effects")
	br.shot("overview")

	// Search by idempotency key.
	busy, err := s.op.Get(context.Background(), s.ids["busy"])
	require.NoError(t, err)
	br.do(chromedp.Navigate(s.url("effects")), chromedp.WaitVisible(chromedp.CSS(`input[name="q"]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name="q"]`), busy.IdempotencyKey), chromedp.Submit(chromedp.CSS(`input[name="q"]`)),
		chromedp.WaitVisible(chromedp.CSS("#results")))
	require.Contains(t, br.text("#results"), busy.ID.String())
	br.shot("search")

	// The effect page: its attempt history.
	br.do(chromedp.Click(chromedp.CSS("#results a")), chromedp.WaitVisible(chromedp.CSS("#timeline")))
	text = br.text("#timeline")
	require.Contains(t, text, "retryable")
	require.Equal(t, 2, strings.Count(text, "HTTP 409"), "both attempts")
	require.Less(t, strings.Index(text, "enqueued"), strings.Index(text, "attempt 1"))
	require.Less(t, strings.Index(text, "attempt 1"), strings.Index(text, "attempt 2"), "in order")
	require.Contains(t, br.text("#diagnosis"), "failed: retries exhausted after 2 attempts")
	require.Contains(t, br.text("#diagnosis"), "Retry once the cause is fixed")
	require.NotContains(t, br.text("#diagnosis"), "outboxctl", "the web view names its own buttons")
	br.shot("effect")

	// A receiver's error body with <script> is text, and no script of it runs.
	br.do(chromedp.Navigate(s.url("effects/"+s.ids["gone"].String())), chromedp.WaitVisible(chromedp.CSS("#columns")))
	require.Contains(t, br.text("#columns"), `<script>alert("pwned")</script> endpoint retired`)
	require.Equal(t, 1, br.count("script"), "only the view's own app.js")
	br.shot("effect-hostile-error")

	// Retry with a reason, as an admin: the dry run first, then the change
	// and its audit row; the dispatcher delivers it (the receiver accepts
	// now).
	br.authenticate("ada", adminToken)
	br.do(chromedp.Navigate(s.url("effects/"+busy.ID.String()+"/actions/retry")), chromedp.WaitVisible(chromedp.CSS("#dryrun")))
	require.Contains(t, br.text("#dryrun"), "would move failed -> pending")
	br.shot("action-retry")
	br.do(chromedp.SendKeys(chromedp.CSS(`textarea[name="reason"]`), "rate limit raised"),
		chromedp.Click(chromedp.CSS(`form.action button[type="submit"]`)), chromedp.WaitVisible(chromedp.CSS("#flash")))
	require.Contains(t, br.text("#flash"), "retry by web:ada: failed -> pending")
	s.wait(t, "busy", outboxtype.StateConfirmed)
	audit, err := s.op.Audit(context.Background(), busy.ID)
	require.NoError(t, err)
	require.Len(t, audit, 1)
	require.Equal(t, "retry", audit[0].Action)
	require.Equal(t, "web:ada", audit[0].Actor)
	require.Equal(t, "rate limit raised", audit[0].Reason)
	br.do(chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#audit")))
	require.Contains(t, br.text("#audit"), "rate limit raised")
	br.shot("effect-after-retry")

	// A cross-site page that posts the action form: the browser sends the
	// credential, but not this site's CSRF token. Refused; nothing changes.
	gone := s.ids["gone"].String()
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, `<html><body><form id="f" method="post" action="%s"><input name="reason" value="pwned"></form>
			<script>document.getElementById("f").submit()</script></body></html>`, s.url("effects/"+gone+"/actions/cancel"))
	}))
	defer evil.Close()
	evilURL := strings.Replace(evil.URL, "127.0.0.1", "localhost", 1) // another site
	br.do(chromedp.Navigate(evilURL))
	require.Eventually(t, func() bool {
		loc, err := chromedp.Run(br.ctx, chromedp.Location())
		return err == nil && strings.Contains(loc, "/actions/cancel")
	}, 10*time.Second, 20*time.Millisecond)
	br.do(chromedp.WaitReady(chromedp.CSS("body")))
	require.Contains(t, br.text("body"), "refused")
	e, err := s.op.Get(context.Background(), s.ids["gone"])
	require.NoError(t, err)
	require.Equal(t, outboxtype.StateFailed, e.State, "not cancelled")
}

// Without the credential an action is refused; with it but without the
// CSRF token too; a read-only view has no actions at all.
func TestActionsNeedTheCredentialAndTheCSRFToken(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	id := s.ids["gone"].String()
	post := func(auth string, form url.Values, cookie *http.Cookie) *http.Response {
		req, err := http.NewRequest(http.MethodPost, s.url("effects/"+id+"/actions/cancel"), strings.NewReader(form.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if auth != "" {
			req.SetBasicAuth("mallory", auth)
		}
		if cookie != nil {
			req.AddCookie(cookie)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp
	}
	resp := post("", url.Values{"reason": {"x"}}, nil)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.Contains(t, resp.Header.Get("WWW-Authenticate"), "Basic")
	require.Equal(t, http.StatusUnauthorized, post("wrong-token-0123456789", url.Values{"reason": {"x"}}, nil).StatusCode)
	require.Equal(t, http.StatusForbidden, post(adminToken, url.Values{"reason": {"x"}}, nil).StatusCode, "no CSRF token")
	require.Equal(t, http.StatusForbidden, post(adminToken, url.Values{"reason": {"x"}, "csrf": {strings.Repeat("a", 64)}},
		&http.Cookie{Name: "outboxd_csrf", Value: strings.Repeat("b", 64)}).StatusCode, "a token not this browser's")
	e, err := s.op.Get(context.Background(), s.ids["gone"])
	require.NoError(t, err)
	require.Equal(t, outboxtype.StateFailed, e.State)

	// With both, and no reason: refused with the form again.
	tok := strings.Repeat("c", 64)
	resp = post(adminToken, url.Values{"csrf": {tok}}, &http.Cookie{Name: "outboxd_csrf", Value: tok})
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	resp = post(adminToken, url.Values{"csrf": {tok}, "reason": {"endpoint retired"}}, &http.Cookie{Name: "outboxd_csrf", Value: tok})
	require.Equal(t, http.StatusOK, resp.StatusCode, "followed the redirect to the effect page")
	e, err = s.op.Get(context.Background(), s.ids["gone"])
	require.NoError(t, err)
	require.Equal(t, outboxtype.StateCancelled, e.State)

	// A script with the bearer token needs no CSRF token: a browser never
	// sends a bearer token by itself.
	req, err := http.NewRequest(http.MethodPost, s.url("effects/"+s.ids["busy"].String()+"/actions/acknowledge"),
		strings.NewReader(url.Values{"reason": {"rate limit is the receiver's"}}.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	e, err = s.op.Get(context.Background(), s.ids["busy"])
	require.NoError(t, err)
	require.NotNil(t, e.AcknowledgedAt, "acknowledged by the script")

	// The note after an action is written from the audit trail, never
	// from the link: a crafted link shows at most what was done last.
	resp, err = http.Get(s.url("effects/" + id + "?done=" + url.QueryEscape("Your session expired: call +1 555 0100")))
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NotContains(t, string(body), "session expired")
	require.NotContains(t, string(body), "555 0100")
	require.Contains(t, string(body), `id="flash">cancel by web:mallory: failed -&gt; cancelled`, "the real last action")

	// Every page carries the security headers.
	resp, err = http.Get(s.url(""))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, webui.ContentSecurityPolicy, resp.Header.Get("Content-Security-Policy"))
	require.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"))
}

func TestReadOnlyViewRefusesActions(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	op, err := sideeffects.NewOperator(db.Pool, sideeffects.OperatorConfig{Schema: db.Schema})
	require.NoError(t, err)
	h, err := webui.New(webui.Config{Schema: db.Schema, Operator: op})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/ui/effects/" + uuid.NewString() + "/actions/retry")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.Contains(t, string(body), "read-only")
	_, err = webui.New(webui.Config{Operator: op, AdminToken: "short"})
	require.ErrorContains(t, err, "at least 16 characters")
}

// TestAReadTokenGuardsEveryPage: with a read token (a view beyond
// loopback), every page needs it or the admin token; the read token does
// not act.
func TestAReadTokenGuardsEveryPage(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	op, err := sideeffects.NewOperator(db.Pool, sideeffects.OperatorConfig{Schema: db.Schema})
	require.NoError(t, err)
	const readToken = "read-token-0123456789"
	h, err := webui.New(webui.Config{Schema: db.Schema, Operator: op, AdminToken: adminToken, ReadToken: readToken})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	get := func(path, user, pass string) int {
		req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		require.NoError(t, err)
		if pass != "" {
			req.SetBasicAuth(user, pass)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, path := range []string{"/ui/", "/ui/effects", "/ui/effects/" + uuid.NewString(), "/ui/static/app.css"} {
		require.Equal(t, http.StatusUnauthorized, get(path, "", ""), "%s without a credential", path)
		require.Equal(t, http.StatusUnauthorized, get(path, "eve", "guess-0123456789abc"), "%s with a wrong one", path)
	}
	require.Equal(t, http.StatusOK, get("/ui/", "ada", readToken))
	require.Equal(t, http.StatusOK, get("/ui/", "ada", adminToken), "the admin token reads too")
	require.Equal(t, http.StatusUnauthorized, get("/ui/effects/"+uuid.NewString()+"/actions/retry", "ada", readToken), "the read token does not act")
	_, err = webui.New(webui.Config{Operator: op, ReadToken: "short"})
	require.ErrorContains(t, err, "at least 16 characters")
}

// Search pages through results 50 at a time, newest first, with a cursor:
// every effect once, none twice.
func TestSearchPagesWithAKeysetCursor(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	ob, err := outbox.New(outbox.Config{Jobs: outbox.JobsInTransaction, Schema: db.Schema})
	require.NoError(t, err)
	for i := range 60 {
		require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			_, err := ob.Enqueue(ctx, tx, outbox.Event{ID: uuid.New(), Type: "order.paid"}, outbox.Effect{Kind: "webhook.order_paid", Provider: "webhook",
				Payload: json.RawMessage(fmt.Sprintf(`{"url": "https://hooks.example.com/%d", "body": {}}`, i))})
			return err
		}))
	}
	op, err := sideeffects.NewOperator(db.Pool, sideeffects.OperatorConfig{Schema: db.Schema})
	require.NoError(t, err)
	h, err := webui.New(webui.Config{Schema: db.Schema, Operator: op})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	get := func(path string) string {
		resp, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return string(b)
	}
	seen := map[string]bool{}
	page := get("/ui/effects?state=pending&kind=webhook.order_paid")
	for range 3 {
		onPage := map[string]bool{} // what now links the newest one too
		for _, m := range regexpEffectLink.FindAllStringSubmatch(page, -1) {
			onPage[m[1]] = true
		}
		for id := range onPage {
			require.False(t, seen[id], "listed on two pages: %s", id)
			seen[id] = true
		}
		next := regexpNext.FindStringSubmatch(page)
		if next == nil {
			break
		}
		page = get(strings.ReplaceAll(next[1], "&amp;", "&"))
	}
	require.Len(t, seen, 60)
	resp, err := http.Get(srv.URL + "/ui/effects?since=yesterday")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, string(body), "since &#34;yesterday&#34;: give a time")
}

var (
	regexpEffectLink = regexp.MustCompile(`href="/ui/effects/([0-9a-f-]{36})"`)
	regexpNext       = regexp.MustCompile(`<a id="next" href="([^"]+)"`)
)

// TestABlockedChainInTheBrowser: effects waiting behind a failed head of
// their ordering key are listed under it on the overview, their page says
// what they wait for, and releasing the head from its page lets them go.
func TestABlockedChainInTheBrowser(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	ctx := context.Background()
	s.recv.Respond("/capture", fakes.Status(http.StatusGone))
	ob, err := outbox.New(outbox.Config{Jobs: outbox.JobsInTransaction, Schema: s.db.Schema, WebhookAllowedNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	require.NoError(t, err)
	for _, name := range []string{"capture", "refund", "receipt"} {
		require.NoError(t, pgx.BeginFunc(ctx, s.db.Pool, func(tx pgx.Tx) error {
			res, err := ob.Enqueue(ctx, tx, outbox.Event{ID: uuid.New(), Type: "payment." + name},
				outbox.Effect{Kind: "webhook." + name, Provider: "webhook", OrderingKey: "pay_9",
					Payload: json.RawMessage(`{"url": "` + s.recv.URL + "/" + name + `", "body": {}}`)})
			if err == nil {
				s.ids[name] = res.Effects[0].ID
			}
			return err
		}))
	}
	s.wait(t, "capture", outboxtype.StateFailed)
	// The chain has waited an hour.
	_, err = s.db.Pool.Exec(ctx, `UPDATE `+s.db.Schema+`.side_effects SET updated_at = now() - interval '1 hour' WHERE ordering_key = 'pay_9'`)
	require.NoError(t, err)

	br := b{t, browser(t)}
	br.do(chromedp.Navigate(s.url("")), chromedp.WaitVisible(chromedp.CSS("#stuck")))
	require.Equal(t, 2, br.count("#stuck tr.chain"))
	rows, err := chromedp.Run(br.ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#stuck tr")].map(r => r.innerText)`))
	require.NoError(t, err)
	at := func(name string) int {
		for i, r := range rows {
			if strings.Contains(r, s.ids[name].String()) && !strings.Contains(r, "blocked behind "+s.ids[name].String()) {
				return i
			}
		}
		return -1
	}
	require.Equal(t, at("capture")+1, at("refund"), "the chain follows its head")
	require.Equal(t, at("capture")+2, at("receipt"))
	require.Contains(t, rows[at("refund")], "blocked behind "+s.ids["capture"].String())
	br.shot("overview-blocked-chain")

	br.do(chromedp.Navigate(s.url("effects/"+s.ids["receipt"].String())), chromedp.WaitVisible(chromedp.CSS("#blocked")))
	require.Contains(t, br.text("#blocked"), s.ids["capture"].String())
	require.Contains(t, br.text("#columns"), "pay_9 (position")

	br.authenticate("ada", adminToken)
	br.do(chromedp.Navigate(s.url("effects/"+s.ids["capture"].String())), chromedp.WaitVisible(chromedp.CSS("#columns")))
	br.do(chromedp.Click(chromedp.CSS(`a.action[href$="/actions/release"]`)), chromedp.WaitVisible(chromedp.CSS("#dryrun")))
	require.Contains(t, br.text("#dryrun"), `after it on ordering key "pay_9" would go on; it stays failed`)
	// The dry run lists what would go out, in order, and warns that it
	// may depend on the head.
	behind := br.text("#behind")
	require.Less(t, strings.Index(behind, s.ids["refund"].String()), strings.Index(behind, s.ids["receipt"].String()))
	require.Contains(t, br.text("#depends"), "may depend on it")
	br.do(chromedp.SendKeys(chromedp.CSS(`textarea[name="reason"]`), "captured by phone"),
		chromedp.Click(chromedp.CSS(`form.action button[type="submit"]`)), chromedp.WaitVisible(chromedp.CSS("#flash")))
	require.Contains(t, br.text("#flash"), "release by web:ada: failed -> failed")
	s.wait(t, "refund", outboxtype.StateConfirmed)
	s.wait(t, "receipt", outboxtype.StateConfirmed)
	require.Equal(t, outboxtype.StateFailed, s.effectState(t, "capture"))
}

func (s *site) effectState(t *testing.T, name string) outboxtype.State {
	t.Helper()
	e, err := s.op.Get(context.Background(), s.ids[name])
	require.NoError(t, err)
	return e.State
}

// TestSearchTakesKeysAsPeoplePasteThem: an uppercase key, the 12-digit
// prefix outboxctl prints (with or without its ellipsis), an order id and a
// provider's reference (Stripe's, SendGrid's message id or its events'
// sg_message_id) find the effect.
func TestSearchTakesKeysAsPeoplePasteThem(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	e, err := s.op.Get(context.Background(), s.ids["busy"])
	require.NoError(t, err)
	for _, q := range []string{strings.ToUpper(e.IdempotencyKey), e.IdempotencyKey[:12], e.IdempotencyKey[:12] + "…", e.IdempotencyKey[:20]} {
		resp, err := http.Get(s.url("effects?q=" + url.QueryEscape(q)))
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, "%q: %s", q, body)
		require.Contains(t, string(body), e.ID.String(), q)
		require.NotContains(t, string(body), s.ids["gone"].String(), "only the effect whose key it is: %q", q)
	}
	// An order id, pasted as it is: the effects of that aggregate's events,
	// whatever its type.
	resp, err := http.Get(s.url("effects?q=ord_busy"))
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	require.Contains(t, string(body), e.ID.String())
	require.NotContains(t, string(body), s.ids["gone"].String())

	// Provider references as the provider shows them: a Stripe id, a
	// SendGrid X-Message-Id, and the sg_message_id of SendGrid's events
	// (the message id, a dot, the recipient's part).
	_, err = s.db.Pool.Exec(context.Background(), `UPDATE `+s.db.Schema+`.side_effects SET provider_ref = CASE id
		WHEN $1 THEN 'pi_3NqXj2LkdIwHu7ix1x0Fz9p2' WHEN $2 THEN 'W86EgYT6SQKk0lRflfLRsA' END WHERE id IN ($1, $2)`, s.ids["ok"], s.ids["nojob"])
	require.NoError(t, err)
	for q, want := range map[string]string{
		"pi_3NqXj2LkdIwHu7ix1x0Fz9p2": "ok", " pi_3NqXj2LkdIwHu7ix1x0Fz9p2 ": "ok",
		"W86EgYT6SQKk0lRflfLRsA": "nojob", "W86EgYT6SQKk0lRflfLRsA.filterdrecv-p3mdw1-756b745b58-kmzbl-18-5F5FC76C-9.0": "nojob",
	} {
		resp, err := http.Get(s.url("effects?q=" + url.QueryEscape(q)))
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, "%q: %s", q, body)
		require.Contains(t, string(body), s.ids[want].String(), q)
		for name, id := range s.ids {
			if name != want {
				require.NotContains(t, string(body), id.String(), "%q finds only the effect with that reference", q)
			}
		}
	}

	// A reference no effect has: the page says what the box takes.
	resp, err = http.Get(s.url("effects?q=" + url.QueryEscape("pi_3NqXj2LkdIwHu7ixUNKNOWN")))
	require.NoError(t, err)
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, string(body), "no effect with the provider reference")
	require.Contains(t, string(body), "first 12 or more digits")
}

// TestTheDryRunIsWhatTheClickDoes: ticking an option shows that option's
// dry run before anything is done (the click after it does it), and a form
// opened before another operator changed the effect does nothing but show
// what it would do now.
func TestTheDryRunIsWhatTheClickDoes(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	br := b{t, browser(t)}
	br.authenticate("ada", adminToken)
	ctx := context.Background()
	// "busy" failed after retries; make it a fired effect, so that retry
	// needs force.
	_, err := s.db.Pool.Exec(ctx, `UPDATE `+s.db.Schema+`.side_effects SET state = 'fired', fired_at = now() - interval '1 hour',
		updated_at = now() - interval '1 hour' WHERE id = $1`, s.ids["busy"])
	require.NoError(t, err)
	_, err = s.db.Pool.Exec(ctx, `DELETE FROM `+s.db.Schema+`.river_job WHERE args->>'effect_id' = $1::text`, s.ids["busy"])
	require.NoError(t, err)

	br.do(chromedp.Navigate(s.url("effects/"+s.ids["busy"].String()+"/actions/retry")), chromedp.WaitVisible(chromedp.CSS("#dryrun")))
	require.Contains(t, br.text("#dryrun"), "Would be refused")
	br.do(chromedp.SendKeys(chromedp.CSS(`textarea[name="reason"]`), "checked: never reached the receiver"),
		chromedp.Click(chromedp.CSS(`input[name="force"]`)),
		chromedp.Click(chromedp.CSS(`form.action button[type="submit"]`)), chromedp.WaitVisible(chromedp.CSS("#review")))
	require.Contains(t, br.text("#review"), "the options changed since the dry run")
	require.Contains(t, br.text("h2"), "with force")
	require.Contains(t, br.text("#dryrun"), "would move fired -> pending")
	require.Equal(t, outboxtype.StateFired, s.effectState(t, "busy"), "nothing done before its dry run was shown")
	br.shot("action-review-options")
	br.do(chromedp.Click(chromedp.CSS(`form.action button[type="submit"]`)), chromedp.WaitVisible(chromedp.CSS("#flash")))
	require.Contains(t, br.text("#flash"), "retry by web:ada: fired -> pending")

	// A cancel form opened, then another operator retries "gone": the
	// click shows the new situation and does nothing.
	br.do(chromedp.Navigate(s.url("effects/"+s.ids["gone"].String()+"/actions/cancel")), chromedp.WaitVisible(chromedp.CSS("#dryrun")))
	require.Contains(t, br.text("#dryrun"), "would move failed -> cancelled")
	op, err := sideeffects.NewOperator(s.db.Pool, sideeffects.OperatorConfig{Schema: s.db.Schema})
	require.NoError(t, err)
	_, err = op.Acknowledge(ctx, []uuid.UUID{s.ids["gone"]}, outboxtype.ActionOpts{Actor: "bob", Reason: "endpoint retired, reviewed"})
	require.NoError(t, err)
	br.do(chromedp.SendKeys(chromedp.CSS(`textarea[name="reason"]`), "not needed"),
		chromedp.Click(chromedp.CSS(`form.action button[type="submit"]`)), chromedp.WaitVisible(chromedp.CSS("#review")))
	require.Contains(t, br.text("#review"), "this effect changed since the page was opened")
	require.Equal(t, outboxtype.StateFailed, s.effectState(t, "gone"), "the stale click did nothing")
	br.do(chromedp.Click(chromedp.CSS(`form.action button[type="submit"]`)), chromedp.WaitVisible(chromedp.CSS("#flash")))
	require.Contains(t, br.text("#flash"), "cancel by web:ada: failed -> cancelled")
}

// TestEveryPageFitsAPhoneAndFollowsDarkMode: at 390 px wide no page is
// wider than the screen; with the system in dark mode the view is dark; an
// error is a page of the view with the way back; and the overview lists
// the effects just enqueued even when nothing is stuck.
func TestEveryPageFitsAPhoneAndFollowsDarkMode(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	br := b{t, browser(t)}
	br.authenticate("ada", adminToken)
	br.do(chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile, chromedp.EmulatePortrait))
	pages := map[string]string{
		"overview": "", "search": "effects?q=" + s.ids["gone"].String(), "effect": "effects/" + s.ids["gone"].String(),
		"action": "effects/" + s.ids["gone"].String() + "/actions/retry", "error": "effects/not-an-id",
		"replays": "replays", "limits": "limits", "drift": "drift?all=1", "keys": "keys?state=", "dispatchers": "dispatchers",
		"reconcile": "effects/" + s.ids["gone"].String() + "/reconcile", "edit": "effects/" + s.ids["gone"].String() + "/edit",
	}
	for name, path := range pages {
		br.do(chromedp.Navigate(s.url(path)), chromedp.WaitVisible(chromedp.CSS("main")))
		w, err := chromedp.Run(br.ctx, chromedp.Evaluate[int]("document.documentElement.scrollWidth"))
		require.NoError(t, err)
		require.LessOrEqual(t, w, 390, "%s is %d px wide on a 390 px screen", name, w)
		br.shot("phone-" + name)
	}
	// The error page: the status, the problem, the way back.
	br.do(chromedp.Navigate(s.url("effects/not-an-id")), chromedp.WaitVisible(chromedp.CSS("#problem")))
	require.Contains(t, br.text("h1"), "400 Bad Request")
	require.Equal(t, 1, br.count(`#back a[href="/ui/"]`))

	// The overview shows what was just enqueued.
	br.do(chromedp.Navigate(s.url("")), chromedp.WaitVisible(chromedp.CSS("#recent")))
	require.Contains(t, br.text("#recent"), s.ids["ok"].String())

	background := func() string {
		v, err := chromedp.Run(br.ctx, chromedp.Evaluate[string]("getComputedStyle(document.body).backgroundColor"))
		require.NoError(t, err)
		return v
	}
	light := background()
	br.do(chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}}})
		return err
	}))
	br.do(chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#recent")))
	require.Equal(t, "rgb(20, 23, 27)", background(), "dark background")
	require.NotEqual(t, light, background())
	br.shot("phone-overview-dark")
}

// TestTheOverviewNamesTheIncidentNow: 60 failures 19 days old and 30
// webhooks to one partner that stopped answering ten minutes ago: the
// overview puts the partner's incident on top, with its count, host and
// cause, and one click lists its effects.
func TestTheOverviewNamesTheIncidentNow(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	ctx := context.Background()
	sc := s.db.Schema
	// The site's own failures are from yesterday.
	_, err := s.db.Pool.Exec(ctx, `UPDATE `+sc+`.side_effects SET updated_at = now() - interval '1 day'`)
	require.NoError(t, err)
	_, err = s.db.Pool.Exec(ctx, `
WITH ev AS (INSERT INTO `+sc+`.outbox_events (id, event_type, payload) SELECT gen_random_uuid(), 'order.paid', '{}' FROM generate_series(1, 90) RETURNING id),
n AS (SELECT id, row_number() OVER () AS i FROM ev)
INSERT INTO `+sc+`.side_effects (id, source_id, kind, provider, payload, state, attempts, total_attempts, last_error, in_doubt, fired_at, first_fired_at, created_at, updated_at)
SELECT gen_random_uuid(), id,
	CASE WHEN i <= 60 THEN 'email.receipt' ELSE 'webhook.partner_acme' END,
	CASE WHEN i <= 60 THEN 'sendgrid' ELSE 'webhook' END,
	CASE WHEN i <= 60 THEN '{"from": {"email": "s@example.com"}, "to": [{"email": "a@example.com"}], "subject": "s", "text": "t"}'::jsonb
		ELSE '{"url": "https://hooks.acme.example/orders", "body": {}}'::jsonb END,
	CASE WHEN i <= 60 THEN 'failed' ELSE 'fired' END, 1, 1,
	CASE WHEN i <= 60 THEN 'HTTP 400 (invalid recipient): the address was refused' ELSE 'no response: context deadline exceeded (webhook timeout 30s)' END,
	i > 60, now() - interval '10 minutes', now() - interval '10 minutes',
	CASE WHEN i <= 60 THEN now() - interval '19 days' ELSE now() - interval '10 minutes' - i * interval '1 second' END,
	CASE WHEN i <= 60 THEN now() - interval '19 days' ELSE now() - interval '10 minutes' - i * interval '1 second' END
FROM n`)
	require.NoError(t, err)
	br := b{t, browser(t)}
	br.do(chromedp.Navigate(s.url("")), chromedp.WaitVisible(chromedp.CSS("#incidents")))
	first := br.text("#incidents tr:nth-child(2)")
	require.Contains(t, first, "30")
	require.Contains(t, first, "webhook.partner_acme")
	require.Contains(t, first, "hooks.acme.example")
	require.Contains(t, first, "no response")
	require.NotContains(t, br.text("#incidents"), "HTTP 400", "failures older than a day are not an incident now")
	require.Contains(t, br.text("#reasons"), "HTTP 400", "they are in the failure reasons")
	br.shot("overview-incidents")
	br.do(chromedp.Click(chromedp.CSS("#incidents tr:nth-child(2) td.num a")), chromedp.WaitVisible(chromedp.CSS("#results")))
	require.Equal(t, 30, strings.Count(br.text("#results"), "webhook.partner_acme"), "one click lists them")
	// With what to do, in the words of the newest one's own page.
	whatNow := br.text("#whatnow")
	newest, err := chromedp.Run(br.ctx, chromedp.Evaluate[string](`document.querySelector("#whatnow a").getAttribute("href")`))
	require.NoError(t, err)
	br.do(chromedp.Click(chromedp.CSS("#whatnow a")), chromedp.WaitVisible(chromedp.CSS("#diagnosis")))
	diagnosis := strings.TrimPrefix(br.text("#diagnosis"), "What now: ")
	require.NotEmpty(t, diagnosis)
	require.Contains(t, whatNow, diagnosis)
	loc, err := chromedp.Run(br.ctx, chromedp.Location())
	require.NoError(t, err)
	require.True(t, strings.HasSuffix(loc, newest), "%s: the newest one's page", loc)
}

// TestAnIncidentShowsInItsFirstSeconds: twenty seconds after a partner
// stopped answering, its webhooks are retrying, each attempt changing
// them: they are the incident on top already, and effects merely in
// flight are not an incident.
func TestAnIncidentShowsInItsFirstSeconds(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	ctx := context.Background()
	sc := s.db.Schema
	_, err := s.db.Pool.Exec(ctx, `UPDATE `+sc+`.side_effects SET updated_at = now() - interval '1 day'`)
	require.NoError(t, err)
	_, err = s.db.Pool.Exec(ctx, `
WITH ev AS (INSERT INTO `+sc+`.outbox_events (id, event_type, payload) SELECT gen_random_uuid(), 'order.paid', '{}' FROM generate_series(1, 25) RETURNING id),
n AS (SELECT id, row_number() OVER () AS i FROM ev)
INSERT INTO `+sc+`.side_effects (id, source_id, kind, provider, payload, state, attempts, total_attempts, last_error, in_doubt, fired_at, first_fired_at, created_at, updated_at)
SELECT gen_random_uuid(), id, CASE WHEN i <= 20 THEN 'webhook.partner_bolt' ELSE 'webhook.healthy' END, 'webhook',
	CASE WHEN i <= 20 THEN '{"url": "https://hooks.bolt.example/orders", "body": {}}'::jsonb ELSE '{"url": "https://hooks.ok.example/orders", "body": {}}'::jsonb END,
	'fired', 1, 1,
	CASE WHEN i <= 20 THEN 'in_doubt: no response: context deadline exceeded' END,
	i <= 20, now() - interval '5 seconds', now() - interval '20 seconds', now() - interval '20 seconds', now() - i * interval '100 milliseconds'
FROM n`)
	require.NoError(t, err)
	br := b{t, browser(t)}
	br.do(chromedp.Navigate(s.url("")), chromedp.WaitVisible(chromedp.CSS("#incidents")))
	first := br.text("#incidents tr:nth-child(2)")
	require.Contains(t, first, "20")
	require.Contains(t, first, "webhook.partner_bolt")
	require.Contains(t, first, "hooks.bolt.example")
	require.Contains(t, first, "no response")
	require.NotContains(t, br.text("#incidents"), "webhook.healthy", "in flight without an error: not an incident")
	require.Zero(t, br.count("#heldback"), "no gate holds anything back")

	// A running outboxd's gate has opened its breaker for the partner:
	// the overview says so above everything else.
	_, err = s.db.Pool.Exec(ctx, `INSERT INTO `+sc+`.outboxd_dispatchers (id, host, pid, settings, destinations)
		VALUES ('vm-7-1', 'vm', 7, '{}', jsonb_build_array(jsonb_build_object('host', 'hooks.bolt.example', 'address', '203.0.113.9:443',
			'failures_in_a_row', 9, 'breaker_open', true, 'open_until', now() + interval '30 seconds')))`)
	require.NoError(t, err)
	br.do(chromedp.Navigate(s.url("")), chromedp.WaitVisible(chromedp.CSS("#heldback")))
	held := br.text("#heldback")
	require.Contains(t, held, "hooks.bolt.example, 203.0.113.9:443")
	require.Contains(t, held, "not answering: its circuit breaker is open until")
	require.Contains(t, held, "vm-7-1")
	y, err := chromedp.Run(br.ctx, chromedp.Evaluate[[]float64](`[document.querySelector("#heldback").getBoundingClientRect().top, document.querySelector("#incidents").getBoundingClientRect().top]`))
	require.NoError(t, err)
	require.Less(t, y[0], y[1], "above the incidents")
}

// TestNamedOperatorsAreAudited: with a token per operator, an action is
// audited under the token's owner whatever user name was typed; tokens
// are checked at start; reading needs one of them when asked to.
func TestNamedOperatorsAreAudited(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	op, err := sideeffects.NewOperator(s.db.Pool, sideeffects.OperatorConfig{Schema: s.db.Schema})
	require.NoError(t, err)
	adaTok, bobTok := "ada-0123456789abcdef", "bob-0123456789abcdef"
	for _, bad := range []map[string]string{{"ada": "short"}, {"ada": adaTok, "bob": adaTok}, {"a da": adaTok}} {
		_, err := webui.New(webui.Config{Operator: op, Operators: bad})
		require.Error(t, err, "%v", bad)
	}
	h, err := webui.New(webui.Config{Schema: s.db.Schema, Operator: op, Operators: map[string]string{"ada": adaTok, "bob": bobTok},
		ReadNeedsCredential: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	get := func(user, pass string) int {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/ui/", nil)
		if pass != "" {
			req.SetBasicAuth(user, pass)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusUnauthorized, get("", ""), "reading needs a credential")
	require.Equal(t, http.StatusOK, get("anyone", bobTok))

	// Bob types "ada" in front of his own token: the audit says bob.
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/ui/effects/"+s.ids["gone"].String()+"/actions/acknowledge",
		strings.NewReader(url.Values{"reason": {"endpoint retired"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "Bearer "+bobTok)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	audit, err := s.op.Audit(context.Background(), s.ids["gone"])
	require.NoError(t, err)
	require.Len(t, audit, 1)
	require.Equal(t, "web:bob", audit[0].Actor)

	br := b{t, browser(t)}
	br.authenticate("ada", bobTok)
	br.do(chromedp.Navigate(srv.URL+"/ui/effects/"+s.ids["busy"].String()+"/actions/cancel"), chromedp.WaitVisible(chromedp.CSS("#dryrun")))
	br.do(chromedp.SendKeys(chromedp.CSS(`textarea[name="reason"]`), "not needed"),
		chromedp.Click(chromedp.CSS(`form.action button[type="submit"]`)), chromedp.WaitVisible(chromedp.CSS("#flash")))
	require.Contains(t, br.text("#flash"), "cancel by web:bob", "the token's owner, not the name typed")
}

// TestBulkActionsFromTheSearch: tick effects in the results, preview the
// action (a dry run of each), give a reason and do it; each gets its own
// audit row. A preview that went stale does nothing.
func TestBulkActionsFromTheSearch(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	br := b{t, browser(t)}
	br.authenticate("ada", adminToken)
	br.do(chromedp.Navigate(s.url("effects?state=failed")), chromedp.WaitVisible(chromedp.CSS("#results")))
	require.Equal(t, 2, br.count(`#results input[name="id"]`), "gone and busy")
	br.do(chromedp.Click(chromedp.CSS("#tickall")), chromedp.SetValue(chromedp.CSS(`select[name="action"]`), "acknowledge"),
		chromedp.Click(chromedp.CSS(`#bulkform button[type="submit"]`)), chromedp.WaitVisible(chromedp.CSS("#bulk")))
	require.Equal(t, 2, strings.Count(br.text("#bulk"), "would change"))
	br.shot("bulk-preview")

	// Meanwhile another operator cancels one: the click shows the new dry
	// run and does nothing.
	op, err := sideeffects.NewOperator(s.db.Pool, sideeffects.OperatorConfig{Schema: s.db.Schema})
	require.NoError(t, err)
	_, err = op.Cancel(context.Background(), []uuid.UUID{s.ids["busy"]}, outboxtype.ActionOpts{Actor: "bob", Reason: "not needed"})
	require.NoError(t, err)
	br.do(chromedp.SendKeys(chromedp.CSS(`textarea[name="reason"]`), "both reviewed"),
		chromedp.Click(chromedp.CSS(`form.action button[type="submit"]`)), chromedp.WaitVisible(chromedp.CSS("#review")))
	require.Nil(t, s.effect(t, "gone").AcknowledgedAt, "the stale click did nothing")
	require.Contains(t, br.text("#bulk"), "skipped", "busy is cancelled now: acknowledge skips it")
	br.do(chromedp.Click(chromedp.CSS(`form.action button[type="submit"]`)), chromedp.WaitVisible(chromedp.CSS("#flash")))
	require.Contains(t, br.text("#flash"), "acknowledge by web:ada: 1 of 2 effects changed")
	require.NotNil(t, s.effect(t, "gone").AcknowledgedAt)
	audit, err := s.op.Audit(context.Background(), s.ids["gone"])
	require.NoError(t, err)
	require.Equal(t, "web:ada", audit[len(audit)-1].Actor)
	require.Equal(t, "both reviewed", audit[len(audit)-1].Reason)
}

// TestConfirmWebhooksInBulk: the receiver's log shows a hanging partner
// processed its webhooks after all: ticked in a search, they are confirmed
// in one action, each recorded with the webhook-id the receiver saw, as
// outboxctl confirm does; an email among them is skipped (it needs its
// provider's reference, on its own page).
func TestConfirmWebhooksInBulk(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	mail := uuid.New()
	_, err := s.db.Pool.Exec(context.Background(), `INSERT INTO `+s.db.Schema+`.side_effects (id, source_id, kind, provider, payload, state, attempts, last_error)
		SELECT $2, source_id, 'email.receipt', 'sendgrid', '{}', 'failed', 1, 'in doubt: not re-sent' FROM `+s.db.Schema+`.side_effects WHERE id = $1`,
		s.ids["gone"], mail)
	require.NoError(t, err)
	br := b{t, browser(t)}
	br.authenticate("ada", adminToken)

	// One webhook on its own page: no reference to give.
	br.do(chromedp.Navigate(s.url("effects/"+s.ids["busy"].String())), chromedp.WaitVisible(chromedp.CSS("#columns")))
	br.do(chromedp.Click(chromedp.CSS(`a.action[href$="/actions/confirm"]`)), chromedp.WaitVisible(chromedp.CSS("#dryrun")))
	br.do(chromedp.SendKeys(chromedp.CSS(`textarea[name="reason"]`), "in the partner's log"),
		chromedp.Click(chromedp.CSS(`form.action button[type="submit"]`)), chromedp.WaitVisible(chromedp.CSS("#flash")))
	require.Contains(t, br.text("#flash"), "confirm by web:ada: failed -> confirmed")
	busy := s.effect(t, "busy")
	require.Equal(t, "webhook-id "+busy.IdempotencyKey, *busy.ProviderRef)

	// Ticked in a search: the webhooks confirmed, the email skipped.
	br.do(chromedp.Navigate(s.url("effects?state=failed")), chromedp.WaitVisible(chromedp.CSS("#results")))
	require.Equal(t, 2, br.count(`#results input[name="id"]`), "gone and the email")
	br.do(chromedp.Click(chromedp.CSS("#tickall")), chromedp.SetValue(chromedp.CSS(`select[name="action"]`), "confirm"),
		chromedp.Click(chromedp.CSS(`#bulkform button[type="submit"]`)), chromedp.WaitVisible(chromedp.CSS("#bulk")))
	preview := br.text("#bulk")
	require.Equal(t, 1, strings.Count(preview, "would change"), preview)
	require.Contains(t, preview, "skipped: a sendgrid effect is confirmed with its provider's reference")
	br.do(chromedp.SendKeys(chromedp.CSS(`textarea[name="reason"]`), "in the partner's log"),
		chromedp.Click(chromedp.CSS(`form.action button[type="submit"]`)), chromedp.WaitVisible(chromedp.CSS("#flash")))
	require.Contains(t, br.text("#flash"), "confirm by web:ada: 1 of 2 effects changed")
	gone := s.effect(t, "gone")
	require.Equal(t, outboxtype.StateConfirmed, gone.State)
	require.Equal(t, "webhook-id "+gone.IdempotencyKey, *gone.ProviderRef)
	e, err := s.op.Get(context.Background(), mail)
	require.NoError(t, err)
	require.Equal(t, outboxtype.StateFailed, e.State, "the email waits for its reference")
}

func (s *site) effect(t *testing.T, name string) *outboxtype.Effect {
	t.Helper()
	e, err := s.op.Get(context.Background(), s.ids[name])
	require.NoError(t, err)
	return e
}

// TestATrustedProxyNamesThePerson: behind an authenticating proxy, the
// person it names in the trusted header reads and acts under that name;
// the same header from any other address counts for nothing.
func TestATrustedProxyNamesThePerson(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	op, err := sideeffects.NewOperator(s.db.Pool, sideeffects.OperatorConfig{Schema: s.db.Schema})
	require.NoError(t, err)
	_, err = webui.New(webui.Config{Operator: op, TrustedUserHeader: "X-Forwarded-User"})
	require.ErrorContains(t, err, "go together")
	serve := func(proxies string) *httptest.Server {
		h, err := webui.New(webui.Config{Schema: s.db.Schema, Operator: op, ReadNeedsCredential: true,
			TrustedUserHeader: "X-Forwarded-User", TrustedProxies: []netip.Prefix{netip.MustParsePrefix(proxies)},
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		require.NoError(t, err)
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		return srv
	}
	do := func(srv *httptest.Server, method, path, user string, form url.Values) int {
		tok := strings.Repeat("d", 64)
		if form != nil {
			form.Set("csrf", tok)
		}
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if user != "" {
			req.Header.Set("X-Forwarded-User", user)
		}
		req.AddCookie(&http.Cookie{Name: "outboxd_csrf", Value: tok})
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	behind := serve("127.0.0.0/8")
	require.Equal(t, http.StatusUnauthorized, do(behind, http.MethodGet, "/ui/", "", nil), "no one named: no read")
	require.Equal(t, http.StatusOK, do(behind, http.MethodGet, "/ui/", "carol@example.com", nil))
	require.Equal(t, http.StatusOK, do(behind, http.MethodPost, "/ui/effects/"+s.ids["gone"].String()+"/actions/acknowledge",
		"carol@example.com", url.Values{"reason": {"endpoint retired"}}))
	audit, err := s.op.Audit(context.Background(), s.ids["gone"])
	require.NoError(t, err)
	require.Equal(t, "web:carol@example.com", audit[len(audit)-1].Actor)

	// A proxy that appends its header to the client's: two values name no
	// one, whichever comes first.
	for _, order := range [][2]string{{"mallory", "carol@example.com"}, {"carol@example.com", "mallory"}} {
		req, _ := http.NewRequest(http.MethodGet, behind.URL+"/ui/", nil)
		req.Header.Add("X-Forwarded-User", order[0])
		req.Header.Add("X-Forwarded-User", order[1])
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "a repeated identity header is refused")
	}

	elsewhere := serve("10.0.0.0/8")
	require.Equal(t, http.StatusUnauthorized, do(elsewhere, http.MethodGet, "/ui/", "carol@example.com", nil), "the header from an untrusted address")
	require.Equal(t, http.StatusUnauthorized, do(elsewhere, http.MethodPost, "/ui/effects/"+s.ids["busy"].String()+"/actions/cancel",
		"mallory", url.Values{"reason": {"x"}}))
}

// TestAnEffectWaitingForItsLimitSaysSo: the effect page of an effect whose
// limit key is paused says what it waits for, since when, that waiting is
// not an attempt, and when it asks again.
func TestAnEffectWaitingForItsLimitSaysSo(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	ctx := context.Background()
	id := uuid.New()
	_, err := s.db.Pool.Exec(ctx, `INSERT INTO `+s.db.Schema+`.side_effects (id, source_id, kind, provider, payload, waiting_for, waiting_since, next_attempt_at)
		SELECT $2, source_id, 'webhook.throttled', provider, payload, 'webhook:hooks.example.com', now() - interval '2 minutes', now() + interval '30 seconds'
		FROM `+s.db.Schema+`.side_effects WHERE id = $1`, s.ids["ok"], id)
	require.NoError(t, err)
	resp, err := http.Get(s.url("effects/" + id.String()))
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(body), "<dt>waiting for</dt><dd class=\"mono\">limit webhook:hooks.example.com since ")
	require.Contains(t, string(body), "waiting for limit webhook:hooks.example.com since 2m")
	require.Contains(t, string(body), "waiting is not an attempt")
}
