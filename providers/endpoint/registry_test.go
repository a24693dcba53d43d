package endpoint_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/endpoint"
	"github.com/outboxd/outboxd/sideeffects"
	"github.com/outboxd/outboxd/sideeffects/oncall"
)

// request is the delivery of the event to endpoint id, as the dispatcher
// asks for it.
func request(id uuid.UUID) providers.Request {
	ev := uuid.MustParse("0190c3a0-7b1e-7c3d-9f00-000000000001")
	return providers.Request{EffectID: "e1", Kind: "endpoint:" + id.String(), Key: keyOf(ev, id), Attempt: 1,
		Payload: json.RawMessage(`{"endpoint_id":"` + id.String() + `"}`), EventID: ev.String(),
		Event: &providers.SourceEvent{ID: ev.String(), Type: "order.paid", Payload: json.RawMessage(`{"order":"ord_1"}`), OccurredAt: time.Now()}}
}

func verifies(t *testing.T, secret string, r *receiver, i int) bool {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	require.NoError(t, err)
	r.mu.Lock()
	defer r.mu.Unlock()
	return wh.Verify(r.bodies[i], r.got[i]) == nil
}

func TestARotatedSecretSignsBesideTheNewUntilItExpires(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	p := f.provider(t)
	r := newReceiver(t)
	ep, old := f.create(t, endpoint.Endpoint{URL: r.URL, EventTypes: []string{"*"}})
	r.setSecret(old)

	fresh, err := f.reg.Rotate(ctx, f.db.Pool, ep.ID, time.Hour, admin)
	require.NoError(t, err)
	require.NotEqual(t, old, fresh)
	require.True(t, strings.HasPrefix(fresh, "whsec_"))
	_, err = p.Send(ctx, request(ep.ID))
	require.NoError(t, err, "a receiver still on the old secret accepts during the overlap")
	require.Len(t, strings.Fields(r.got[0].Get("webhook-signature")), 2, "one signature by each secret")
	require.True(t, verifies(t, fresh, r, 0), "the new secret verifies too")

	got, err := f.reg.Get(ctx, f.db.Pool, ep.ID)
	require.NoError(t, err)
	require.Len(t, got.Secrets, 2)
	require.Nil(t, got.Secrets[0].ExpiresAt, "the current secret first")
	require.WithinDuration(t, time.Now().Add(time.Hour), *got.Secrets[1].ExpiresAt, time.Minute)

	// The overlap ends (moved into the past rather than waited for).
	_, err = f.db.Pool.Exec(ctx, "UPDATE "+f.db.Schema+".outboxd_endpoint_secrets SET expires_at = now() - interval '1 second' WHERE expires_at IS NOT NULL")
	require.NoError(t, err)
	_, err = p.Send(ctx, request(ep.ID))
	require.Error(t, err, "after expiry the old secret no longer signs: its receiver refuses")
	require.Len(t, strings.Fields(r.got[1].Get("webhook-signature")), 1)
	require.False(t, verifies(t, old, r, 1))
	r.setSecret(fresh)
	_, err = p.Send(ctx, request(ep.ID))
	require.NoError(t, err)

	hist, err := f.reg.History(ctx, f.db.Pool, ep.ID)
	require.NoError(t, err)
	require.Equal(t, []string{"create", "rotate"}, []string{hist[0].Action, hist[1].Action})
	require.Equal(t, admin.Actor, hist[1].Actor)
}

func TestSecretsAreSealedForTheirEndpoint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	r := newReceiver(t)
	a, secretA := f.create(t, endpoint.Endpoint{URL: r.URL, EventTypes: []string{"*"}})
	b, _ := f.create(t, endpoint.Endpoint{URL: r.URL, EventTypes: []string{"*"}})
	r.setSecret(secretA)

	var sealed []byte
	require.NoError(t, f.db.Pool.QueryRow(ctx, "SELECT sealed FROM "+f.db.Schema+".outboxd_endpoint_secrets WHERE endpoint_id = $1", a.ID).Scan(&sealed))
	raw := strings.TrimPrefix(secretA, "whsec_")
	require.False(t, bytes.Contains(sealed, []byte(raw)), "the database holds no secret a reader could sign with")

	// A secret copied to another endpoint's row does not open there:
	// nothing is sent, and the error says what to do.
	_, err := f.db.Pool.Exec(ctx, "UPDATE "+f.db.Schema+".outboxd_endpoint_secrets SET sealed = $1 WHERE endpoint_id = $2", sealed, b.ID)
	require.NoError(t, err)
	_, err = f.provider(t).Send(ctx, request(b.ID))
	require.True(t, providers.IsRefused(err), "%v", err)
	require.ErrorContains(t, err, "rotate the endpoint's secret")
	require.Zero(t, r.requests())

	// Under another key, the secret is named as sealed by another key.
	other, err := endpoint.ParseKey(endpoint.NewKey())
	require.NoError(t, err)
	p2, err := endpoint.New(endpoint.Config{DB: f.db.Pool, Schema: f.db.Schema, Key: other, Webhook: f.webhookConfig()})
	require.NoError(t, err)
	_, err = p2.Send(ctx, request(a.ID))
	require.ErrorContains(t, err, "sealed under another endpoint key")
	require.Zero(t, r.requests())
}

func TestARegistryChecksWhatItIsGiven(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	public, err := endpoint.NewRegistry(endpoint.RegistryConfig{Schema: f.db.Schema, Key: f.key})
	require.NoError(t, err)
	for name, c := range map[string]struct {
		reg   *endpoint.Registry
		ep    endpoint.Endpoint
		field string
	}{
		"private address":    {public, endpoint.Endpoint{URL: "http://10.0.0.7/hook", EventTypes: []string{"*"}}, "url"},
		"loopback name":      {public, endpoint.Endpoint{URL: "http://localhost:8080/hook", EventTypes: []string{"*"}}, "url"},
		"credentials in url": {f.reg, endpoint.Endpoint{URL: "https://u:p@example.com/hook", EventTypes: []string{"*"}}, "url"},
		"no types":           {f.reg, endpoint.Endpoint{URL: "https://example.com/hook"}, "event_types"},
		"star in the middle": {f.reg, endpoint.Endpoint{URL: "https://example.com/hook", EventTypes: []string{"order.*.paid"}}, "event_types[0]"},
		"reserved header": {f.reg, endpoint.Endpoint{URL: "https://example.com/hook", EventTypes: []string{"*"},
			Headers: map[string]string{"Webhook-Signature": "x"}}, "headers.Webhook-Signature"},
		"bad tenant": {f.reg, endpoint.Endpoint{URL: "https://example.com/hook", EventTypes: []string{"*"}, Tenant: "a b"}, "tenant"},
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := c.reg.Create(ctx, f.db.Pool, c.ep, admin)
			var verr *endpoint.ValidationError
			require.ErrorAs(t, err, &verr)
			require.Equal(t, c.field, verr.Field, "%v", err)
		})
	}
	var n int
	require.NoError(t, f.db.Pool.QueryRow(ctx, "SELECT count(*) FROM "+f.db.Schema+".outboxd_endpoints").Scan(&n))
	require.Zero(t, n, "nothing written")

	reader, err := endpoint.NewRegistry(endpoint.RegistryConfig{Schema: f.db.Schema})
	require.NoError(t, err)
	_, _, err = reader.Create(ctx, f.db.Pool, endpoint.Endpoint{URL: "https://example.com/hook", EventTypes: []string{"*"}}, admin)
	require.ErrorIs(t, err, endpoint.ErrNoKey)
	ep, _ := f.create(t, endpoint.Endpoint{URL: "https://example.com/hook", EventTypes: []string{"*"}})
	require.ErrorContains(t, reader.Disable(ctx, f.db.Pool, ep.ID, endpoint.Change{Actor: "ops"}), "reason")
	require.ErrorIs(t, reader.Disable(ctx, f.db.Pool, uuid.New(), admin), endpoint.ErrNotFound)
}

func TestADisabledEndpointsDeliveriesWaitAndKeepTheirKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	r := newReceiver(t)
	ep, secret := f.create(t, endpoint.Endpoint{URL: r.URL, EventTypes: []string{"order.*"}})
	r.setSecret(secret)
	res := f.enqueue(t, outbox.Event{ID: outbox.EventID("held", "1"), Type: "order.paid"}, outbox.ToSubscribers())
	require.Len(t, res.Effects, 1)
	require.NoError(t, f.reg.Disable(ctx, f.db.Pool, ep.ID, endpoint.Change{Actor: "ops", Reason: "receiver down for maintenance"}))

	// Disabled: an event recorded now is fanned out to it all the same,
	// and held with the others, so that it misses nothing.
	later := f.enqueue(t, outbox.Event{ID: outbox.EventID("held", "2"), Type: "order.paid"}, outbox.ToSubscribers())
	require.Len(t, later.Effects, 1)
	require.Equal(t, "endpoint:"+ep.ID.String(), later.Effects[0].Kind)

	op := f.dispatch(t, f.provider(t))
	id := res.Effects[0].ID
	require.Eventually(t, func() bool {
		e, err := op.Get(ctx, id)
		l, lerr := op.Get(ctx, later.Effects[0].ID)
		return err == nil && lerr == nil && e.WaitingFor != nil && *e.WaitingFor == endpoint.LimitKey(ep.ID) && f.jobWaits(t, id) &&
			l.WaitingFor != nil && f.jobWaits(t, l.ID)
	}, 20*time.Second, 20*time.Millisecond, "both deliveries wait for their endpoint")
	e, err := op.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, sideeffects.StatePending, e.State)
	require.Zero(t, r.requests())
	// Held, nothing was sent: no request counted, no key window begun,
	// and the endpoint's limit key paused without a 429 counted.
	require.Zero(t, e.TotalAttempts, "a held delivery is no request")
	require.Nil(t, e.KeyWindowFrom, "no request has carried its key yet")
	limits, err := op.Limits(ctx)
	require.NoError(t, err)
	found := false
	for _, l := range limits {
		if l.Key == endpoint.LimitKey(ep.ID) {
			found = true
			require.Zero(t, l.Throttles, "the endpoint answered no 429")
			require.NotNil(t, l.PausedUntil, "its key waits for the hold")
		}
	}
	require.True(t, found, "the endpoint's limit key is listed")
	// The stuck list says what holds it back, in the endpoint's words.
	stuck, err := op.Stuck(ctx, 0, 100)
	require.NoError(t, err)
	require.Len(t, stuck, 2)
	// The delivery the endpoint held says so in its words; the other may
	// have found the key already paused, and been turned away before it
	// reached the endpoint.
	inItsWords := 0
	for _, st := range stuck {
		why := oncall.Diagnosis(st, time.Now(), time.Minute, 0)
		require.Contains(t, why, "waiting for limit "+endpoint.LimitKey(ep.ID))
		if strings.Contains(why, "is disabled (receiver down for maintenance)") {
			inItsWords++
		}
	}
	require.Positive(t, inItsWords, "the endpoint's reason is named")

	require.NoError(t, f.reg.Enable(ctx, f.db.Pool, ep.ID, endpoint.Change{Actor: "ops", Reason: "receiver back"}))
	// The operator resumes the endpoint's limit key rather than waiting
	// for the next look.
	woken, err := op.ResumeLimit(ctx, endpoint.LimitKey(ep.ID), "ops", "endpoint enabled")
	require.NoError(t, err)
	require.Equal(t, 2, woken)
	require.Eventually(t, func() bool {
		e, err := op.Get(ctx, id)
		l, lerr := op.Get(ctx, later.Effects[0].ID)
		return err == nil && lerr == nil && e.State == sideeffects.StateConfirmed && l.State == sideeffects.StateConfirmed
	}, 20*time.Second, 20*time.Millisecond, "delivered at once, not at the next look")
	require.Equal(t, 2, r.requests())
	keys := []string{r.got[0].Get("webhook-id"), r.got[1].Get("webhook-id")}
	require.ElementsMatch(t, []string{res.Effects[0].Key, later.Effects[0].Key}, keys, "the held deliveries keep their keys")
	e, err = op.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, 1, e.Attempts, "waiting spent no attempt")
}

func TestSQLFansOutAsGoDoes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	a, _ := f.create(t, endpoint.Endpoint{URL: "https://a.example.com/h", EventTypes: []string{"order.*"}})
	_, _ = f.create(t, endpoint.Endpoint{URL: "https://b.example.com/h", EventTypes: []string{"invoice.paid"}})
	c, _ := f.create(t, endpoint.Endpoint{URL: "https://c.example.com/h", Tenant: "acme", EventTypes: []string{"*"}})
	ev := outbox.EventID("sql", "1")

	type row struct {
		ID        uuid.UUID
		Kind      string
		Key       string
		Duplicate bool
	}
	call := func(effects string) []row {
		t.Helper()
		rows, err := f.db.Pool.Query(ctx, "SELECT effect_id, kind, idempotency_key, duplicate FROM "+f.db.Schema+".outboxd_enqueue($1, $2)",
			`{"id":"`+ev.String()+`","type":"order.paid","payload":{"order":"ord_1"}}`, effects)
		require.NoError(t, err)
		got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
		require.NoError(t, err)
		return got
	}
	got := call(`[{"subscribers": true, "ordering_key": "ord_1"}, {"kind":"webhook.audit","provider":"webhook","payload":{"url":"https://audit.example.com","body":{}}}]`)
	require.Len(t, got, 2)
	require.Equal(t, row{got[0].ID, "endpoint:" + a.ID.String(), keyOf(ev, a.ID), false}, got[0])
	require.Equal(t, "webhook.audit", got[1].Kind)
	var okey string
	require.NoError(t, f.db.Pool.QueryRow(ctx, "SELECT ordering_key FROM "+f.db.Schema+".side_effects WHERE id = $1", got[0].ID).Scan(&okey))
	require.Equal(t, "ord_1@"+a.ID.String(), okey)

	// Go replays what SQL wrote, effect for effect.
	sub := outbox.ToSubscribers()
	sub.OrderingKey = "ord_1"
	res := f.enqueue(t, outbox.Event{ID: ev, Type: "order.paid", Payload: json.RawMessage(`{"order":"ord_1"}`)}, sub,
		outbox.Effect{Kind: "webhook.audit", Provider: "webhook", Payload: json.RawMessage(`{"url":"https://audit.example.com","body":{}}`)})
	require.True(t, res.Replay())
	require.Equal(t, got[0].ID, res.Effects[0].ID)

	// SQL replays too, and another tenant's call reaches its endpoint.
	require.True(t, call(`[{"subscribers": true, "ordering_key": "ord_1"}, {"kind":"webhook.audit","provider":"webhook","payload":{"url":"https://audit.example.com","body":{}}}]`)[0].Duplicate)
	ev = outbox.EventID("sql", "2")
	got = call(`[{"subscribers": true, "tenant": "acme"}]`)
	require.Len(t, got, 1)
	require.Equal(t, "endpoint:"+c.ID.String(), got[0].Kind)

	for effects, field := range map[string]string{
		`[{"subscribers": true, "kind": "x"}]`:                                        "effects[0]",
		`[{"subscribers": true}, {"subscribers": true}]`:                              "effects[1]",
		`[{"subscribers": true, "ordering_key": "` + strings.Repeat("k", 230) + `"}]`: "effects[0].ordering_key",
	} {
		ev = uuid.New()
		_, err := f.db.Pool.Exec(ctx, "SELECT * FROM "+f.db.Schema+".outboxd_enqueue($1, $2)",
			`{"id":"`+ev.String()+`","type":"order.paid"}`, effects)
		require.ErrorContains(t, err, field, effects)
	}
}

func TestAnEndpointFailingForDaysIsDisabledAndItsDeliveriesHeld(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	var status atomic.Int32
	status.Store(http.StatusInternalServerError)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(int(status.Load())) }))
	defer srv.Close()
	ep, _ := f.create(t, endpoint.Endpoint{URL: srv.URL, EventTypes: []string{"*"}})
	p := f.provider(t)
	failingSince := func() *time.Time {
		var at *time.Time
		require.NoError(t, f.db.Pool.QueryRow(ctx, "SELECT failing_since FROM "+f.db.Schema+".outboxd_endpoints WHERE id = $1", ep.ID).Scan(&at))
		return at
	}

	_, err := p.Send(ctx, request(ep.ID))
	require.Error(t, err)
	require.NotNil(t, failingSince(), "the first failure is remembered")
	got, err := f.reg.Get(ctx, f.db.Pool, ep.ID)
	require.NoError(t, err)
	require.Nil(t, got.DisabledAt, "one failure disables nothing")

	// Five days and more of failures (moved into the past rather than
	// waited for): the next failure disables it.
	_, err = f.db.Pool.Exec(ctx, "UPDATE "+f.db.Schema+".outboxd_endpoints SET failing_since = now() - interval '6 days' WHERE id = $1", ep.ID)
	require.NoError(t, err)
	_, err = p.Send(ctx, request(ep.ID))
	require.Error(t, err)
	got, err = f.reg.Get(ctx, f.db.Pool, ep.ID)
	require.NoError(t, err)
	require.NotNil(t, got.DisabledAt)
	require.Contains(t, got.DisabledReason, "every delivery failed since")
	require.Contains(t, got.DisabledReason, "HTTP 500")
	hist, err := f.reg.History(ctx, f.db.Pool, ep.ID)
	require.NoError(t, err)
	require.Equal(t, "disable", hist[len(hist)-1].Action)
	require.Equal(t, "outboxd", hist[len(hist)-1].Actor)

	_, err = p.Send(ctx, request(ep.ID))
	require.True(t, providers.IsThrottled(err), "its deliveries are held, spending no attempt: %v", err)

	status.Store(http.StatusNoContent)
	require.NoError(t, f.reg.Enable(ctx, f.db.Pool, ep.ID, endpoint.Change{Actor: "ops", Reason: "partner fixed their receiver"}))
	_, err = p.Send(ctx, request(ep.ID))
	require.NoError(t, err)
	require.Nil(t, failingSince(), "a delivery that succeeds ends the failing spell")
}

// TestAnEndpointAboutToBeDisabledSaysSoFirst: within the hour before
// outboxd disables a failing endpoint, its next failure raises
// outboxd.endpoint.disabling, once per failing spell, saying when and what
// it will hold back (its deliveries not ended), so that someone can act
// before deliveries are held.
func TestAnEndpointAboutToBeDisabledSaysSoFirst(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusBadGateway) }))
	defer srv.Close()
	ep, _ := f.create(t, endpoint.Endpoint{URL: srv.URL, EventTypes: []string{"*"}})
	f.create(t, endpoint.Endpoint{URL: srv.URL + "/ops", EventTypes: []string{"outboxd.endpoint.*"}, Description: "on-call"})
	p := f.provider(t)
	raised := func() []map[string]any {
		rows, err := f.db.Pool.Query(ctx, "SELECT payload FROM "+f.db.Schema+".outbox_events WHERE event_type = 'outboxd.endpoint.disabling'")
		require.NoError(t, err)
		out, err := pgx.CollectRows(rows, pgx.RowTo[map[string]any])
		require.NoError(t, err)
		return out
	}

	_, err := p.Send(ctx, request(ep.ID))
	require.Error(t, err)
	require.Empty(t, raised(), "days before the disable: nothing to say yet")

	// 4 days 23.5 hours of failures (moved into the past): the next one
	// warns.
	_, err = f.db.Pool.Exec(ctx, "UPDATE "+f.db.Schema+".outboxd_endpoints SET failing_since = now() - interval '5 days' + interval '30 minutes' WHERE id = $1", ep.ID)
	require.NoError(t, err)
	for range 2 {
		_, err = p.Send(ctx, request(ep.ID))
		require.Error(t, err)
	}
	got := raised()
	require.Len(t, got, 1, "once per failing spell")
	require.Equal(t, ep.ID.String(), got[0]["endpoint_id"])
	require.Equal(t, srv.URL, got[0]["url"])
	require.Contains(t, got[0]["last_error"], "HTTP 502")
	require.Contains(t, got[0], "disables_at")
	require.EqualValues(t, 0, got[0]["open_deliveries"])
	e, err := f.reg.Get(ctx, f.db.Pool, ep.ID)
	require.NoError(t, err)
	require.Nil(t, e.DisabledAt, "a warning, not yet the disable")
}

func TestAFailingEndpointIsNeverDisabledWhenTold(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusBadGateway) }))
	defer srv.Close()
	ep, _ := f.create(t, endpoint.Endpoint{URL: srv.URL, EventTypes: []string{"*"}})
	p, err := endpoint.New(endpoint.Config{DB: f.db.Pool, Schema: f.db.Schema, Key: f.key, Webhook: f.webhookConfig(), DisableAfter: -1})
	require.NoError(t, err)
	_, err = f.db.Pool.Exec(ctx, "UPDATE "+f.db.Schema+".outboxd_endpoints SET failing_since = now() - interval '60 days' WHERE id = $1", ep.ID)
	require.NoError(t, err)
	_, err = p.Send(ctx, request(ep.ID))
	require.Error(t, err)
	got, err := f.reg.Get(ctx, f.db.Pool, ep.ID)
	require.NoError(t, err)
	require.Nil(t, got.DisabledAt)
}

// jobWaits reports whether effect id's own job is scheduled for later (a
// held delivery's job, once its worker let it go).
func (f *fixture) jobWaits(t *testing.T, id uuid.UUID) bool {
	t.Helper()
	var n int
	require.NoError(t, f.db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM "+f.db.Schema+
		".river_job WHERE args->>'effect_id' = $1::text AND state IN ('scheduled', 'retryable') AND scheduled_at > now()", id).Scan(&n))
	return n == 1
}

func TestAnEndpointsCapOnRequestsInFlight(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	capped, _ := f.create(t, endpoint.Endpoint{URL: "https://capped.example.com/h", EventTypes: []string{"*"}, MaxInFlight: 1})
	open, _ := f.create(t, endpoint.Endpoint{URL: "https://capped.example.com/other", EventTypes: []string{"*"}})
	p := f.provider(t)

	release, _, ok := p.Admit(ctx, request(capped.ID).Payload)
	require.True(t, ok)
	_, wait, ok := p.Admit(ctx, request(capped.ID).Payload)
	require.False(t, ok, "one request in flight is its cap")
	require.Positive(t, wait, "the delivery waits, spending no attempt")
	other, _, ok := p.Admit(ctx, request(open.ID).Payload)
	require.True(t, ok, "another endpoint on the same host is not held back by it")
	other(nil)
	release(nil)
	again, _, ok := p.Admit(ctx, request(capped.ID).Payload)
	require.True(t, ok, "its slot is free again")
	again(nil)

	max := 0
	got, err := f.reg.Edit(ctx, f.db.Pool, capped.ID, endpoint.Update{MaxInFlight: &max}, admin)
	require.NoError(t, err)
	require.Zero(t, got.MaxInFlight)
	bad := -1
	_, err = f.reg.Edit(ctx, f.db.Pool, capped.ID, endpoint.Update{MaxInFlight: &bad}, admin)
	var verr *endpoint.ValidationError
	require.ErrorAs(t, err, &verr)
	require.Equal(t, "max_in_flight", verr.Field)
}

// TestARotationAfterALeakRetiresEveryEarlierSecret: two rotations leave
// three secrets signing; a rotation with RetireAtOnce leaves only the new
// one, so a leaked earlier secret verifies nothing from then on. An
// overlap over the cap is refused, with nothing changed.
func TestARotationAfterALeakRetiresEveryEarlierSecret(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	p := f.provider(t)
	r := newReceiver(t)
	ep, s0 := f.create(t, endpoint.Endpoint{URL: r.URL, EventTypes: []string{"*"}})
	s1, err := f.reg.Rotate(ctx, f.db.Pool, ep.ID, time.Hour, admin)
	require.NoError(t, err)
	s2, err := f.reg.Rotate(ctx, f.db.Pool, ep.ID, time.Hour, admin)
	require.NoError(t, err)
	got, err := f.reg.Get(ctx, f.db.Pool, ep.ID)
	require.NoError(t, err)
	require.Len(t, got.Secrets, 3, "the current one and two rotated out, all signing")

	_, err = f.reg.Rotate(ctx, f.db.Pool, ep.ID, 30*24*time.Hour, admin)
	require.ErrorContains(t, err, "over the cap of 168h0m0s")
	got, err = f.reg.Get(ctx, f.db.Pool, ep.ID)
	require.NoError(t, err)
	require.Len(t, got.Secrets, 3, "a refused rotation changes nothing")

	s3, err := f.reg.Rotate(ctx, f.db.Pool, ep.ID, endpoint.RetireAtOnce, endpoint.Change{Actor: "ops", Reason: "s1 leaked in a log"})
	require.NoError(t, err)
	r.setSecret(s3)
	_, err = p.Send(ctx, request(ep.ID))
	require.NoError(t, err)
	require.Len(t, strings.Fields(r.got[0].Get("webhook-signature")), 1, "the new secret alone signs")
	for _, old := range []string{s0, s1, s2} {
		require.False(t, verifies(t, old, r, 0))
	}
	got, err = f.reg.Get(ctx, f.db.Pool, ep.ID)
	require.NoError(t, err)
	require.Len(t, got.Secrets, 1)
}

// TestEnablingAnEndpointSendsEveryHeldDeliveryAtOnce: 60 deliveries held
// by a disabled endpoint, half with jobs of their own and half found by
// the dispatcher, all wait pending; enabling it says 60 go out and sends
// all of them long before the next look (endpoint.HeldRecheck).
func TestEnablingAnEndpointSendsEveryHeldDeliveryAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	r := newReceiver(t)
	ep, secret := f.create(t, endpoint.Endpoint{URL: r.URL, EventTypes: []string{"order.*"}})
	r.setSecret(secret)
	byDispatcher, err := outbox.New(outbox.Config{Schema: f.db.Schema, Jobs: outbox.JobsByDispatcher})
	require.NoError(t, err)
	const n = 60
	var ids []uuid.UUID
	for i := range n {
		ob := f.ob
		if i%2 == 1 {
			ob = byDispatcher
		}
		require.NoError(t, pgx.BeginFunc(ctx, f.db.Pool, func(tx pgx.Tx) error {
			res, err := ob.Enqueue(ctx, tx, outbox.Event{ID: outbox.EventID("held-many", fmt.Sprint(i)), Type: "order.paid"}, outbox.ToSubscribers())
			if err == nil {
				ids = append(ids, res.Effects[0].ID)
			}
			return err
		}))
	}
	require.NoError(t, f.reg.Disable(ctx, f.db.Pool, ep.ID, endpoint.Change{Actor: "ops", Reason: "receiver down"}))
	op := f.dispatch(t, f.provider(t))
	waiting := func() (pending, waitingForKey int) {
		require.NoError(t, f.db.Pool.QueryRow(ctx, "SELECT count(*) FILTER (WHERE state = 'pending'), count(*) FILTER (WHERE waiting_for = $2) FROM "+
			f.db.Schema+".side_effects WHERE id = ANY($1)", ids, endpoint.LimitKey(ep.ID)).Scan(&pending, &waitingForKey))
		return
	}
	require.Eventually(t, func() bool {
		_, w := waiting()
		return w == n
	}, 30*time.Second, 50*time.Millisecond, "every delivery waits for its endpoint")
	pending, _ := waiting()
	require.Equal(t, n, pending, "a held delivery is pending, whatever state it was claimed in")
	// The batch that found the dispatcher's half has handed each to a job
	// of its own.
	require.Eventually(t, func() bool {
		var running int
		require.NoError(t, f.db.Pool.QueryRow(ctx, "SELECT count(*) FROM "+f.db.Schema+".river_job WHERE kind = 'outboxd.dispatch_batch' AND state = 'running'").Scan(&running))
		return running == 0
	}, 10*time.Second, 20*time.Millisecond)

	enabled := time.Now()
	res, err := op.EnableEndpoint(ctx, f.reg, ep.ID, false, "ops", "receiver back")
	require.NoError(t, err)
	require.Equal(t, n, res.Held)
	require.Equal(t, n, res.Delivering, "enable says how many go out now")
	require.Eventually(t, func() bool {
		var confirmed int
		require.NoError(t, f.db.Pool.QueryRow(ctx, "SELECT count(*) FROM "+f.db.Schema+".side_effects WHERE id = ANY($1) AND state = 'confirmed'", ids).Scan(&confirmed))
		return confirmed == n
	}, endpoint.HeldRecheck/2, 50*time.Millisecond, "every held delivery goes out at once, not at the next look")
	require.Equal(t, n, r.requests())
	t.Logf("all %d held deliveries confirmed %s after the enable began", n, time.Since(enabled).Round(100*time.Millisecond))
}

// TestAReplicaWithAnotherKeyHoldsDeliveries: a process given a key that
// did not seal an endpoint's secret neither signs with it nor fails the
// delivery: it holds it (no attempt spent) for a process that has the key.
// Given the list "new,old", it signs with the secret the old key sealed,
// and the receiver verifies.
func TestAReplicaWithAnotherKeyHoldsDeliveries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	r := newReceiver(t)
	ep, secret := f.create(t, endpoint.Endpoint{URL: r.URL, EventTypes: []string{"order.*"}})
	r.setSecret(secret)
	other := endpoint.NewKey()
	provider := func(key string) *endpoint.Provider {
		k, err := endpoint.ParseKey(key)
		require.NoError(t, err)
		p, err := endpoint.New(endpoint.Config{DB: f.db.Pool, Schema: f.db.Schema, Key: k, Webhook: f.webhookConfig()})
		require.NoError(t, err)
		return p
	}
	_, err := provider(other).Send(ctx, request(ep.ID))
	require.Error(t, err)
	require.True(t, providers.IsHeld(err), "held, not refused: %v", err)
	require.ErrorContains(t, err, "sealed under another endpoint key")
	require.Zero(t, r.requests())

	_, err = provider(other+","+f.keyText).Send(ctx, request(ep.ID))
	require.NoError(t, err)
	require.Equal(t, 1, r.requests())
	require.True(t, verifies(t, secret, r, 0), "signed with the secret the old key sealed")
}
