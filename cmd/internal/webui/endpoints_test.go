package webui_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/cmd/internal/webui"
	"github.com/outboxd/outboxd/internal/testdb"
	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/endpoint"
	"github.com/outboxd/outboxd/providers/webhook"
	"github.com/outboxd/outboxd/sideeffects"
	"github.com/outboxd/outboxd/sideeffects/sideeffectstest"
)

// verifier is an endpoint's receiver: it answers 2xx to a request its
// secret verifies, 401 otherwise.
type verifier struct {
	*httptest.Server
	mu       sync.Mutex
	secret   string
	verified int
	refused  int
}

func newVerifier(t *testing.T) *verifier {
	v := &verifier{}
	v.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		v.mu.Lock()
		defer v.mu.Unlock()
		if wh, err := standardwebhooks.NewWebhook(v.secret); err == nil && wh.Verify(body, r.Header) == nil && r.Header.Get("Authorization") == "Bearer partner-token" {
			v.verified++
			w.WriteHeader(http.StatusNoContent)
			return
		}
		v.refused++
		w.WriteHeader(http.StatusUnauthorized)
	}))
	t.Cleanup(v.Close)
	return v
}

// TestEndpointsInTheBrowser: an admin registers an endpoint (its secret
// shown once), sends it a test event its receiver verifies, rotates its
// secret, disables it (a dry run first) while a delivery waits, and
// enables it delivering what it held.
func TestEndpointsInTheBrowser(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	key, err := endpoint.ParseKey(endpoint.NewKey())
	require.NoError(t, err)
	loop := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	reg, err := endpoint.NewRegistry(endpoint.RegistryConfig{Schema: db.Schema, Key: key, AllowedNetworks: loop})
	require.NoError(t, err)
	ep, err := endpoint.New(endpoint.Config{DB: db.Pool, Schema: db.Schema, Key: key, Webhook: webhook.Config{AllowedNetworks: loop, Timeout: 2 * time.Second}})
	require.NoError(t, err)
	sideeffectstest.Start(t, db.Pool, sideeffects.Config{Schema: db.Schema, Providers: []providers.Provider{ep}, Retry: outboxtype.RetryPolicy{MaxAttempts: 3}})
	op, err := sideeffects.NewOperator(db.Pool, sideeffects.OperatorConfig{Schema: db.Schema})
	require.NoError(t, err)
	h, err := webui.New(webui.Config{Schema: db.Schema, Operator: op, AdminToken: adminToken, Endpoints: reg, EndpointsDB: db.Pool,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	page := func(p string) string { return srv.URL + "/ui/" + p }
	rcv := newVerifier(t)

	br := b{t, browser(t)}
	br.authenticate("ada", adminToken)
	br.do(chromedp.Navigate(page("endpoints")), chromedp.WaitVisible(chromedp.CSS("#no-endpoints")))
	br.do(chromedp.SetValue(chromedp.CSS(`input[name="url"]`), "http://10.9.9.9/in"), chromedp.SetValue(chromedp.CSS(`input[name="types"]`), "order.*"),
		chromedp.Click(chromedp.CSS("#create-endpoint")), chromedp.WaitVisible(chromedp.CSS("#error")))
	require.Contains(t, br.text("#error"), "url", "a private address is refused")

	br.do(chromedp.SetValue(chromedp.CSS(`input[name="url"]`), rcv.URL+"/in"), chromedp.SetValue(chromedp.CSS(`input[name="types"]`), "order.*, invoice.paid"),
		chromedp.SetValue(chromedp.CSS(`textarea[name="headers"]`), "Authorization: Bearer partner-token"),
		chromedp.Click(chromedp.CSS("#create-endpoint")), chromedp.WaitVisible(chromedp.CSS("#created")))
	secret := strings.TrimSpace(br.text("#secret"))
	require.True(t, strings.HasPrefix(secret, "whsec_"), secret)
	rcv.mu.Lock()
	rcv.secret = secret
	rcv.mu.Unlock()
	eps, err := reg.List(ctx, db.Pool, endpoint.ListFilter{})
	require.NoError(t, err)
	require.Len(t, eps, 1)
	id := eps[0].ID.String()

	br.do(chromedp.Navigate(page("endpoints")), chromedp.WaitVisible(chromedp.CSS("#endpoints")))
	require.Zero(t, br.count("#secret"), "the secret is shown once")
	require.Contains(t, br.text("#endpoints"), "order.*, invoice.paid")

	br.do(chromedp.Navigate(page("endpoints/"+id)), chromedp.WaitVisible(chromedp.CSS("#endpoint")))
	require.Contains(t, br.text("#endpoint"), "Authorization: (set)")
	require.NotContains(t, br.text("#endpoint"), "partner-token", "a header's value is never shown")
	br.do(chromedp.Click(chromedp.CSS("#test-endpoint")), chromedp.WaitVisible(chromedp.CSS("#test-effect")))
	testEffect := uuid.MustParse(strings.TrimSpace(br.text("#test-effect")))
	waitState(t, &site{db: db, op: op}, testEffect, outboxtype.StateConfirmed)
	rcv.mu.Lock()
	require.Equal(t, 1, rcv.verified, "the receiver verified the test event with the secret it was shown")
	rcv.mu.Unlock()

	br.do(chromedp.Click(chromedp.CSS("#rotate-endpoint")), chromedp.WaitVisible(chromedp.CSS("#secret")))
	rotated := strings.TrimSpace(br.text("#secret"))
	require.NotEqual(t, secret, rotated)
	require.Contains(t, br.text("#endpoint-secrets"), "rotated, signs until")

	// After a leak: rotate again, retiring every earlier secret at once.
	br.do(chromedp.Navigate(page("endpoints/"+id)), chromedp.WaitVisible(chromedp.CSS("#rotate-endpoint")))
	require.Zero(t, br.count("#secret"))
	br.do(chromedp.Click(chromedp.CSS("#retire-old")), chromedp.Click(chromedp.CSS("#rotate-endpoint")), chromedp.WaitVisible(chromedp.CSS("#secret")))
	retired := strings.TrimSpace(br.text("#secret"))
	require.NotEqual(t, rotated, retired)
	require.Contains(t, br.text("#flash"), "every earlier secret stopped signing now")
	require.NotContains(t, br.text("#endpoint-secrets"), "rotated, signs until", "only the new secret signs")
	rotated = retired

	reason := chromedp.SetValue(chromedp.CSS(`form[action$="/disable"] textarea[name="reason"]`), "partner's receiver is down")
	br.do(reason, chromedp.Click(chromedp.CSS(`form[action$="/disable"] input[name="dry_run"]`)), chromedp.Click(chromedp.CSS("#disable-endpoint")),
		chromedp.WaitVisible(chromedp.CSS("#plan")))
	require.Contains(t, br.text("#plan"), "Dry run")
	require.Equal(t, "enabled", br.text("#endpoint-state"), "a dry run changes nothing")
	br.do(reason, chromedp.Click(chromedp.CSS("#disable-endpoint")), chromedp.WaitVisible(chromedp.CSS("#flash")))
	require.Contains(t, br.text("#endpoint-state"), "disabled since")

	// A delivery to the disabled endpoint waits, spending no attempt.
	held, err := reg.SendTest(ctx, db.Pool, eps[0].ID, endpoint.Change{Actor: "test"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		e, err := op.Get(ctx, held)
		if err != nil || e.WaitingFor == nil || *e.WaitingFor != endpoint.LimitKey(eps[0].ID) {
			return false
		}
		// and its job was let go, to wait for the endpoint
		var n int
		err = db.Pool.QueryRow(ctx, "SELECT count(*) FROM "+db.Schema+".river_job WHERE args->>'effect_id' = $1::text AND state IN ('scheduled', 'retryable') AND scheduled_at > now()", held).Scan(&n)
		return err == nil && n == 1
	}, 20*time.Second, 10*time.Millisecond)

	// The overview says so: a disabled endpoint, and the key of its held
	// delivery.
	br.do(chromedp.Navigate(page("")), chromedp.WaitVisible(chromedp.CSS("#needs-you")))
	needs := br.text("#needs-you")
	require.Contains(t, needs, "1 endpoint(s) disabled: their deliveries wait until enabled")
	require.Contains(t, needs, "1 limit key(s) holding back 1 effect(s)")
	require.Less(t, strings.Index(needs, "endpoint(s) disabled"), strings.Index(needs, "limit key(s)"), "the endpoint first: it is the cause")

	rcv.mu.Lock()
	rcv.secret = rotated // the receiver moved to the new secret
	rcv.mu.Unlock()
	br.do(chromedp.Navigate(page("endpoints/"+id)), chromedp.WaitVisible(chromedp.CSS("#enable-endpoint")))
	require.Contains(t, br.text("#endpoint-open"), "1 pending")
	br.do(chromedp.SetValue(chromedp.CSS(`form[action$="/enable"] textarea[name="reason"]`), "receiver back"),
		chromedp.Click(chromedp.CSS("#enable-endpoint")), chromedp.WaitVisible(chromedp.CSS("#flash")))
	require.Contains(t, br.text("#flash"), "what it held goes out now")
	waitState(t, &site{db: db, op: op}, held, outboxtype.StateConfirmed)
	e, err := op.Get(ctx, held)
	require.NoError(t, err)
	require.Equal(t, 1, e.Attempts, "held, not retried")
	br.do(chromedp.Navigate(page("")), chromedp.WaitVisible(chromedp.CSS("#needs-you")))
	require.NotContains(t, br.text("#needs-you"), "endpoint(s) disabled", "enabled again")

	// An endpoint whose every delivery fails is on the overview before it
	// is disabled.
	_, err = db.Pool.Exec(ctx, "UPDATE "+db.Schema+".outboxd_endpoints SET failing_since = now() - interval '2 hours' WHERE id = $1", eps[0].ID)
	require.NoError(t, err)
	br.do(chromedp.Navigate(page("")), chromedp.WaitVisible(chromedp.CSS("#needs-you")))
	require.Contains(t, br.text("#needs-you"), "1 endpoint(s) failing every delivery, the first since 2h0m")
	br.do(chromedp.Navigate(page("endpoints")), chromedp.WaitVisible(chromedp.CSS("#endpoints")))
	require.Contains(t, br.text("#endpoints"), "enabled, failing every delivery since")

	hist, err := reg.History(ctx, db.Pool, eps[0].ID)
	require.NoError(t, err)
	var actions []string
	for _, h := range hist {
		if h.Actor == "web:ada" || h.Actor == "ada" {
			actions = append(actions, h.Action)
		}
	}
	require.Equal(t, []string{"create", "test", "rotate", "rotate", "disable", "enable"}, actions)
}
