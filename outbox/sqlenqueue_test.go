package outbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
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
	"github.com/outboxd/outboxd/providers/sendgrid/sendgridschema"
	"github.com/outboxd/outboxd/providers/stripe/stripeschema"
	"github.com/outboxd/outboxd/providers/webhook"
	"github.com/outboxd/outboxd/sideeffects"
	"github.com/outboxd/outboxd/sideeffects/sideeffectstest"
)

// sqlRow is one row outboxd_enqueue returns.
type sqlRow struct {
	EventID      uuid.UUID
	EventExisted bool
	EffectID     *uuid.UUID
	Kind         *string
	Key          *string
	Duplicate    *bool
}

// sqlEnqueue calls outboxd_enqueue(event, effects) in tx, as an
// application in another language would.
func sqlEnqueue(ctx context.Context, tx pgx.Tx, schema string, event, effects any) ([]sqlRow, error) {
	return sqlEnqueueWith(ctx, tx, schema, event, effects, false)
}

// sqlEnqueueWith is sqlEnqueue with outboxd_enqueue's carry argument.
func sqlEnqueueWith(ctx context.Context, tx pgx.Tx, schema string, event, effects any, carry bool) ([]sqlRow, error) {
	ev, err := json.Marshal(event)
	if err != nil {
		return nil, err
	}
	ef, err := json.Marshal(effects)
	if err != nil {
		return nil, err
	}
	rows, err := tx.Query(ctx, `SELECT * FROM `+schema+`.outboxd_enqueue($1::jsonb, $2::jsonb, carry => $3)`, ev, ef, carry)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (sqlRow, error) {
		var s sqlRow
		err := r.Scan(&s.EventID, &s.EventExisted, &s.EffectID, &s.Kind, &s.Key, &s.Duplicate)
		return s, err
	})
}

// orderInput is one order's event and effects: as outbox.Enqueue takes
// them, and as the JSON outboxd_enqueue takes.
func orderInput(id uuid.UUID, due time.Time) (outbox.Event, []outbox.Effect, map[string]any, []map[string]any) {
	refund := outbox.EffectOf("stripe.refund", stripeschema.RefundCreate{PaymentIntent: "pi_123", Amount: outbox.Ptr[int64](500)})
	refund.OrderingKey = "order:ord_42"
	email := outbox.EffectOf("email.receipt", sendgridschema.Payload{
		From: sendgridschema.Address{Email: "shop@example.com"}, To: []sendgridschema.Address{{Email: "ann@example.com"}},
		Subject: "Your refund", Text: "Refunded."})
	email.NotBefore = due
	hook := webhookEffect("webhook.order_refunded", `{"order": "ord_42", "amount": 500}`)
	hook.OrderingKey, hook.OnFailure = "partner:acme", outbox.SkipFailed
	ev := outbox.Event{ID: id, AggregateType: "order", AggregateID: "ord_42", Type: "order.refunded",
		Payload: json.RawMessage(`{"amount": 500, "currency": "eur"}`)}

	sqlEvent := map[string]any{"id": id, "aggregate_type": "order", "aggregate_id": "ord_42", "type": "order.refunded",
		"payload": json.RawMessage(ev.Payload)}
	sqlEffects := []map[string]any{
		{"kind": "stripe.refund", "provider": "stripe", "payload": refund.Payload, "ordering_key": "order:ord_42"},
		{"kind": "email.receipt", "provider": "sendgrid", "payload": email.Payload, "not_before": due.Format(time.RFC3339Nano)},
		{"kind": "webhook.order_refunded", "provider": "webhook", "payload": hook.Payload, "ordering_key": "partner:acme", "on_failure": "skip_failed"},
	}
	return ev, []outbox.Effect{refund, email, hook}, sqlEvent, sqlEffects
}

// written reads back everything an enqueue wrote in tx, but the times the
// database gave it and the ordering positions (drawn from a sequence).
func written(t *testing.T, tx pgx.Tx, schema string) (string, string, string) {
	t.Helper()
	ctx := context.Background()
	var events, effects, intake string
	require.NoError(t, tx.QueryRow(ctx, `SELECT coalesce(jsonb_agg(to_jsonb(e) - 'created_at' ORDER BY id), '[]')::text FROM `+schema+`.outbox_events e`).Scan(&events))
	require.NoError(t, tx.QueryRow(ctx, `SELECT coalesce(jsonb_agg(to_jsonb(s) - '{created_at,updated_at,ordering_seq}'::text[]
		|| jsonb_build_object('key', `+schema+`.outboxd_idempotency_key(source_id, kind)) ORDER BY id), '[]')::text FROM `+schema+`.side_effects s`).Scan(&effects))
	require.NoError(t, tx.QueryRow(ctx, `SELECT coalesce(jsonb_agg(to_jsonb(i) - 'watch' ORDER BY effect_id), '[]')::text FROM `+schema+`.outbox_intake i`).Scan(&intake))
	return events, effects, intake
}

// TestSQLEnqueueWritesWhatGoWrites: the same order through outbox.Enqueue
// (jobs by the dispatcher) and through outboxd_enqueue writes identical
// rows: event, effects with their ids, keys, schedule, ordering key and
// policy, and intake rows; and both report the same ids and keys.
func TestSQLEnqueueWritesWhatGoWrites(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	ob, err := outbox.New(outbox.Config{Schema: b.db.Schema, Jobs: outbox.JobsByDispatcher})
	require.NoError(t, err)
	id := uuid.New()
	ev, effects, sqlEvent, sqlEffects := orderInput(id, time.Now().Add(time.Hour).Truncate(time.Microsecond))

	var goRows [3]string
	var goRes *outbox.Result
	tx, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	goRes, err = ob.Enqueue(ctx, tx, ev, effects...)
	require.NoError(t, err)
	goRows[0], goRows[1], goRows[2] = written(t, tx, b.db.Schema)
	require.NoError(t, tx.Rollback(ctx))

	tx, err = b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	rows, err := sqlEnqueue(ctx, tx, b.db.Schema, sqlEvent, sqlEffects)
	require.NoError(t, err)
	events, effs, intake := written(t, tx, b.db.Schema)
	require.NoError(t, tx.Rollback(ctx))

	require.JSONEq(t, goRows[0], events, "outbox_events")
	require.JSONEq(t, goRows[1], effs, "side_effects")
	require.JSONEq(t, goRows[2], intake, "outbox_intake")
	require.Contains(t, effs, `"ordering_key": "partner:acme"`, "the comparison saw the effects")

	require.Len(t, rows, 3)
	for i, r := range rows {
		want := goRes.Effects[i]
		require.Equal(t, id, r.EventID)
		require.False(t, r.EventExisted)
		require.Equal(t, want.ID, *r.EffectID, want.Kind)
		require.Equal(t, want.Kind, *r.Kind)
		require.Equal(t, want.Key, *r.Key)
		require.Equal(t, store.Key(id, want.Kind), *r.Key)
		require.False(t, *r.Duplicate)
	}
}

// TestSQLAndGoReplaysAreDuplicates: a replay through either path of what
// the other committed is a duplicate that writes nothing; different
// content is a conflict either way (OB409 from SQL, ErrConflict from Go);
// a new effect added by a replay through SQL is written and reported new.
func TestSQLAndGoReplaysAreDuplicates(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	ob, err := outbox.New(outbox.Config{Schema: b.db.Schema, Jobs: outbox.JobsByDispatcher})
	require.NoError(t, err)
	due := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	intakeRows := func() int {
		var n int
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM `+b.db.Schema+`.outbox_intake`).Scan(&n))
		return n
	}

	// Go first, then SQL.
	goFirst := uuid.New()
	ev, effects, sqlEvent, sqlEffects := orderInput(goFirst, due)
	require.NoError(t, pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
		_, err := ob.Enqueue(ctx, tx, ev, effects...)
		return err
	}))
	events, effs, _ := b.counts(t)
	queued := intakeRows()
	require.NoError(t, pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
		rows, err := sqlEnqueue(ctx, tx, b.db.Schema, sqlEvent, sqlEffects)
		require.NoError(t, err)
		require.Len(t, rows, 3)
		for _, r := range rows {
			require.True(t, r.EventExisted)
			require.True(t, *r.Duplicate, *r.Kind)
		}
		return nil
	}))
	e2, f2, _ := b.counts(t)
	require.Equal(t, [2]int{events, effs}, [2]int{e2, f2}, "a replay writes no row")
	require.Equal(t, queued, intakeRows(), "a replay queues no second job")

	// SQL first, then Go.
	sqlFirst := uuid.New()
	ev, effects, sqlEvent, sqlEffects = orderInput(sqlFirst, due)
	require.NoError(t, pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
		_, err := sqlEnqueue(ctx, tx, b.db.Schema, sqlEvent, sqlEffects)
		return err
	}))
	queued = intakeRows()
	require.NoError(t, pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
		res, err := ob.Enqueue(ctx, tx, ev, effects...)
		require.NoError(t, err)
		require.True(t, res.Replay(), "outbox.Enqueue of what SQL wrote is a replay")
		return nil
	}))
	require.Equal(t, queued, intakeRows())

	// Conflicts, both ways.
	conflictSQL := func(event map[string]any, effects []map[string]any, kind string) {
		t.Helper()
		tx, err := b.db.Pool.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx) //nolint:errcheck
		_, err = sqlEnqueue(ctx, tx, b.db.Schema, event, effects)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr)
		require.Equal(t, "OB409", pgErr.Code, pgErr.Message)
		require.Equal(t, kind, pgErr.ColumnName)
	}
	changed := map[string]any{}
	for k, v := range sqlEvent {
		changed[k] = v
	}
	changed["payload"] = json.RawMessage(`{"amount": 999, "currency": "eur"}`)
	conflictSQL(changed, sqlEffects, "")
	otherURL := append([]map[string]any(nil), sqlEffects...)
	otherURL[2] = map[string]any{"kind": "webhook.order_refunded", "provider": "webhook", "ordering_key": "partner:acme", "on_failure": "skip_failed",
		"payload": json.RawMessage(`{"url": "https://hooks.example.com/other", "body": {}}`)}
	conflictSQL(sqlEvent, otherURL, "webhook.order_refunded")
	otherPolicy := append([]map[string]any(nil), sqlEffects...)
	otherPolicy[0] = map[string]any{"kind": "stripe.refund", "provider": "stripe", "payload": sqlEffects[0]["payload"]}
	conflictSQL(sqlEvent, otherPolicy, "stripe.refund")

	err = pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
		_, err := ob.Enqueue(ctx, tx, ev, webhookEffect("webhook.order_refunded", `{"changed": true}`))
		return err
	})
	require.ErrorIs(t, err, outbox.ErrConflict, "Go sees SQL's rows as its own")

	// A replay that adds an effect.
	require.NoError(t, pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
		rows, err := sqlEnqueue(ctx, tx, b.db.Schema, sqlEvent, append(sqlEffects[:1:1],
			map[string]any{"kind": "webhook.audit", "provider": "webhook", "payload": json.RawMessage(`{"url": "https://hooks.example.com/audit", "body": {"a": 1}}`)}))
		require.NoError(t, err)
		require.Len(t, rows, 2)
		require.True(t, *rows[0].Duplicate)
		require.False(t, *rows[1].Duplicate)
		require.Equal(t, store.EffectID(sqlFirst, "webhook.audit"), *rows[1].EffectID)
		return nil
	}))
	require.Equal(t, queued+1, intakeRows())

	// An event with no effects: one row, the effect columns null.
	require.NoError(t, pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
		rows, err := sqlEnqueue(ctx, tx, b.db.Schema, sqlEvent, nil)
		require.NoError(t, err)
		require.Equal(t, []sqlRow{{EventID: sqlFirst, EventExisted: true}}, rows)
		return nil
	}))
}

// TestSQLEnqueueRefusesBadInput: each invalid input raises OB400 naming
// the field (in the message and the error's COLUMN) and the fix, and
// nothing is written.
func TestSQLEnqueueRefusesBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	id := uuid.New()
	ev := map[string]any{"id": id, "type": "order.paid"}
	hook := func(fields map[string]any) map[string]any {
		e := map[string]any{"kind": "webhook.order_paid", "provider": "webhook", "payload": map[string]any{"url": "https://hooks.example.com/in", "body": map[string]any{}}}
		for k, v := range fields {
			e[k] = v
		}
		return e
	}
	big := strings.Repeat("x", 300<<10)
	many := make([]map[string]any, 101)
	for i := range many {
		many[i] = hook(map[string]any{"kind": fmt.Sprintf("webhook.n%d", i)})
	}
	cases := []struct {
		name    string
		event   any
		effects any
		field   string
		problem string
	}{
		{"event not an object", []int{1}, nil, "event", "a JSON object"},
		{"event field unknown", map[string]any{"id": id, "type": "t", "typo": 1}, nil, "event", "unknown field typo"},
		{"no id", map[string]any{"type": "order.paid"}, nil, "event.id", "required: a UUID"},
		{"bad id", map[string]any{"id": "ord_42", "type": "order.paid"}, nil, "event.id", "required: a UUID"},
		{"nil id", map[string]any{"id": uuid.Nil, "type": "order.paid"}, nil, "event.id", "required: a UUID"},
		{"no type", map[string]any{"id": id}, nil, "event.type", "required"},
		{"type not a string", map[string]any{"id": id, "type": 7}, nil, "event.type", "a JSON string, not number"},
		{"long aggregate", map[string]any{"id": id, "type": "t", "aggregate_id": strings.Repeat("a", 513)}, nil, "event.aggregate_id", "513 bytes, over the limit of 512"},
		{"event payload array", map[string]any{"id": id, "type": "t", "payload": []int{1}}, nil, "event.payload", "must be a JSON object, not array"},
		{"event payload too big", map[string]any{"id": id, "type": "t", "payload": map[string]any{"x": big}}, nil, "event.payload", "over the limit of 262144"},
		{"effects not an array", ev, map[string]any{"kind": "x"}, "effects", "a JSON array"},
		{"too many effects", ev, many, "effects", "101 effects, over the limit of 100"},
		{"effect field unknown", ev, []any{hook(map[string]any{"notbefore": "x"})}, "effects[0]", "unknown field notbefore"},
		{"no kind", ev, []any{hook(map[string]any{"kind": ""})}, "effects[0].kind", "required"},
		{"bad kind", ev, []any{hook(map[string]any{"kind": "order paid"})}, "effects[0].kind", "use letters, digits"},
		{"long kind", ev, []any{hook(map[string]any{"kind": strings.Repeat("k", 129)})}, "effects[0].kind", "129 characters, over the limit of 128"},
		{"repeated kind", ev, []any{hook(nil), hook(nil)}, "effects[1].kind", "repeats effects[0]"},
		{"no provider", ev, []any{hook(map[string]any{"provider": nil})}, "effects[0].provider", "required"},
		{"no payload", ev, []any{hook(map[string]any{"payload": nil})}, "effects[0].payload", "required: a JSON object"},
		{"payload a string", ev, []any{hook(map[string]any{"payload": "{}"})}, "effects[0].payload", "not string"},
		{"webhook without url", ev, []any{hook(map[string]any{"payload": map[string]any{"body": 1}})}, "effects[0].payload.url", "required"},
		{"webhook ftp url", ev, []any{hook(map[string]any{"payload": map[string]any{"url": "ftp://x", "body": 1}})}, "effects[0].payload.url", "required"},
		{"webhook without body", ev, []any{hook(map[string]any{"payload": map[string]any{"url": "https://x.example"}})}, "effects[0].payload.body", "required"},
		{"stripe without operation", ev, []any{hook(map[string]any{"provider": "stripe", "payload": map[string]any{"params": map[string]any{}}})}, "effects[0].payload.operation", "required"},
		{"sendgrid without to", ev, []any{hook(map[string]any{"provider": "sendgrid", "payload": map[string]any{"from": map[string]any{"email": "a@example.com"}}})}, "effects[0].payload.to", "at least one recipient"},
		{"not_before without offset", ev, []any{hook(map[string]any{"not_before": "2026-12-01 09:00"})}, "effects[0].not_before", "RFC 3339"},
		{"long ordering key", ev, []any{hook(map[string]any{"ordering_key": strings.Repeat("k", 257)})}, "effects[0].ordering_key", "257 bytes, over the limit of 256"},
		{"event ordering key", map[string]any{"id": id, "type": "t", "ordering_key": strings.Repeat("k", 257)}, nil, "event.ordering_key", "over the limit of 256"},
		{"unknown policy", ev, []any{hook(map[string]any{"on_failure": "ignore"})}, "effects[0].on_failure", "use block_key (the default) or skip_failed"},
		{"bad tenant", ev, []any{hook(map[string]any{"tenant": "acme corp"})}, "effects[0].tenant", "at most 128 letters, digits"},
		{"tenant not a string", ev, []any{hook(map[string]any{"tenant": 7})}, "effects[0].tenant", "a JSON string"},
		// Each of these raised a raw error whose DETAIL held the row.
		{"provider no queue name", ev, []any{hook(map[string]any{"provider": "Web Hook"})}, "effects[0].provider", "lower-case letters and digits"},
		{"provider too long", ev, []any{hook(map[string]any{"provider": strings.Repeat("p", 65)})}, "effects[0].provider", "at most 64"},
		{"not_before no time", ev, []any{hook(nil), hook(map[string]any{"kind": "webhook.later", "not_before": "2026-13-01T09:00:00Z"})}, "effects[1].not_before", "is no time"},
		{"not_before out of range", ev, []any{hook(map[string]any{"not_before": "99999-01-01T00:00:00Z"})}, "effects[0].not_before", "RFC 3339"},
		{"traceparent version ff", map[string]any{"id": id, "type": "t", "traceparent": "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}, nil, "event.traceparent", "a W3C traceparent"},
		{"traceparent zero trace id", map[string]any{"id": id, "type": "t", "traceparent": "00-00000000000000000000000000000000-00f067aa0ba902b7-01"}, nil, "event.traceparent", "a W3C traceparent"},
		{"traceparent zero span id", map[string]any{"id": id, "type": "t", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"}, nil, "event.traceparent", "a W3C traceparent"},
	}
	for _, c := range cases {
		tx, err := b.db.Pool.Begin(ctx)
		require.NoError(t, err)
		_, err = sqlEnqueue(ctx, tx, b.db.Schema, c.event, c.effects)
		require.NoError(t, tx.Rollback(ctx))
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr, c.name)
		require.Equal(t, "OB400", pgErr.Code, "%s: %s", c.name, pgErr.Message)
		require.Equal(t, c.field, pgErr.ColumnName, c.name)
		require.Contains(t, pgErr.Message, "invalid "+c.field+": ", c.name)
		require.Contains(t, pgErr.Message, c.problem, c.name)
		require.NotContains(t, pgErr.Detail, "hooks.example.com", "%s: no row, no payload, in the error", c.name)
	}
	events, effects, _ := b.counts(t)
	require.Zero(t, events+effects, "nothing written")
}

// TestSQLEnqueuedEffectsAreDispatched: effects written by outboxd_enqueue
// are dispatched like any other: sent once with their key, in order on
// their ordering key, and one whose payload the provider cannot send
// (checked in full at dispatch) fails with the reason, no request made.
func TestSQLEnqueuedEffectsAreDispatched(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	recv, err := fakes.NewReceiver(testSecret)
	require.NoError(t, err)
	t.Cleanup(recv.Close)
	loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	wh, err := webhook.New(webhook.Config{Secret: testSecret, AllowedNetworks: loopback, Timeout: 5 * time.Second})
	require.NoError(t, err)
	sideeffectstest.Start(t, b.db.Pool, sideeffects.Config{Schema: b.db.Schema, Providers: []providers.Provider{wh}})

	id := uuid.New()
	var effects []map[string]any
	for i := range 5 {
		effects = append(effects, map[string]any{"kind": fmt.Sprintf("webhook.step%d", i), "provider": "webhook", "ordering_key": "order:ord_7",
			"payload": map[string]any{"url": recv.URL + "/in", "body": map[string]any{"step": i}}})
	}
	effects = append(effects, map[string]any{"kind": "webhook.broken", "provider": "webhook",
		"payload": map[string]any{"url": recv.URL + "/broken", "body": 1, "headers": map[string]any{"Content-Type": "text/plain"}}})
	var rows []sqlRow
	require.NoError(t, pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
		rows, err = sqlEnqueue(ctx, tx, b.db.Schema, map[string]any{"id": id, "type": "order.paid"}, effects)
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

	var steps []string
	for _, d := range recv.Deliveries() {
		require.NotEqual(t, "/broken", d.Path, "no request for a payload the provider refuses")
		steps = append(steps, d.Key)
	}
	var want []string
	for _, r := range rows[:5] {
		want = append(want, *r.Key)
		e, err := st.Get(ctx, b.db.Pool, *r.EffectID)
		require.NoError(t, err)
		require.Equal(t, outboxtype.StateConfirmed, e.State)
	}
	require.Equal(t, want, steps, "each sent once, with its key, in order")
	broken, err := st.Get(ctx, b.db.Pool, *rows[5].EffectID)
	require.NoError(t, err)
	require.Equal(t, outboxtype.StateFailed, broken.State)
	require.NotNil(t, broken.LastError)
	require.Contains(t, *broken.LastError, "payload.headers")
}

// testSecret signs the test receiver's webhooks.
const testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// TestSQLAndGoEnqueueAtOnce: a Go enqueue of an event that a SQL
// transaction is writing waits for it and then reports a replay; a SQL
// enqueue waiting on a Go transaction with other content reports OB409.
func TestSQLAndGoEnqueueAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	ob, err := outbox.New(outbox.Config{Schema: b.db.Schema, Jobs: outbox.JobsByDispatcher})
	require.NoError(t, err)
	ev, effects, sqlEvent, sqlEffects := orderInput(uuid.New(), time.Now().Add(time.Hour).Truncate(time.Microsecond))

	first, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = sqlEnqueue(ctx, first, b.db.Schema, sqlEvent, sqlEffects)
	require.NoError(t, err)
	done := make(chan *outbox.Result)
	go func() {
		var res *outbox.Result
		_ = pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
			var err error
			res, err = ob.Enqueue(ctx, tx, ev, effects...)
			return err
		})
		done <- res
	}()
	waitForALockWaiter(t, b)
	require.NoError(t, first.Commit(ctx))
	res := <-done
	require.NotNil(t, res)
	require.True(t, res.Replay())

	ev2, effects2, sqlEvent2, _ := orderInput(uuid.New(), time.Now().Add(time.Hour).Truncate(time.Microsecond))
	first, err = b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = ob.Enqueue(ctx, first, ev2, effects2...)
	require.NoError(t, err)
	errs := make(chan error)
	go func() {
		errs <- pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
			_, err := sqlEnqueue(ctx, tx, b.db.Schema, sqlEvent2, []map[string]any{
				{"kind": "stripe.refund", "provider": "stripe", "payload": json.RawMessage(`{"operation": "refund.create", "params": {"payment_intent": "pi_999"}}`)}})
			return err
		})
	}()
	waitForALockWaiter(t, b)
	require.NoError(t, first.Commit(ctx))
	var pgErr *pgconn.PgError
	require.ErrorAs(t, <-errs, &pgErr)
	require.Equal(t, "OB409", pgErr.Code)
	events, effs, _ := b.counts(t)
	require.Equal(t, [2]int{2, 6}, [2]int{events, effs})
}

// waitForALockWaiter waits until a session of the test's database waits
// for a lock: the second transaction has reached the first one's rows.
func waitForALockWaiter(t *testing.T, b *testBundle) {
	t.Helper()
	require.Eventually(t, func() bool {
		var n int
		err := b.db.Pool.QueryRow(context.Background(),
			`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n)
		return err == nil && n > 0
	}, 10*time.Second, 5*time.Millisecond)
}

// TestGoAndSQLEnqueueAgreeOnEveryLimit holds outbox.Enqueue and the SQL
// function outboxd_enqueue to one table of limits: at each limit both
// accept, one past it both refuse and name the same field. It fails when
// either side's limit changes alone.
func TestGoAndSQLEnqueueAgreeOnEveryLimit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	// input is one enqueue, given to both paths. Payloads are written as
	// Postgres prints jsonb (", " and ": "), so that both count the same
	// bytes.
	type input struct {
		evType, aggType, aggID, evKey, evPayload string
		kinds                                    []string
		key, tenant, payload                     string
	}
	base := func() input {
		return input{evType: "order.paid", evPayload: `{}`, kinds: []string{"webhook.order_paid"},
			payload: `{"url": "https://hooks.example.com/in", "body": {}}`}
	}
	// sized returns a JSON object of exactly n bytes around s's prefix.
	sized := func(prefix, suffix string, n int) string {
		return prefix + strings.Repeat("x", n-len(prefix)-len(suffix)) + suffix
	}
	cases := []struct {
		name  string
		limit int
		field string
		at    func(n int) input
	}{
		{"effects per event", outbox.MaxEffects, "effects", func(n int) input {
			in := base()
			in.kinds = nil
			for i := range n {
				in.kinds = append(in.kinds, fmt.Sprintf("webhook.n%d", i))
			}
			return in
		}},
		{"kind length", outbox.MaxKindLength, "effects[0].kind", func(n int) input {
			in := base()
			in.kinds = []string{sized("k", "", n)}
			return in
		}},
		{"event type bytes", 512, "event.type", func(n int) input { in := base(); in.evType = sized("t", "", n); return in }},
		{"aggregate type bytes", 512, "event.aggregate_type", func(n int) input { in := base(); in.aggType = sized("o", "", n); return in }},
		{"aggregate id bytes", 512, "event.aggregate_id", func(n int) input { in := base(); in.aggID = sized("o", "", n); return in }},
		{"event payload bytes", outbox.DefaultMaxPayloadBytes, "event.payload", func(n int) input {
			in := base()
			in.evPayload = sized(`{"x": "`, `"}`, n)
			return in
		}},
		{"effect payload bytes", outbox.DefaultMaxPayloadBytes, "effects[0].payload", func(n int) input {
			in := base()
			in.payload = sized(`{"url": "https://hooks.example.com/in", "body": {"x": "`, `"}}`, n)
			return in
		}},
		{"ordering key bytes", outbox.MaxOrderingKeyLength, "effects[0].ordering_key", func(n int) input { in := base(); in.key = sized("k", "", n); return in }},
		{"event ordering key bytes", outbox.MaxOrderingKeyLength, "event.ordering_key", func(n int) input { in := base(); in.evKey = sized("k", "", n); return in }},
		{"tenant length", 128, "effects[0].tenant", func(n int) input { in := base(); in.tenant = sized("t", "", n); return in }},
	}
	goPath := func(in input) error {
		ev := outbox.Event{ID: uuid.New(), Type: in.evType, AggregateType: in.aggType, AggregateID: in.aggID,
			Payload: json.RawMessage(in.evPayload), OrderingKey: in.evKey}
		var effects []outbox.Effect
		for _, k := range in.kinds {
			effects = append(effects, outbox.Effect{Kind: k, Provider: "webhook", Payload: json.RawMessage(in.payload), OrderingKey: in.key, Tenant: in.tenant})
		}
		tx, err := b.db.Pool.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx) //nolint:errcheck
		_, err = b.ob.Enqueue(ctx, tx, ev, effects...)
		return err
	}
	sqlPath := func(in input) error {
		ev := map[string]any{"id": uuid.New(), "type": in.evType, "aggregate_type": in.aggType, "aggregate_id": in.aggID,
			"payload": json.RawMessage(in.evPayload), "ordering_key": in.evKey}
		var effects []map[string]any
		for _, k := range in.kinds {
			e := map[string]any{"kind": k, "provider": "webhook", "payload": json.RawMessage(in.payload), "ordering_key": in.key}
			if in.tenant != "" {
				e["tenant"] = in.tenant
			}
			effects = append(effects, e)
		}
		tx, err := b.db.Pool.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx) //nolint:errcheck
		_, err = sqlEnqueue(ctx, tx, b.db.Schema, ev, effects)
		return err
	}
	for _, c := range cases {
		require.NoError(t, goPath(c.at(c.limit)), "%s: Go at the limit (%d)", c.name, c.limit)
		require.NoError(t, sqlPath(c.at(c.limit)), "%s: SQL at the limit (%d)", c.name, c.limit)

		var verr *outbox.ValidationError
		require.ErrorAs(t, goPath(c.at(c.limit+1)), &verr, "%s: Go one past the limit", c.name)
		require.Equal(t, c.field, verr.Field, c.name)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, sqlPath(c.at(c.limit+1)), &pgErr, "%s: SQL one past the limit", c.name)
		require.Equal(t, "OB400", pgErr.Code, "%s: %s", c.name, pgErr.Message)
		require.Equal(t, c.field, pgErr.ColumnName, c.name)
	}
}
