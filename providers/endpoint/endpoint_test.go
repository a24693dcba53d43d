package endpoint_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/testdb"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/endpoint"
	"github.com/outboxd/outboxd/providers/endpoint/endpointschema"
	"github.com/outboxd/outboxd/providers/webhook"
	"github.com/outboxd/outboxd/sideeffects"
)

var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}

var admin = endpoint.Change{Actor: "ops@example.com", Reason: "test"}

// receiver is an endpoint's server: it records every request and answers
// 2xx only to requests its own secret verifies.
type receiver struct {
	*httptest.Server
	mu       sync.Mutex
	secret   string
	got      []http.Header
	bodies   [][]byte
	verified []bool
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		secret := r.secret
		r.mu.Unlock()
		ok := false
		if wh, err := standardwebhooks.NewWebhook(secret); err == nil {
			ok = wh.Verify(body, req.Header) == nil
		}
		r.mu.Lock()
		r.got = append(r.got, req.Header.Clone())
		r.bodies = append(r.bodies, body)
		r.verified = append(r.verified, ok)
		r.mu.Unlock()
		if !ok {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) setSecret(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.secret = s
}

func (r *receiver) requests() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}

type fixture struct {
	db      *testdb.DB
	key     *endpoint.Key
	keyText string
	reg     *endpoint.Registry
	ob      *outbox.Outbox
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	db := testdb.New(t)
	keyText := endpoint.NewKey()
	key, err := endpoint.ParseKey(keyText)
	require.NoError(t, err)
	reg, err := endpoint.NewRegistry(endpoint.RegistryConfig{Schema: db.Schema, Key: key, AllowedNetworks: loopback})
	require.NoError(t, err)
	ob, err := outbox.New(outbox.Config{Jobs: outbox.JobsInTransaction, Schema: db.Schema})
	require.NoError(t, err)
	return &fixture{db: db, key: key, keyText: keyText, reg: reg, ob: ob}
}

func (f *fixture) create(t *testing.T, ep endpoint.Endpoint) (*endpoint.Endpoint, string) {
	t.Helper()
	got, secret, err := f.reg.Create(context.Background(), f.db.Pool, ep, admin)
	require.NoError(t, err)
	return got, secret
}

func (f *fixture) webhookConfig() webhook.Config {
	return webhook.Config{AllowedNetworks: loopback, Timeout: 5 * time.Second}
}

func (f *fixture) provider(t *testing.T) *endpoint.Provider {
	t.Helper()
	p, err := endpoint.New(endpoint.Config{DB: f.db.Pool, Schema: f.db.Schema, Key: f.key, Webhook: f.webhookConfig()})
	require.NoError(t, err)
	return p
}

func (f *fixture) dispatch(t *testing.T, ps ...providers.Provider) *sideeffects.Operator {
	t.Helper()
	ctx := context.Background()
	d, err := sideeffects.NewDispatcher(f.db.Pool, sideeffects.Config{Schema: f.db.Schema, Providers: ps, Logger: quiet(),
		Retry: sideeffects.RetryPolicy{MaxAttempts: 5, BaseDelay: 50 * time.Millisecond, MaxDelay: time.Second}})
	require.NoError(t, err)
	require.NoError(t, d.Start(ctx))
	t.Cleanup(func() { _ = d.Stop(context.WithoutCancel(ctx)) })
	op, err := sideeffects.NewOperator(f.db.Pool, sideeffects.OperatorConfig{Schema: f.db.Schema})
	require.NoError(t, err)
	return op
}

func (f *fixture) enqueue(t *testing.T, ev outbox.Event, effects ...outbox.Effect) *outbox.Result {
	t.Helper()
	var res *outbox.Result
	require.NoError(t, pgx.BeginFunc(context.Background(), f.db.Pool, func(tx pgx.Tx) error {
		var err error
		res, err = f.ob.Enqueue(context.Background(), tx, ev, effects...)
		return err
	}))
	return res
}

func keyOf(event uuid.UUID, endpointID uuid.UUID) string {
	sum := sha256.Sum256([]byte(event.String() + ":endpoint:" + endpointID.String()))
	return hex.EncodeToString(sum[:])
}

func TestAnEventFansOutToItsSubscribersInTheCallersTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	rcv := map[string]*receiver{}
	eps := map[string]*endpoint.Endpoint{}
	for _, c := range []struct {
		name, tenant string
		types        []string
	}{
		{"prefix", "", []string{"order.*"}},
		{"exact", "", []string{"order.paid"}},
		{"disabled", "", []string{"*"}},
		{"other_type", "", []string{"invoice.*"}},
		{"other_tenant", "acme", []string{"*"}},
	} {
		rcv[c.name] = newReceiver(t)
		ep, secret := f.create(t, endpoint.Endpoint{URL: rcv[c.name].URL + "/hooks", Tenant: c.tenant, EventTypes: c.types,
			Headers: map[string]string{"X-Endpoint": c.name}})
		rcv[c.name].setSecret(secret)
		eps[c.name] = ep
	}
	require.NoError(t, f.reg.Disable(ctx, f.db.Pool, eps["disabled"].ID, endpoint.Change{Actor: "ops", Reason: "receiver retired"}))

	ev := outbox.Event{ID: outbox.EventID("fanout", "ord_1"), Type: "order.paid", AggregateType: "order", AggregateID: "ord_1",
		Payload: json.RawMessage(`{"order":"ord_1","amount":500}`)}

	// Rolled back with the caller's transaction: nothing of it stays.
	tx, err := f.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	res, err := f.ob.Enqueue(ctx, tx, ev, outbox.ToSubscribers())
	require.NoError(t, err)
	require.Len(t, res.Effects, 3, "written in the caller's transaction")
	require.NoError(t, tx.Rollback(ctx))
	var n int
	require.NoError(t, f.db.Pool.QueryRow(ctx, "SELECT count(*) FROM "+f.db.Schema+".side_effects").Scan(&n))
	require.Zero(t, n, "a rolled-back fan-out leaves no effect")

	// The disabled endpoint gets its delivery too, held until it is
	// enabled: it misses nothing.
	res = f.enqueue(t, ev, outbox.ToSubscribers())
	want := []uuid.UUID{eps["prefix"].ID, eps["exact"].ID, eps["disabled"].ID}
	slices.SortFunc(want, func(a, b uuid.UUID) int { return slices.Compare(a[:], b[:]) })
	require.Len(t, res.Effects, 3)
	for i, e := range res.Effects {
		require.Equal(t, "endpoint:"+want[i].String(), e.Kind)
		require.Equal(t, keyOf(ev.ID, want[i]), e.Key, "the key is sha256(event id + \":endpoint:\" + endpoint id)")
		require.False(t, e.Duplicate)
	}

	// A replay adds nothing, and an endpoint created since does not
	// receive the older event.
	late := newReceiver(t)
	_, lateSecret := f.create(t, endpoint.Endpoint{URL: late.URL, EventTypes: []string{"*"}})
	late.setSecret(lateSecret)
	again := f.enqueue(t, ev, outbox.ToSubscribers())
	require.True(t, again.Replay(), "a replay of the fan-out writes nothing")
	require.Equal(t, res.Effects[0].ID, again.Effects[0].ID)
	require.Len(t, again.Effects, 3)

	op := f.dispatch(t, f.provider(t))
	for _, e := range res.Effects {
		held := e.Kind == "endpoint:"+eps["disabled"].ID.String()
		require.Eventually(t, func() bool {
			got, err := op.Get(ctx, e.ID)
			if held {
				return err == nil && got.State == sideeffects.StatePending && got.WaitingFor != nil &&
					*got.WaitingFor == endpoint.LimitKey(eps["disabled"].ID)
			}
			return err == nil && got.State == sideeffects.StateConfirmed
		}, 20*time.Second, 20*time.Millisecond, e.Kind)
	}
	for _, name := range []string{"prefix", "exact"} {
		r := rcv[name]
		require.Equal(t, 1, r.requests(), name)
		require.True(t, r.verified[0], "%s verifies with its own secret", name)
		require.Equal(t, keyOf(ev.ID, eps[name].ID), r.got[0].Get("webhook-id"))
		require.Equal(t, name, r.got[0].Get("X-Endpoint"), "the endpoint's headers")
		var body endpoint.Body
		require.NoError(t, json.Unmarshal(r.bodies[0], &body))
		require.Equal(t, "order.paid", body.Type)
		require.Equal(t, ev.ID.String(), body.EventID, "the event's id, the same for every endpoint")
		require.Empty(t, body.Tenant, "an event of no tenant")
		require.JSONEq(t, `{"order":"ord_1","amount":500}`, string(body.Data))
		require.False(t, body.Timestamp.IsZero())
	}
	for _, name := range []string{"disabled", "other_type", "other_tenant"} {
		require.Zero(t, rcv[name].requests(), "%s is not reached (the disabled one holds its delivery)", name)
	}
	require.Zero(t, late.requests(), "an endpoint created after the commit is not reached")

	// Each receiver verifies only with its own secret: the request the
	// prefix endpoint got does not verify with the exact endpoint's.
	other, err := standardwebhooks.NewWebhook(rcv["exact"].secret)
	require.NoError(t, err)
	require.Error(t, other.Verify(rcv["prefix"].bodies[0], rcv["prefix"].got[0]), "another endpoint's secret cannot verify, so cannot forge")
}

func TestAnEndpointOrderingKeyIsPerEndpoint(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	a, _ := f.create(t, endpoint.Endpoint{URL: "https://a.example.com/h", EventTypes: []string{"*"}})
	b, _ := f.create(t, endpoint.Endpoint{URL: "https://b.example.com/h", EventTypes: []string{"*"}})
	sub := outbox.ToSubscribers()
	sub.OrderingKey = "order:ord_2"
	sub.NotBefore = time.Now().Add(time.Hour)
	res := f.enqueue(t, outbox.Event{ID: outbox.EventID("okey", "ord_2"), Type: "order.paid"}, sub)
	require.Len(t, res.Effects, 2)
	rows, err := f.db.Pool.Query(context.Background(), "SELECT ordering_key, not_before IS NOT NULL FROM "+f.db.Schema+".side_effects ORDER BY kind")
	require.NoError(t, err)
	type row struct {
		Key       string
		Scheduled bool
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	require.NoError(t, err)
	ids := []uuid.UUID{a.ID, b.ID}
	slices.SortFunc(ids, func(x, y uuid.UUID) int { return slices.Compare([]byte(x.String()), []byte(y.String())) })
	require.Equal(t, []row{{"order:ord_2@" + ids[0].String(), true}, {"order:ord_2@" + ids[1].String(), true}}, got)
}

func TestEnqueueRefusesAMisusedSubscribersEffect(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	ev := outbox.Event{ID: outbox.EventID("bad", "1"), Type: "order.paid"}
	for name, c := range map[string]struct {
		effects []outbox.Effect
		field   string
	}{
		"twice": {[]outbox.Effect{outbox.ToSubscribers(), outbox.ToSubscribers()}, "effects[1]"},
		"with a kind": {[]outbox.Effect{func() outbox.Effect {
			e := outbox.ToSubscribers()
			e.Kind = "webhook.x"
			return e
		}()}, "effects[0]"},
		"ordering key too long for the endpoint's suffix": {[]outbox.Effect{func() outbox.Effect {
			e := outbox.ToSubscribers()
			e.OrderingKey = strings.Repeat("k", 230)
			return e
		}()}, "effects[0].ordering_key"},
	} {
		t.Run(name, func(t *testing.T) {
			err := pgx.BeginFunc(ctx, f.db.Pool, func(tx pgx.Tx) error {
				_, err := f.ob.Enqueue(ctx, tx, ev, c.effects...)
				return err
			})
			var verr *outbox.ValidationError
			require.ErrorAs(t, err, &verr)
			require.Equal(t, c.field, verr.Field)
		})
	}
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestAnEndpointReceivesOnlyItsOwnTenantsEffects: an endpoint:<id> effect
// written directly (by SQL, or an application naming the endpoint) for
// another tenant than the endpoint's is refused with nothing sent, so one
// tenant's data never reaches another tenant's receiver; the endpoint's
// own tenant's effect is delivered.
func TestAnEndpointReceivesOnlyItsOwnTenantsEffects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	rcv := newReceiver(t)
	ep, secret := f.create(t, endpoint.Endpoint{URL: rcv.URL + "/hooks", Tenant: "acme", EventTypes: []string{"order.*"}})
	rcv.setSecret(secret)
	op := f.dispatch(t, f.provider(t))

	direct := func(tenant, order string) uuid.UUID {
		res := f.enqueue(t, outbox.Event{ID: outbox.EventID("direct", order), Type: "order.paid", Payload: json.RawMessage(`{"order":"` + order + `"}`)},
			outbox.Effect{Kind: endpointschema.KindPrefix + ep.ID.String(), Provider: endpointschema.Name, Tenant: tenant,
				Payload: json.RawMessage(`{"endpoint_id":"` + ep.ID.String() + `"}`)})
		return res.Effects[0].ID
	}
	foreign := direct("globex", "globex_1")
	own := direct("acme", "acme_1")
	for id, want := range map[uuid.UUID]outboxtype.State{foreign: outboxtype.StateFailed, own: outboxtype.StateConfirmed} {
		require.Eventually(t, func() bool {
			e, err := op.Get(ctx, id)
			return err == nil && e.State == want
		}, 20*time.Second, 20*time.Millisecond)
	}
	e, err := op.Get(ctx, foreign)
	require.NoError(t, err)
	require.Contains(t, *e.LastError, `belongs to tenant "acme" and the effect to tenant "globex": nothing was sent`)
	require.Equal(t, 1, rcv.requests(), "only acme's own effect reached acme's receiver")
	require.NotContains(t, string(rcv.bodies[0]), "globex")
	var body endpoint.Body
	require.NoError(t, json.Unmarshal(rcv.bodies[0], &body))
	require.Equal(t, "acme", body.Tenant, "the body says whose event it is")
}

// TestAReceiversEchoOfItsCredentialsIsNotKept: a receiver that answers
// 422 quoting the endpoint's Authorization header and its signing secret
// leaves neither in the effect's last error, its attempt history or the
// operator's view of it.
func TestAReceiversEchoOfItsCredentialsIsNotKept(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	var secret string
	var mu sync.Mutex
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		s := secret
		mu.Unlock()
		w.WriteHeader(http.StatusUnprocessableEntity)
		_, _ = io.WriteString(w, `{"error":"rejected `+r.Header.Get("Authorization")+` token `+strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")+` signed with `+s+`"}`)
	}))
	t.Cleanup(echo.Close)
	_, s := f.create(t, endpoint.Endpoint{URL: echo.URL + "/hooks", EventTypes: []string{"order.*"},
		Headers: map[string]string{"Authorization": "Bearer partner-token-4711"}})
	mu.Lock()
	secret = s
	mu.Unlock()

	res := f.enqueue(t, outbox.Event{ID: outbox.EventID("echo", "1"), Type: "order.paid", Payload: json.RawMessage(`{"order":"1"}`)}, outbox.ToSubscribers())
	require.Len(t, res.Effects, 1)
	op := f.dispatch(t, f.provider(t))
	id := res.Effects[0].ID
	require.Eventually(t, func() bool {
		e, err := op.Get(ctx, id)
		return err == nil && e.LastError != nil
	}, 20*time.Second, 20*time.Millisecond)
	e, err := op.Get(ctx, id)
	require.NoError(t, err)
	attempts, err := op.Attempts(ctx, id)
	require.NoError(t, err)
	require.NotEmpty(t, attempts)
	texts := []string{*e.LastError}
	for _, a := range attempts {
		texts = append(texts, a.Error)
	}
	for _, text := range texts {
		require.Contains(t, text, "HTTP 422")
		require.NotContains(t, text, "partner-token-4711")
		require.NotContains(t, text, strings.TrimPrefix(s, "whsec_"))
	}
}
