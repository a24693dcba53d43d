package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/store"
	"github.com/outboxd/outboxd/internal/testdb"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/outbox/outboxtest"
)

// carrySetup is setup with Jobs: outbox.EffectsByDispatcher, and no
// dispatcher: every effect a test sees as a row was written out by the
// replay or cancel that needed it.
func carrySetup(t *testing.T) *testBundle {
	t.Helper()
	db := testdb.New(t)
	ob, err := outbox.New(outbox.Config{Jobs: outbox.EffectsByDispatcher, Schema: db.Schema})
	require.NoError(t, err)
	return &testBundle{db: db, ob: ob}
}

// carried returns how many effects the event still carries, how many
// events wait in outbox_event_intake and how many effects in
// outbox_intake.
func (b *testBundle) carried(t *testing.T, id uuid.UUID) (effects, eventIntake, intake int) {
	t.Helper()
	s := b.db.Schema
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT
		coalesce((SELECT jsonb_array_length(effects) FROM `+s+`.outbox_events WHERE id = $1), 0),
		(SELECT count(*) FROM `+s+`.outbox_event_intake),
		(SELECT count(*) FROM `+s+`.outbox_intake)`, id).Scan(&effects, &eventIntake, &intake))
	return
}

// Under EffectsByDispatcher the caller's transaction writes the event with
// its effects in it and one row naming the event: no effect rows, no
// per-effect intake rows. The result names each effect with the id and
// key it will have, and outboxtest sees them as enqueued.
func TestEffectsByDispatcherWritesTheEventCarryingItsEffects(t *testing.T) {
	t.Parallel()
	b := carrySetup(t)
	id := uuid.New()
	later := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)
	remind := webhookEffect("webhook.remind", `{"x": 2}`)
	remind.NotBefore = later
	res, err := b.enqueue(t, orderPaid(id, "100"), webhookEffect("webhook.a", `{"x": 1}`), remind)
	require.NoError(t, err)
	require.False(t, res.EventExisted)
	for _, e := range res.Effects {
		require.False(t, e.Duplicate)
		wantID, wantKey := store.EffectIDAndKey(id, e.Kind)
		require.Equal(t, wantID, e.ID)
		require.Equal(t, wantKey, e.Key)
	}
	events, effects, jobs := b.counts(t)
	require.Equal(t, [3]int{1, 0, 0}, [3]int{events, effects, jobs}, "the event only")
	carried, eventIntake, intake := b.carried(t, id)
	require.Equal(t, [3]int{2, 1, 0}, [3]int{carried, eventIntake, intake})

	got := outboxtest.RequireEnqueued(t, b.db.Pool, b.db.Schema, "webhook.a", `{"url": "https://hooks.example.com/in", "body": {"x": 1}}`)
	require.Equal(t, res.Effects[0].ID, got.ID)
	require.Equal(t, res.Effects[0].Key, got.IdempotencyKey)
	require.Equal(t, "pending", got.State)
	outboxtest.RequireNotEnqueued(t, b.db.Pool, b.db.Schema, "webhook.b")
	// The metrics and the web view's counts see them as pending, so that
	// an alert on the oldest pending effect fires when no dispatcher
	// takes them.
	gauges, err := store.NewStore(b.db.Schema).StateGauges(context.Background(), b.db.Pool)
	require.NoError(t, err)
	pending := map[string]int64{}
	for _, g := range gauges {
		require.Equal(t, "pending", string(g.State))
		pending[g.Kind] = g.Count
	}
	require.Equal(t, map[string]int64{"webhook.a": 1, "webhook.remind": 1}, pending)
	// So does outboxctl stats: the counts, and the oldest pending effect
	// that is due (the reminder is not).
	st, err := store.NewStore(b.db.Schema).Stats(context.Background(), b.db.Pool, 24*time.Hour)
	require.NoError(t, err)
	counted := map[string]int64{}
	for _, c := range st.Counts {
		require.Equal(t, "pending", string(c.State))
		counted[c.Kind] = c.Count
	}
	require.Equal(t, pending, counted)
	require.NotNil(t, st.OldestPending, "the carried webhook.a is due")
	var created time.Time
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT created_at FROM `+b.db.Schema+`.outbox_events WHERE id = $1`, id).Scan(&created))
	require.True(t, created.Equal(*st.OldestPending), "oldest pending %s, the event was created %s", st.OldestPending, created)

	// Effects with an ordering key are written with their event: their
	// place in the chain is taken at enqueue.
	ordered := webhookEffect("webhook.ordered", `{}`)
	ordered.OrderingKey = "order:1"
	_, err = b.enqueue(t, orderPaid(uuid.New(), "1"), ordered)
	require.NoError(t, err)
	_, effects, _ = b.counts(t)
	require.Equal(t, 1, effects)
}

// A replay of an event that still carries its effects compares with them
// as with rows: the same content is a duplicate, a changed effect a
// conflict that leaves the caller's transaction as it was, a new kind is
// added. Either way the replay writes the carried effects out, queued for
// a dispatcher, so nothing is written twice.
func TestEffectsByDispatcherReplays(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("the same content is a duplicate", func(t *testing.T) {
		t.Parallel()
		b := carrySetup(t)
		id := uuid.New()
		_, err := b.enqueue(t, orderPaid(id, "100"), webhookEffect("webhook.a", `{"x": 1}`), webhookEffect("webhook.b", `{}`))
		require.NoError(t, err)
		res, err := b.enqueue(t, orderPaid(id, "100"), webhookEffect("webhook.a", `{"x":1}`), webhookEffect("webhook.b", `{}`))
		require.NoError(t, err)
		require.True(t, res.EventExisted)
		require.True(t, res.Effects[0].Duplicate)
		require.True(t, res.Effects[1].Duplicate)
		events, effects, _ := b.counts(t)
		require.Equal(t, [2]int{1, 2}, [2]int{events, effects}, "written out once")
		carried, _, intake := b.carried(t, id)
		require.Equal(t, [2]int{0, 2}, [2]int{carried, intake}, "the rows wait in the intake for their jobs")
		var created, eventCreated time.Time
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT min(e.created_at), max(ev.created_at) FROM `+b.db.Schema+`.side_effects e
			JOIN `+b.db.Schema+`.outbox_events ev ON ev.id = e.source_id`).Scan(&created, &eventCreated))
		require.Equal(t, eventCreated, created, "an effect was created when its event was")
	})

	t.Run("a changed effect is a conflict that writes nothing", func(t *testing.T) {
		t.Parallel()
		b := carrySetup(t)
		id := uuid.New()
		_, err := b.enqueue(t, orderPaid(id, "100"), webhookEffect("webhook.a", `{"x": 1}`))
		require.NoError(t, err)
		tx, err := b.db.Pool.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx) //nolint:errcheck
		_, err = b.ob.Enqueue(ctx, tx, orderPaid(id, "100"), webhookEffect("webhook.a", `{"x": 2}`))
		var ce *outbox.ConflictError
		require.ErrorAs(t, err, &ce)
		require.Equal(t, "webhook.a", ce.Kind)
		require.NoError(t, tx.Commit(ctx))
		_, effects, _ := b.counts(t)
		require.Zero(t, effects, "the conflict rolled back its writing out too")
		carried, eventIntake, _ := b.carried(t, id)
		require.Equal(t, [2]int{1, 1}, [2]int{carried, eventIntake}, "still carried, still waiting for a dispatcher")
	})

	t.Run("a new kind is added beside the carried ones", func(t *testing.T) {
		t.Parallel()
		b := carrySetup(t)
		id := uuid.New()
		_, err := b.enqueue(t, orderPaid(id, "100"), webhookEffect("webhook.a", `{}`))
		require.NoError(t, err)
		res, err := b.enqueue(t, orderPaid(id, "100"), webhookEffect("webhook.a", `{}`), webhookEffect("webhook.b", `{}`))
		require.NoError(t, err)
		require.True(t, res.Effects[0].Duplicate)
		require.False(t, res.Effects[1].Duplicate)
		_, effects, _ := b.counts(t)
		require.Equal(t, 2, effects)
	})
}

// Cancel finds an effect its event still carries (writing it out in the
// caller's transaction), and retention never takes an event whose effects
// no dispatcher has written out, however old.
func TestEffectsByDispatcherCancelAndRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := carrySetup(t)
	id, kept := uuid.New(), uuid.New()
	_, err := b.enqueue(t, orderPaid(id, "100"), webhookEffect("webhook.remind", `{}`))
	require.NoError(t, err)
	_, err = b.enqueue(t, orderPaid(kept, "100"), webhookEffect("webhook.a", `{}`))
	require.NoError(t, err)

	tx, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	got, err := b.ob.Cancel(ctx, tx, id, "webhook.remind", "paid")
	require.NoError(t, err)
	require.Equal(t, outbox.Cancelled, got)
	require.NoError(t, tx.Commit(ctx))
	var state string
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT state FROM `+b.db.Schema+`.side_effects WHERE id = $1`,
		store.EffectID(id, "webhook.remind")).Scan(&state))
	require.Equal(t, "cancelled", state)

	_, err = b.db.Pool.Exec(ctx, `UPDATE `+b.db.Schema+`.outbox_events SET created_at = now() - interval '400 days'`)
	require.NoError(t, err)
	_, err = b.db.Pool.Exec(ctx, `UPDATE `+b.db.Schema+`.side_effects SET updated_at = now() - interval '400 days'`)
	require.NoError(t, err)
	res, err := store.NewStore(b.db.Schema).Purge(ctx, b.db.Pool, time.Now().Add(-24*time.Hour), false)
	require.NoError(t, err)
	require.Equal(t, int64(1), res.Effects, "the cancelled effect")
	var events []uuid.UUID
	rows, err := b.db.Pool.Query(ctx, `SELECT id FROM `+b.db.Schema+`.outbox_events`)
	require.NoError(t, err)
	for rows.Next() {
		var e uuid.UUID
		require.NoError(t, rows.Scan(&e))
		events = append(events, e)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []uuid.UUID{kept}, events, "the event whose effect is still carried stays")
	carried, _, _ := b.carried(t, kept)
	require.Equal(t, 1, carried)
}
