package endpoint_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/store"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/providers/endpoint"
	"github.com/outboxd/outboxd/providers/webhook"
	"github.com/outboxd/outboxd/sideeffects"
)

// TestAFailureRaisesOneOperationalEvent: an effect that fails raises
// exactly one signed outboxd.effect.failed event, delivered to the
// endpoint that subscribes to outboxd's events and to no "*" endpoint; a
// failure that rolls back raises none.
func TestAFailureRaisesOneOperationalEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	ops := newReceiver(t)
	_, opsSecret := f.create(t, endpoint.Endpoint{URL: ops.URL, EventTypes: []string{"outboxd.effect.*", "outboxd.endpoint.*"}, Description: "on-call channel"})
	ops.setSecret(opsSecret)
	app := newReceiver(t)
	appEP, appSecret := f.create(t, endpoint.Endpoint{URL: app.URL, EventTypes: []string{"*"}})
	app.setSecret(appSecret)

	gone := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusGone) }))
	defer gone.Close()
	ob, err := outbox.New(outbox.Config{Jobs: outbox.JobsInTransaction, Schema: f.db.Schema, WebhookAllowedNetworks: loopback})
	require.NoError(t, err)
	enqueue := func(name string) uuid.UUID {
		var res *outbox.Result
		require.NoError(t, pgx.BeginFunc(ctx, f.db.Pool, func(tx pgx.Tx) error {
			res, err = ob.Enqueue(ctx, tx, outbox.Event{ID: outbox.EventID("ops", name), Type: "partner.notified"},
				outbox.EffectOf("webhook.partner", webhook.Payload{URL: gone.URL, Body: json.RawMessage(`{}`)}))
			return err
		}))
		return res.Effects[0].ID
	}
	failing := enqueue("1")
	untouched := enqueue("2")

	// A failure that rolls back raises nothing.
	tx, err := f.db.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "UPDATE "+f.db.Schema+".side_effects SET state = 'failed', last_error = 'by hand' WHERE id = $1", untouched)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	_, err = f.db.Pool.Exec(ctx, "UPDATE "+f.db.Schema+".side_effects SET state = 'cancelled' WHERE id = $1", untouched)
	require.NoError(t, err)

	wh, err := webhook.New(webhook.Config{Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", AllowedNetworks: loopback})
	require.NoError(t, err)
	op := f.dispatch(t, wh, f.provider(t))
	require.Eventually(t, func() bool {
		e, err := op.Get(ctx, failing)
		return err == nil && e.State == sideeffects.StateFailed
	}, 20*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool { return ops.requests() == 1 }, 20*time.Second, 20*time.Millisecond, "the on-call endpoint hears of it")

	events := func(typ string) int {
		var n int
		require.NoError(t, f.db.Pool.QueryRow(ctx, "SELECT count(*) FROM "+f.db.Schema+".outbox_events WHERE event_type = $1", typ).Scan(&n))
		return n
	}
	require.Equal(t, 1, events("outboxd.effect.failed"), "exactly one event for one failure; none for the rolled-back one")
	ops.mu.Lock()
	require.True(t, ops.verified[0], "signed with the on-call endpoint's own secret")
	var body struct {
		Type string
		Data struct {
			EffectID uuid.UUID `json:"effect_id"`
			Kind     string
			Reason   string
		}
	}
	require.NoError(t, json.Unmarshal(ops.bodies[0], &body))
	ops.mu.Unlock()
	require.Equal(t, "outboxd.effect.failed", body.Type)
	require.Equal(t, failing, body.Data.EffectID)
	require.Equal(t, "webhook.partner", body.Data.Kind)
	require.Contains(t, body.Data.Reason, "HTTP 410")

	// An endpoint disabled raises its own event; "*" hears none of them.
	require.NoError(t, f.reg.Disable(ctx, f.db.Pool, appEP.ID, endpoint.Change{Actor: "ops", Reason: "partner offboarded"}))
	require.Eventually(t, func() bool { return ops.requests() == 2 }, 20*time.Second, 20*time.Millisecond)
	require.Equal(t, 1, events("outboxd.endpoint.disabled"))
	require.Zero(t, app.requests(), "an endpoint of every type hears none of outboxd's own events")
	var toApp int
	require.NoError(t, f.db.Pool.QueryRow(ctx, "SELECT count(*) FROM "+f.db.Schema+".side_effects WHERE kind = $1", "endpoint:"+appEP.ID.String()).Scan(&toApp))
	require.Zero(t, toApp)
}

// TestABreakerAndAClosingKeyWindowRaiseTheirEvents: a breaker that opens
// raises outboxd.destination.breaker_open once, however many dispatchers
// report it; an effect whose key window closes within the hour raises
// outboxd.effect.key_window_closing once.
func TestABreakerAndAClosingKeyWindowRaiseTheirEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	ops := newReceiver(t)
	_, opsSecret := f.create(t, endpoint.Endpoint{URL: ops.URL, EventTypes: []string{"outboxd.destination.*", "outboxd.effect.key_window_closing"}})
	ops.setSecret(opsSecret)
	events := func(typ string) int {
		var n int
		require.NoError(t, f.db.Pool.QueryRow(ctx, "SELECT count(*) FROM "+f.db.Schema+".outbox_events WHERE event_type = $1", typ).Scan(&n))
		return n
	}

	// Two dispatchers report what their gates hold back.
	for _, id := range []string{"a", "b"} {
		_, err := f.db.Pool.Exec(ctx, "INSERT INTO "+f.db.Schema+".outboxd_dispatchers (id, host, pid, settings) VALUES ($1, 'box', 1, '{}')", id)
		require.NoError(t, err)
	}
	report := func(id string, open bool) {
		t.Helper()
		dests := fmt.Sprintf(`[{"host": "hooks.partner.example", "address": "10.0.0.9:443", "in_flight": 0, "waiting": 0, "limit": 16, "failures_in_a_row": 8, "breaker_open": %t}]`, open)
		_, err := f.db.Pool.Exec(ctx, "UPDATE "+f.db.Schema+".outboxd_dispatchers SET destinations = $2, seen_at = now() WHERE id = $1", id, dests)
		require.NoError(t, err)
	}
	report("a", false)
	require.Zero(t, events("outboxd.destination.breaker_open"))
	report("a", true)
	require.Equal(t, 1, events("outboxd.destination.breaker_open"), "the breaker opened")
	report("a", true)
	report("b", true)
	require.Equal(t, 1, events("outboxd.destination.breaker_open"), "still open, or open at another dispatcher too: no second event")

	// An effect fired 23h40m ago whose webhook key window (24h less 5m)
	// closes in 15 minutes, its retry far off.
	ob, err := outbox.New(outbox.Config{Jobs: outbox.JobsInTransaction, Schema: f.db.Schema})
	require.NoError(t, err)
	var res *outbox.Result
	require.NoError(t, pgx.BeginFunc(ctx, f.db.Pool, func(tx pgx.Tx) error {
		res, err = ob.Enqueue(ctx, tx, outbox.Event{ID: outbox.EventID("window", "1"), Type: "partner.notified"},
			outbox.EffectOf("webhook.partner", webhook.Payload{URL: "https://hooks.partner.example/in", Body: json.RawMessage(`{}`)}))
		return err
	}))
	_, err = f.db.Pool.Exec(ctx, "UPDATE "+f.db.Schema+".side_effects SET attempts = 3, key_window_from = now() - interval '23 hours 40 minutes', last_error = 'HTTP 503' WHERE id = $1", res.Effects[0].ID)
	require.NoError(t, err)
	_, err = f.db.Pool.Exec(ctx, "UPDATE "+f.db.Schema+".river_job SET state = 'scheduled', scheduled_at = now() + interval '1 hour' WHERE args->>'effect_id' = $1::text", res.Effects[0].ID)
	require.NoError(t, err)

	wh, err := webhook.New(webhook.Config{Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", AllowedNetworks: loopback})
	require.NoError(t, err)
	f.dispatch(t, wh, f.provider(t))
	require.Eventually(t, func() bool { return ops.requests() == 2 }, 30*time.Second, 20*time.Millisecond,
		"the breaker's event and the key window's, delivered")
	require.Equal(t, 1, events("outboxd.effect.key_window_closing"))
	// The leader looks every minute: a look again, after the effect's
	// attempts changed, raises nothing new.
	_, err = f.db.Pool.Exec(ctx, "UPDATE "+f.db.Schema+".side_effects SET attempts = 4, last_error = 'HTTP 502' WHERE id = $1", res.Effects[0].ID)
	require.NoError(t, err)
	require.NoError(t, store.NewStore(f.db.Schema).RaiseKeyWindowsClosing(ctx, f.db.Pool, "webhook", wh.Guarantees().KeyWindow-wh.Guarantees().KeyWindowMargin, time.Hour))
	require.Equal(t, 1, events("outboxd.effect.key_window_closing"), "raised once per window")
	ops.mu.Lock()
	var types []string
	for _, b := range ops.bodies {
		var body struct{ Type string }
		require.NoError(t, json.Unmarshal(b, &body))
		types = append(types, body.Type)
	}
	ops.mu.Unlock()
	require.ElementsMatch(t, []string{"outboxd.destination.breaker_open", "outboxd.effect.key_window_closing"}, types)
}
