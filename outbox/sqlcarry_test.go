package outbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/fakes"
	"github.com/outboxd/outboxd/internal/store"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/webhook"
	"github.com/outboxd/outboxd/sideeffects"
	"github.com/outboxd/outboxd/sideeffects/sideeffectstest"
)

// carriableInput is orderInput without ordering keys, so that its effects
// can ride in their event: as outbox.Enqueue takes them, and as JSON.
func carriableInput(id uuid.UUID, due time.Time) (outbox.Event, []outbox.Effect, map[string]any, []map[string]any) {
	ev, effects, sqlEvent, sqlEffects := orderInput(id, due)
	for i := range effects {
		effects[i].OrderingKey, effects[i].OnFailure = "", outbox.BlockKey
		delete(sqlEffects[i], "ordering_key")
		delete(sqlEffects[i], "on_failure")
	}
	return ev, effects, sqlEvent, sqlEffects
}

// carriedRows reads back what a carrying enqueue wrote in tx: the event
// with its carried effects read as the dispatcher reads them, the event
// intake, and how many effect rows and per-effect intake rows there are.
func carriedRows(t *testing.T, tx pgx.Tx, schema string) (events, carried, eventIntake string, effects, intake int) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, tx.QueryRow(ctx, `SELECT coalesce(jsonb_agg(to_jsonb(e) - '{created_at,effects}'::text[] ORDER BY id), '[]')::text
		FROM `+schema+`.outbox_events e`).Scan(&events))
	require.NoError(t, tx.QueryRow(ctx, `SELECT coalesce(jsonb_agg(to_jsonb(x) ORDER BY e.id, x.kind), '[]')::text
		FROM `+schema+`.outbox_events e, jsonb_to_recordset(e.effects) AS x(kind text, provider text, payload jsonb, not_before timestamptz)`).Scan(&carried))
	require.NoError(t, tx.QueryRow(ctx, `SELECT coalesce(jsonb_agg(event_id ORDER BY event_id), '[]')::text FROM `+schema+`.outbox_event_intake`).Scan(&eventIntake))
	require.NoError(t, tx.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+schema+`.side_effects), (SELECT count(*) FROM `+schema+`.outbox_intake)`).Scan(&effects, &intake))
	return
}

// TestSQLEnqueueCarriesWhatGoCarries: outboxd_enqueue(..., carry => true)
// writes what outbox.Enqueue writes under EffectsByDispatcher: the event
// carrying its effects and one row naming it in the event intake, no
// effect rows; both report the same ids and keys. Effects with an
// ordering key are written as rows, as in Go.
func TestSQLEnqueueCarriesWhatGoCarries(t *testing.T) {
	t.Parallel()
	b := carrySetup(t)
	ctx := context.Background()
	id := uuid.New()
	ev, effects, sqlEvent, sqlEffects := carriableInput(id, time.Now().Add(time.Hour).Truncate(time.Microsecond))

	tx, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	goRes, err := b.ob.Enqueue(ctx, tx, ev, effects...)
	require.NoError(t, err)
	goEvents, goCarried, goIntake, goEffects, goQueued := carriedRows(t, tx, b.db.Schema)
	require.NoError(t, tx.Rollback(ctx))

	tx, err = b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	rows, err := sqlEnqueueWith(ctx, tx, b.db.Schema, sqlEvent, sqlEffects, true)
	require.NoError(t, err)
	events, carried, intake, effs, queued := carriedRows(t, tx, b.db.Schema)
	require.NoError(t, tx.Rollback(ctx))

	require.JSONEq(t, goEvents, events, "outbox_events")
	require.JSONEq(t, goCarried, carried, "the effects the event carries")
	require.Contains(t, carried, `"not_before"`, "the comparison saw the effects")
	require.JSONEq(t, goIntake, intake, "outbox_event_intake")
	require.Equal(t, [4]int{0, 0, 0, 0}, [4]int{goEffects, goQueued, effs, queued}, "no effect rows, no per-effect intake rows")
	require.Len(t, rows, 3)
	for i, r := range rows {
		want := goRes.Effects[i]
		require.Equal(t, [2]any{id, false}, [2]any{r.EventID, r.EventExisted})
		require.Equal(t, want.ID, *r.EffectID, want.Kind)
		require.Equal(t, want.Kind, *r.Kind)
		require.Equal(t, want.Key, *r.Key)
		require.False(t, *r.Duplicate)
	}

	// Ordering keys: written as rows, with carry or without.
	_, _, sqlEvent, sqlEffects = orderInput(uuid.New(), time.Now().Add(time.Hour))
	require.NoError(t, pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
		_, err := sqlEnqueueWith(ctx, tx, b.db.Schema, sqlEvent, sqlEffects, true)
		require.NoError(t, err)
		_, carried, intake, effs, queued := carriedRows(t, tx, b.db.Schema)
		require.Equal(t, "[]", carried)
		require.Equal(t, "[]", intake)
		require.Equal(t, [2]int{3, 3}, [2]int{effs, queued})
		return nil
	}))
}

// TestSQLReplaysOfCarriedEffects: a replay through outboxd_enqueue of an
// event whose effects it still carries writes them out and compares with
// them, as outbox.Enqueue does: the same content is a duplicate that
// leaves one row per effect, different content a conflict. And Go's
// replay of an event SQL wrote carrying its effects is a duplicate.
func TestSQLReplaysOfCarriedEffects(t *testing.T) {
	t.Parallel()
	b := carrySetup(t)
	ctx := context.Background()
	due := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	conflict := func(event map[string]any, effects []map[string]any, carry bool) *pgconn.PgError {
		t.Helper()
		tx, err := b.db.Pool.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx) //nolint:errcheck
		_, err = sqlEnqueueWith(ctx, tx, b.db.Schema, event, effects, carry)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr)
		return pgErr
	}

	// Go carries, SQL replays.
	goFirst := uuid.New()
	ev, effects, sqlEvent, sqlEffects := carriableInput(goFirst, due)
	require.NoError(t, pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
		_, err := b.ob.Enqueue(ctx, tx, ev, effects...)
		return err
	}))
	for _, carry := range []bool{false, true} {
		other := append([]map[string]any(nil), sqlEffects...)
		other[2] = map[string]any{"kind": "webhook.order_refunded", "provider": "webhook",
			"payload": json.RawMessage(`{"url": "https://hooks.example.com/other", "body": {}}`)}
		pgErr := conflict(sqlEvent, other, carry)
		require.Equal(t, "OB409", pgErr.Code, pgErr.Message)
		require.Equal(t, "webhook.order_refunded", pgErr.ColumnName)
	}
	left, _, _ := b.carried(t, goFirst)
	require.Equal(t, 3, left, "a conflict undoes the writing out")
	require.NoError(t, pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
		rows, err := sqlEnqueueWith(ctx, tx, b.db.Schema, sqlEvent, sqlEffects, true)
		require.NoError(t, err)
		require.Len(t, rows, 3)
		for i, r := range rows {
			require.True(t, r.EventExisted)
			require.True(t, *r.Duplicate, *r.Kind)
			require.Equal(t, effects[i].Kind, *r.Kind)
		}
		return nil
	}))
	left, eventIntake, intake := b.carried(t, goFirst)
	require.Equal(t, [3]int{0, 1, 3}, [3]int{left, eventIntake, intake}, "written out by the replay, each in the intake")
	_, effs, _ := b.counts(t)
	require.Equal(t, 3, effs, "one row per effect")

	// SQL carries, Go replays.
	sqlFirst := uuid.New()
	ev, effects, sqlEvent, sqlEffects = carriableInput(sqlFirst, due)
	require.NoError(t, pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
		_, err := sqlEnqueueWith(ctx, tx, b.db.Schema, sqlEvent, sqlEffects, true)
		return err
	}))
	err := pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
		_, err := b.ob.Enqueue(ctx, tx, ev, effects[0], effects[1], webhookEffect("webhook.order_refunded", `{"changed": true}`))
		return err
	})
	require.ErrorIs(t, err, outbox.ErrConflict)
	require.NoError(t, pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
		res, err := b.ob.Enqueue(ctx, tx, ev, effects...)
		require.NoError(t, err)
		require.True(t, res.Replay(), "outbox.Enqueue of what SQL carried is a replay")
		return nil
	}))
	_, effs, _ = b.counts(t)
	require.Equal(t, 6, effs)
}

// TestSQLCarriedEffectsAreDispatched: effects outboxd_enqueue wrote
// carried by their event are written out by a dispatcher and sent once
// each, with the key the call returned; one whose payload the provider
// cannot send fails with the reason, no request made.
func TestSQLCarriedEffectsAreDispatched(t *testing.T) {
	t.Parallel()
	b := carrySetup(t)
	ctx := context.Background()
	recv, err := fakes.NewReceiver(testSecret)
	require.NoError(t, err)
	t.Cleanup(recv.Close)
	wh, err := webhook.New(webhook.Config{Secret: testSecret, AllowedNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, Timeout: 5 * time.Second})
	require.NoError(t, err)
	sideeffectstest.Start(t, b.db.Pool, sideeffects.Config{Schema: b.db.Schema, Providers: []providers.Provider{wh}})

	var effects []map[string]any
	for i := range 3 {
		effects = append(effects, map[string]any{"kind": fmt.Sprintf("webhook.step%d", i), "provider": "webhook",
			"payload": map[string]any{"url": recv.URL + "/in", "body": map[string]any{"step": i}}})
	}
	effects = append(effects, map[string]any{"kind": "webhook.broken", "provider": "webhook",
		"payload": map[string]any{"url": recv.URL + "/broken", "body": 1, "headers": map[string]any{"Content-Type": "text/plain"}}})
	var rows []sqlRow
	require.NoError(t, pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
		rows, err = sqlEnqueueWith(ctx, tx, b.db.Schema, map[string]any{"id": uuid.New(), "type": "order.paid"}, effects, true)
		return err
	}))
	st := store.NewStore(b.db.Schema)
	require.Eventually(t, func() bool {
		for _, r := range rows {
			e, err := st.Get(ctx, b.db.Pool, *r.EffectID)
			if err != nil || !e.State.Terminal() {
				return false
			}
		}
		return true
	}, 30*time.Second, 10*time.Millisecond)
	byKey := recv.ByID()
	for _, r := range rows[:3] {
		require.Len(t, byKey[*r.Key], 1, "sent once, with its key")
		e, err := st.Get(ctx, b.db.Pool, *r.EffectID)
		require.NoError(t, err)
		require.Equal(t, outboxtype.StateConfirmed, e.State)
	}
	broken, err := st.Get(ctx, b.db.Pool, *rows[3].EffectID)
	require.NoError(t, err)
	require.Equal(t, outboxtype.StateFailed, broken.State)
	require.Empty(t, byKey[*rows[3].Key])
}
