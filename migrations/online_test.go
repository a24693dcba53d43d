package migrations_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/fakes"
	"github.com/outboxd/outboxd/internal/testdb"
	"github.com/outboxd/outboxd/migrations"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/webhook"
	"github.com/outboxd/outboxd/sideeffects"
	"github.com/outboxd/outboxd/sideeffects/sideeffectstest"
)

const onlineSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// TestEffectsFromBeforeTheCarriedLayoutAreSentOnceAfterIt: a database an
// older outboxd wrote (version 39: effects as rows, waiting ones in the
// intake) is migrated to the carried layout while its effects are in every
// state; the dispatchers that start on it then send each waiting effect
// once with its key, never one that had ended, and send the effects a new
// application writes carried in their event, beside them.
func TestEffectsFromBeforeTheCarriedLayoutAreSentOnceAfterIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	s := db.Schema
	_, err := gooseFor(t, db).DownTo(ctx, 39)
	require.NoError(t, err)
	recv, err := fakes.NewReceiver(onlineSecret)
	require.NoError(t, err)
	t.Cleanup(recv.Close)

	// What an older outboxd left: per event, one effect in each ended
	// state and two waiting in the intake, as the default enqueue wrote
	// them. (A fired effect is the in-doubt policy's, tested with it.)
	type old struct {
		id    uuid.UUID
		key   string
		state string
	}
	var before []old
	for i := range 5 {
		ev := uuid.New()
		_, err := db.Pool.Exec(ctx, `INSERT INTO `+s+`.outbox_events (id, event_type, payload) VALUES ($1, 'order.paid', '{}')`, ev)
		require.NoError(t, err)
		for _, st := range []string{"pending", "pending", "confirmed", "failed", "cancelled"} {
			kind := fmt.Sprintf("webhook.%s_%d", st, len(before))
			body, _ := json.Marshal(map[string]any{"url": recv.URL + "/in", "body": map[string]any{"n": i}})
			var o old
			require.NoError(t, db.Pool.QueryRow(ctx, `
INSERT INTO `+s+`.side_effects (id, source_id, kind, provider, payload, state, attempts)
VALUES (`+s+`.outboxd_effect_id($1, $2), $1, $2, 'webhook', $3, $4, CASE WHEN $4 = 'pending' THEN 0 ELSE 1 END)
RETURNING id, `+s+`.outboxd_idempotency_key(source_id, kind), state`, ev, kind, body, st).Scan(&o.id, &o.key, &o.state))
			if st == "pending" {
				_, err := db.Pool.Exec(ctx, `INSERT INTO `+s+`.outbox_intake (effect_id, provider) VALUES ($1, 'webhook')`, o.id)
				require.NoError(t, err)
			}
			before = append(before, o)
		}
	}

	_, err = migrations.Up(ctx, db.Pool, s)
	require.NoError(t, err)
	wh, err := webhook.New(webhook.Config{Secret: onlineSecret, AllowedNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, Timeout: 5 * time.Second})
	require.NoError(t, err)
	for range 2 {
		sideeffectstest.Start(t, db.Pool, sideeffects.Config{Schema: s, Providers: []providers.Provider{wh}})
	}

	ob, err := outbox.New(outbox.Config{Schema: s, Jobs: outbox.EffectsByDispatcher,
		Providers: []providers.Validator{webhook.Schema{AllowedNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}}})
	require.NoError(t, err)
	var carried *outbox.Result
	require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		carried, err = ob.Enqueue(ctx, tx, outbox.Event{ID: uuid.New(), Type: "order.paid"},
			outbox.EffectOf("webhook.new_a", webhook.Payload{URL: recv.URL + "/in", Body: json.RawMessage(`{"new": 1}`)}),
			outbox.EffectOf("webhook.new_b", webhook.Payload{URL: recv.URL + "/in", Body: json.RawMessage(`{"new": 2}`)}))
		return err
	}))

	state := func(id uuid.UUID) string {
		var st string
		if err := db.Pool.QueryRow(ctx, `SELECT state FROM `+s+`.side_effects WHERE id = $1`, id).Scan(&st); err != nil {
			return err.Error()
		}
		return st
	}
	require.Eventually(t, func() bool {
		for _, o := range before {
			if o.state == "pending" && state(o.id) != "confirmed" {
				return false
			}
		}
		for _, e := range carried.Effects {
			if state(e.ID) != "confirmed" {
				return false
			}
		}
		return true
	}, 30*time.Second, 20*time.Millisecond, "every waiting effect and every carried one confirmed")

	sent := recv.ByID()
	for _, o := range before {
		if o.state == "pending" {
			require.Len(t, sent[o.key], 1, "waiting effect %s sent once, with its key", o.id)
			continue
		}
		require.Empty(t, sent[o.key], "%s effect %s never sent", o.state, o.id)
		require.Equal(t, o.state, state(o.id), "an ended effect stays as it was")
	}
	for _, e := range carried.Effects {
		require.Len(t, sent[e.Key], 1, "carried effect %s sent once, with its key", e.Kind)
	}
	require.Len(t, recv.Deliveries(), 10+len(carried.Effects), "nothing else was sent")
}
