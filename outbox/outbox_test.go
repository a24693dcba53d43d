package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/engine"
	"github.com/outboxd/outboxd/internal/store"
	"github.com/outboxd/outboxd/internal/testdb"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/outbox/outboxmetrics"
	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/providers/stripe/stripeschema"
	"github.com/outboxd/outboxd/providers/webhook"
)

type testBundle struct {
	db *testdb.DB
	ob *outbox.Outbox
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	db := testdb.New(t)
	ob, err := outbox.New(outbox.Config{Jobs: outbox.JobsInTransaction, Schema: db.Schema})
	require.NoError(t, err)
	return &testBundle{db: db, ob: ob}
}

// counts returns the number of events, effects and dispatch jobs.
func (b *testBundle) counts(t *testing.T) (events, effects, jobs int) {
	t.Helper()
	ctx := context.Background()
	s := b.db.Schema
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM `+s+`.outbox_events),
		(SELECT count(*) FROM `+s+`.side_effects),
		(SELECT count(*) FROM `+s+`.river_job WHERE kind = $1)`, engine.JobKind).Scan(&events, &effects, &jobs))
	return
}

func webhookEffect(kind, body string) outbox.Effect {
	return outbox.EffectOf(kind, webhook.Payload{URL: "https://hooks.example.com/in", Body: json.RawMessage(body)})
}

func orderPaid(id uuid.UUID, amount string) outbox.Event {
	return outbox.Event{ID: id, AggregateType: "order", AggregateID: "ord_42", Type: "order.paid",
		Payload: json.RawMessage(`{"amount": ` + amount + `}`)}
}

func (b *testBundle) enqueue(t *testing.T, ev outbox.Event, effects ...outbox.Effect) (*outbox.Result, error) {
	t.Helper()
	ctx := context.Background()
	tx, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	res, err := b.ob.Enqueue(ctx, tx, ev, effects...)
	if err != nil {
		return nil, err
	}
	require.NoError(t, tx.Commit(ctx))
	return res, nil
}

func TestEnqueueCommitAndRollback(t *testing.T) {
	t.Parallel()

	t.Run("commit", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := outbox.EventID("order.paid", "ord_42")
		res, err := b.enqueue(t, orderPaid(id, "100"),
			webhookEffect("webhook.order_paid", `{"order": "ord_42"}`),
			webhookEffect("webhook.ledger", `{"order": "ord_42"}`))
		require.NoError(t, err)
		require.False(t, res.EventExisted)
		require.Len(t, res.Effects, 2)
		for _, e := range res.Effects {
			require.False(t, e.Duplicate)
			require.Equal(t, store.Key(id, e.Kind), e.Key)
		}
		events, effects, jobs := b.counts(t)
		require.Equal(t, [3]int{1, 2, 2}, [3]int{events, effects, jobs})

		ctx := context.Background()
		e, err := store.NewStore(b.db.Schema).Get(ctx, b.db.Pool, res.Effects[0].ID)
		require.NoError(t, err)
		require.Equal(t, outboxtype.StatePending, e.State)
		require.Equal(t, res.Effects[0].Key, e.IdempotencyKey)
		var queue string
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT queue FROM `+b.db.Schema+`.river_job
			WHERE args->>'effect_id' = $1`, e.ID.String()).Scan(&queue))
		require.Equal(t, "webhook", queue, "each provider has its own queue")
	})

	t.Run("rollback", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := context.Background()
		tx, err := b.db.Pool.Begin(ctx)
		require.NoError(t, err)
		_, err = b.ob.Enqueue(ctx, tx, orderPaid(uuid.New(), "1"), webhookEffect("webhook.a", `{}`))
		require.NoError(t, err)
		require.NoError(t, tx.Rollback(ctx))
		events, effects, jobs := b.counts(t)
		require.Equal(t, [3]int{0, 0, 0}, [3]int{events, effects, jobs})
	})
}

func TestEnqueueReplayAndConflict(t *testing.T) {
	t.Parallel()

	t.Run("same content is a duplicate without a second job", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := uuid.New()
		_, err := b.enqueue(t, orderPaid(id, "100"), webhookEffect("webhook.a", `{"x": 1}`))
		require.NoError(t, err)
		// Key order and whitespace differ; the JSON is the same.
		ev := orderPaid(id, "100")
		ev.Payload = json.RawMessage(`{ "amount" : 100 }`)
		res, err := b.enqueue(t, ev, webhookEffect("webhook.a", `{"x":1}`))
		require.NoError(t, err)
		require.True(t, res.EventExisted)
		require.True(t, res.Effects[0].Duplicate)
		events, effects, jobs := b.counts(t)
		require.Equal(t, [3]int{1, 1, 1}, [3]int{events, effects, jobs})
	})

	t.Run("a new kind on a replayed event is added", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := uuid.New()
		_, err := b.enqueue(t, orderPaid(id, "100"), webhookEffect("webhook.a", `{}`))
		require.NoError(t, err)
		res, err := b.enqueue(t, orderPaid(id, "100"), webhookEffect("webhook.a", `{}`), webhookEffect("webhook.b", `{}`))
		require.NoError(t, err)
		require.True(t, res.EventExisted)
		require.True(t, res.Effects[0].Duplicate)
		require.False(t, res.Effects[1].Duplicate)
		_, effects, jobs := b.counts(t)
		require.Equal(t, [2]int{2, 2}, [2]int{effects, jobs})
	})

	t.Run("an effect with an id of its own is a duplicate under that id", func(t *testing.T) {
		// As written before ids were derived from keys, or by hand in SQL.
		t.Parallel()
		b := setup(t)
		id := uuid.New()
		ev := orderPaid(id, "100")
		own := uuid.New()
		s := b.db.Schema
		_, err := b.db.Pool.Exec(context.Background(), `INSERT INTO `+s+`.outbox_events (id, aggregate_type, aggregate_id, event_type, payload)
			VALUES ($1, $2, $3, $4, $5)`, ev.ID, ev.AggregateType, ev.AggregateID, ev.Type, ev.Payload)
		require.NoError(t, err)
		a := webhookEffect("webhook.a", `{}`)
		_, err = b.db.Pool.Exec(context.Background(), `INSERT INTO `+s+`.side_effects (id, source_id, kind, provider, payload)
			VALUES ($1, $2, $3, $4, $5)`, own, id, a.Kind, a.Provider, a.Payload)
		require.NoError(t, err)
		res, err := b.enqueue(t, ev, a, webhookEffect("webhook.b", `{}`))
		require.NoError(t, err)
		require.True(t, res.Effects[0].Duplicate)
		require.Equal(t, own, res.Effects[0].ID, "the existing row's id, not the derived one")
		require.False(t, res.Effects[1].Duplicate)
		require.Equal(t, store.EffectID(id, "webhook.b"), res.Effects[1].ID)
		_, effects, jobs := b.counts(t)
		require.Equal(t, [2]int{2, 1}, [2]int{effects, jobs}, "only webhook.b is new")
	})

	t.Run("changed event payload is a conflict", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := uuid.New()
		_, err := b.enqueue(t, orderPaid(id, "100"), webhookEffect("webhook.a", `{}`))
		require.NoError(t, err)
		_, err = b.enqueue(t, orderPaid(id, "200"), webhookEffect("webhook.a", `{}`))
		require.ErrorIs(t, err, outbox.ErrConflict)
		var ce *outbox.ConflictError
		require.ErrorAs(t, err, &ce)
		require.Equal(t, id, ce.EventID)
		require.Empty(t, ce.Kind)
	})

	t.Run("changed effect payload is a conflict that writes nothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := context.Background()
		id := uuid.New()
		_, err := b.enqueue(t, orderPaid(id, "100"), webhookEffect("webhook.a", `{"x": 1}`))
		require.NoError(t, err)

		tx, err := b.db.Pool.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx) //nolint:errcheck
		_, err = b.ob.Enqueue(ctx, tx, orderPaid(id, "100"),
			webhookEffect("webhook.new", `{}`), webhookEffect("webhook.a", `{"x": 2}`))
		var ce *outbox.ConflictError
		require.ErrorAs(t, err, &ce)
		require.Equal(t, "webhook.a", ce.Kind)
		// The caller's transaction is still usable and commits nothing of
		// the rejected call.
		require.NoError(t, tx.Commit(ctx))
		_, effects, jobs := b.counts(t)
		require.Equal(t, [2]int{1, 1}, [2]int{effects, jobs})
	})
}

func TestEnqueueConcurrentSameEvent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()

	for round := range 20 {
		id := uuid.New()
		// Half the rounds race identical content, half differing content.
		amounts := []string{"1", "1"}
		if round%2 == 1 {
			amounts[1] = "2"
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		results := make([]error, 2)
		dups := make([]bool, 2)
		for g := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				tx, err := b.db.Pool.Begin(ctx)
				if err != nil {
					results[g] = err
					return
				}
				defer tx.Rollback(ctx) //nolint:errcheck
				<-start
				res, err := b.ob.Enqueue(ctx, tx, orderPaid(id, amounts[g]),
					webhookEffect("webhook.a", `{}`), webhookEffect("webhook.b", `{}`))
				if err != nil {
					results[g] = err
					return
				}
				dups[g] = res.EventExisted
				results[g] = tx.Commit(ctx)
			}()
		}
		close(start)
		wg.Wait()

		var ok, dup, conflict int
		for g, err := range results {
			switch {
			case err == nil && dups[g]:
				dup++
			case err == nil:
				ok++
			case errors.Is(err, outbox.ErrConflict):
				conflict++
			default:
				t.Fatalf("round %d: unexpected error: %v", round, err)
			}
		}
		require.Equal(t, 1, ok, "round %d: exactly one transaction writes the event", round)
		require.Equal(t, 1, dup+conflict)
		if round%2 == 0 {
			require.Equal(t, 1, dup, "identical content is reported duplicate")
		} else {
			require.Equal(t, 1, conflict, "different content is reported as a conflict")
		}
	}
	events, effects, jobs := b.counts(t)
	require.Equal(t, [3]int{20, 40, 40}, [3]int{events, effects, jobs})
}

func TestEnqueueRejectsBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	good := webhookEffect("webhook.a", `{}`)
	big := `{"url": "https://x.example", "body": "` + strings.Repeat("a", outbox.DefaultMaxPayloadBytes) + `"}`

	cases := []struct {
		name    string
		event   outbox.Event
		effects []outbox.Effect
		field   string
	}{
		{"missing event id", outbox.Event{Type: "t"}, []outbox.Effect{good}, "event.id"},
		{"missing event type", outbox.Event{ID: uuid.New()}, []outbox.Effect{good}, "event.type"},
		{"outboxd's own event type", outbox.Event{ID: uuid.New(), Type: "outboxd.effect.failed"}, []outbox.Effect{good}, "event.type"},
		{"event payload not an object", outbox.Event{ID: uuid.New(), Type: "t", Payload: json.RawMessage(`[1]`)}, nil, "event.payload"},
		{"event payload invalid JSON", outbox.Event{ID: uuid.New(), Type: "t", Payload: json.RawMessage(`{"a":`)}, nil, "event.payload"},
		{"NUL in event type", outbox.Event{ID: uuid.New(), Type: "a\x00b"}, nil, "event.type"},
		{"invalid UTF-8 in event type", outbox.Event{ID: uuid.New(), Type: "order.\xff"}, nil, "event.type"},
		{"invalid UTF-8 in aggregate id", outbox.Event{ID: uuid.New(), Type: "t", AggregateID: "ord_\xc3"}, nil, "event.aggregate_id"},
		{"lone surrogate in event payload", outbox.Event{ID: uuid.New(), Type: "t", Payload: json.RawMessage(`{"a": "\ud800"}`)}, nil, "event.payload"},
		{"empty kind", orderPaid(uuid.New(), "1"), []outbox.Effect{{Provider: "webhook", Payload: good.Payload}}, "effects[0].kind"},
		{"kind too long", orderPaid(uuid.New(), "1"), []outbox.Effect{webhookEffect(strings.Repeat("k", 129), `{}`)}, "effects[0].kind"},
		{"kind with odd characters", orderPaid(uuid.New(), "1"), []outbox.Effect{webhookEffect("drop table; --", `{}`)}, "effects[0].kind"},
		{"unknown provider", orderPaid(uuid.New(), "1"), []outbox.Effect{{Kind: "x", Provider: "carrier-pigeon", Payload: good.Payload}}, "effects[0].provider"},
		{"payload not an object", orderPaid(uuid.New(), "1"), []outbox.Effect{{Kind: "x", Provider: "webhook", Payload: json.RawMessage(`"hi"`)}}, "effects[0].payload"},
		{"payload invalid JSON", orderPaid(uuid.New(), "1"), []outbox.Effect{{Kind: "x", Provider: "webhook", Payload: json.RawMessage(`{`)}}, "effects[0].payload"},
		{"payload over the limit", orderPaid(uuid.New(), "1"), []outbox.Effect{{Kind: "x", Provider: "webhook", Payload: json.RawMessage(big)}}, "effects[0].payload"},
		{"payload fails provider schema", orderPaid(uuid.New(), "1"), []outbox.Effect{{Kind: "x", Provider: "webhook", Payload: json.RawMessage(`{"url": "ftp://x"}`)}}, "effects[0].payload"},
		{"duplicate kinds", orderPaid(uuid.New(), "1"), []outbox.Effect{good, good}, "effects[1].kind"},
		{"tenant with a space", orderPaid(uuid.New(), "1"), []outbox.Effect{{Kind: "x", Provider: "webhook", Payload: good.Payload, Tenant: "acme corp"}}, "effects[0].tenant"},
		{"event tenant too long", outbox.Event{ID: uuid.New(), Type: "t", Tenant: strings.Repeat("t", 129)}, []outbox.Effect{good}, "event.tenant"},
		{"stripe: unknown operation", orderPaid(uuid.New(), "1"), []outbox.Effect{{Kind: "stripe.x", Provider: "stripe", Payload: json.RawMessage(`{"operation": "charge.create", "params": {}}`)}}, "effects[0].payload"},
		{"stripe: refund without target", orderPaid(uuid.New(), "1"), []outbox.Effect{good, {Kind: "stripe.refund", Provider: "stripe", Payload: json.RawMessage(`{"operation": "refund.create", "params": {"amount": 5}}`)}}, "effects[1].payload"},
		{"stripe: amount as string", orderPaid(uuid.New(), "1"), []outbox.Effect{{Kind: "stripe.pi", Provider: "stripe", Payload: json.RawMessage(`{"operation": "payment_intent.create", "params": {"amount": "5", "currency": "eur"}}`)}}, "effects[0].payload"},
		{"sendgrid: no recipient", orderPaid(uuid.New(), "1"), []outbox.Effect{{Kind: "email.receipt", Provider: "sendgrid", Payload: json.RawMessage(`{"from": {"email": "s@example.com"}, "subject": "s", "text": "t"}`)}}, "effects[0].payload"},
		{"sendgrid: bad address", orderPaid(uuid.New(), "1"), []outbox.Effect{{Kind: "email.receipt", Provider: "sendgrid", Payload: json.RawMessage(`{"from": {"email": "s@example.com"}, "to": [{"email": "nope"}], "subject": "s", "text": "t"}`)}}, "effects[0].payload"},
	}
	for _, tc := range cases {
		tx, err := b.db.Pool.Begin(ctx)
		require.NoError(t, err)
		_, err = b.ob.Enqueue(ctx, tx, tc.event, tc.effects...)
		require.ErrorIs(t, err, outbox.ErrInvalid, tc.name)
		var ve *outbox.ValidationError
		require.ErrorAs(t, err, &ve, tc.name)
		require.Equal(t, tc.field, ve.Field, tc.name)
		// The transaction is untouched: it still accepts the caller's work.
		var one int
		require.NoError(t, tx.QueryRow(ctx, "SELECT 1").Scan(&one), tc.name)
		require.NoError(t, tx.Commit(ctx))
	}
	_, err := b.ob.Enqueue(ctx, nil, orderPaid(uuid.New(), "1"), good)
	require.ErrorIs(t, err, outbox.ErrInvalid)

	events, effects, jobs := b.counts(t)
	require.Equal(t, [3]int{0, 0, 0}, [3]int{events, effects, jobs})
}

func TestEventID(t *testing.T) {
	t.Parallel()
	a := outbox.EventID("order.paid", "ord_42", "1")
	require.Equal(t, a, outbox.EventID("order.paid", "ord_42", "1"), "deterministic")
	require.NotEqual(t, a, outbox.EventID("order.paid", "ord_42", "2"))
	require.NotEqual(t, outbox.EventID("s", "a:b"), outbox.EventID("s", "a", "b"), "parts are unambiguous")
	require.Equal(t, uuid.Version(5), a.Version())
}

func TestEnqueueMetrics(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	reg := prometheus.NewRegistry()
	m, err := outboxmetrics.New(reg)
	require.NoError(t, err)
	ob, err := outbox.New(outbox.Config{Jobs: outbox.JobsInTransaction, Schema: db.Schema, Observer: m})
	require.NoError(t, err)
	_, err = outboxmetrics.New(reg)
	require.Error(t, err, "a second registration is an error, not a panic")
	b := &testBundle{db: db, ob: ob}
	id := uuid.New()
	_, err = b.enqueue(t, orderPaid(id, "1"), webhookEffect("webhook.a", `{}`))
	require.NoError(t, err)
	_, err = b.enqueue(t, orderPaid(id, "1"), webhookEffect("webhook.a", `{}`))
	require.NoError(t, err)
	_, err = b.enqueue(t, orderPaid(id, "2"), webhookEffect("webhook.a", `{}`))
	require.ErrorIs(t, err, outbox.ErrConflict)
	_, err = b.enqueue(t, orderPaid(id, "1"), webhookEffect("", `{}`))
	require.ErrorIs(t, err, outbox.ErrInvalid)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP outboxd_enqueue_total Enqueue calls by result: new (wrote to the caller's transaction, committed or not), duplicate (replay, nothing written), conflict, invalid.
# TYPE outboxd_enqueue_total counter
outboxd_enqueue_total{result="conflict"} 1
outboxd_enqueue_total{result="duplicate"} 1
outboxd_enqueue_total{result="invalid"} 1
outboxd_enqueue_total{result="new"} 1
`), "outboxd_enqueue_total"))
}

func TestEnqueueHostileInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()

	t.Run("rejected with a typed error and no rows", func(t *testing.T) {
		tenMB := `{"url": "https://x.example", "body": "` + strings.Repeat("a", 10<<20) + `"}`
		cases := map[string]outbox.Effect{
			"10 MB payload":                {Kind: "webhook.a", Provider: "webhook", Payload: json.RawMessage(tenMB)},
			"unparseable URL":              {Kind: "webhook.a", Provider: "webhook", Payload: json.RawMessage(`{"url": "http://[::1", "body": {}}`)},
			"non-http URL":                 {Kind: "webhook.a", Provider: "webhook", Payload: json.RawMessage(`{"url": "file:///etc/passwd", "body": {}}`)},
			"URL with credentials":         {Kind: "webhook.a", Provider: "webhook", Payload: json.RawMessage(`{"url": "https://admin:pw@x.example/", "body": {}}`)},
			"private address URL":          {Kind: "webhook.a", Provider: "webhook", Payload: json.RawMessage(`{"url": "http://192.168.1.10/hook", "body": {}}`)},
			"metadata address URL":         {Kind: "webhook.a", Provider: "webhook", Payload: json.RawMessage(`{"url": "http://169.254.169.254/latest/meta-data", "body": {}}`)},
			"NUL in payload":               {Kind: "webhook.a", Provider: "webhook", Payload: json.RawMessage(`{"url": "https://x.example", "body": "a\u0000b"}`)},
			"NUL in kind":                  {Kind: "webhook.\x00", Provider: "webhook", Payload: json.RawMessage(`{"url": "https://x.example", "body": {}}`)},
			"unicode in kind":              {Kind: "webhook.ordér", Provider: "webhook", Payload: json.RawMessage(`{"url": "https://x.example", "body": {}}`)},
			"SQL in provider":              {Kind: "webhook.a", Provider: "webhook'; DROP TABLE side_effects; --", Payload: json.RawMessage(`{}`)},
			"payload is JSON string":       {Kind: "webhook.a", Provider: "webhook", Payload: json.RawMessage(`"{\"url\": \"https://x.example\"}"`)},
			"payload trailing bytes":       {Kind: "webhook.a", Provider: "webhook", Payload: json.RawMessage(`{"url": "https://x.example", "body": {}} {}`)},
			"payload invalid UTF-8":        {Kind: "webhook.a", Provider: "webhook", Payload: json.RawMessage("{\"url\": \"https://x.example\", \"body\": \"\xff\"}")},
			"lone high surrogate":          {Kind: "webhook.a", Provider: "webhook", Payload: json.RawMessage(`{"url": "https://x.example", "body": "\ud800"}`)},
			"lone low surrogate":           {Kind: "webhook.a", Provider: "webhook", Payload: json.RawMessage(`{"url": "https://x.example", "body": "a\udc00b"}`)},
			"keys differing in case":       {Kind: "webhook.a", Provider: "webhook", Payload: json.RawMessage(`{"url": "https://x.example", "URL": "http://127.0.0.1/", "body": {}}`)},
			"header name not a token":      {Kind: "webhook.a", Provider: "webhook", Payload: json.RawMessage(`{"url": "https://x.example", "body": {}, "headers": {"X(Tenant)": "a"}}`)},
			"header value with DEL":        {Kind: "webhook.a", Provider: "webhook", Payload: json.RawMessage(`{"url": "https://x.example", "body": {}, "headers": {"X-Tenant": "a\u007fb"}}`)},
			"header value with NUL escape": {Kind: "webhook.a", Provider: "webhook", Payload: json.RawMessage(`{"url": "https://x.example", "body": {}, "headers": {"X-Tenant": "a\u0001b"}}`)},
			"loopback short form":          {Kind: "webhook.a", Provider: "webhook", Payload: json.RawMessage(`{"url": "http://127.1/", "body": {}}`)},
			"loopback as decimal":          {Kind: "webhook.a", Provider: "webhook", Payload: json.RawMessage(`{"url": "http://2130706433/", "body": {}}`)},
			"loopback as hex":              {Kind: "webhook.a", Provider: "webhook", Payload: json.RawMessage(`{"url": "http://0x7f000001/", "body": {}}`)},
			"loopback as octal":            {Kind: "webhook.a", Provider: "webhook", Payload: json.RawMessage(`{"url": "http://0177.0.0.1/", "body": {}}`)},
			"loopback trailing dot":        {Kind: "webhook.a", Provider: "webhook", Payload: json.RawMessage(`{"url": "http://127.0.0.1./", "body": {}}`)},
			"localhost":                    {Kind: "webhook.a", Provider: "webhook", Payload: json.RawMessage(`{"url": "http://localhost:8080/", "body": {}}`)},
			"name under localhost":         {Kind: "webhook.a", Provider: "webhook", Payload: json.RawMessage(`{"url": "http://api.localhost/", "body": {}}`)},
			"single-label name":            {Kind: "webhook.a", Provider: "webhook", Payload: json.RawMessage(`{"url": "http://receiver:8080/", "body": {}}`)},
			"metadata name":                {Kind: "webhook.a", Provider: "webhook", Payload: json.RawMessage(`{"url": "http://metadata.google.internal/", "body": {}}`)},
			"mapped IPv6 loopback":         {Kind: "webhook.a", Provider: "webhook", Payload: json.RawMessage(`{"url": "http://[::ffff:127.0.0.1]/", "body": {}}`)},
		}
		for name, eff := range cases {
			tx, err := b.db.Pool.Begin(ctx)
			require.NoError(t, err)
			_, err = b.ob.Enqueue(ctx, tx, orderPaid(uuid.New(), "1"), eff)
			require.ErrorIs(t, err, outbox.ErrInvalid, name)
			require.NoError(t, tx.Commit(ctx), "%s: the transaction stays usable", name)
		}
		events, effects, jobs := b.counts(t)
		require.Equal(t, [3]int{0, 0, 0}, [3]int{events, effects, jobs})
	})

	t.Run("an escaped backslash before u0000 is text, not NUL", func(t *testing.T) {
		res, err := b.enqueue(t, orderPaid(uuid.New(), "1"), webhookEffect("webhook.path", `{"path": "C:\\u0000dir", "pair": "\ud83e\uddfe"}`))
		require.NoError(t, err)
		var got string
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT payload->'body'->>'path' FROM `+b.db.Schema+`.side_effects WHERE id = $1`, res.Effects[0].ID).Scan(&got))
		require.Equal(t, `C:\u0000dir`, got)
	})

	t.Run("SQL metacharacters and odd Unicode are stored verbatim", func(t *testing.T) {
		odd := "Robert'); DROP TABLE side_effects; -- \u202e\u0301🧾 \\x00 $1"
		body, _ := json.Marshal(map[string]string{"note": odd})
		ev := outbox.Event{ID: uuid.New(), Type: "order.paid", AggregateType: "order'--", AggregateID: odd,
			Payload: json.RawMessage(body)}
		res, err := b.enqueue(t, ev, webhookEffect("webhook.odd", string(body)))
		require.NoError(t, err)
		var gotAggregate, gotNote string
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT e.aggregate_id, s.payload->'body'->>'note'
			FROM `+b.db.Schema+`.outbox_events e JOIN `+b.db.Schema+`.side_effects s ON s.source_id = e.id
			WHERE s.id = $1`, res.Effects[0].ID).Scan(&gotAggregate, &gotNote))
		require.Equal(t, odd, gotAggregate)
		require.Equal(t, odd, gotNote)
		// A replay with the same odd content is still a duplicate.
		again, err := b.enqueue(t, ev, webhookEffect("webhook.odd", string(body)))
		require.NoError(t, err)
		require.True(t, again.Replay())
	})

	t.Run("aborted or finished transaction", func(t *testing.T) {
		tx, err := b.db.Pool.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, "SELECT 1/0")
		require.Error(t, err)
		_, err = b.ob.Enqueue(ctx, tx, orderPaid(uuid.New(), "1"), webhookEffect("webhook.a", `{}`))
		var ve *outbox.ValidationError
		require.ErrorAs(t, err, &ve)
		require.Equal(t, "tx", ve.Field)
		require.Contains(t, ve.Problem, "roll it back")
		require.NoError(t, tx.Rollback(ctx))

		tx, err = b.db.Pool.Begin(ctx)
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
		_, err = b.ob.Enqueue(ctx, tx, orderPaid(uuid.New(), "1"), webhookEffect("webhook.a", `{}`))
		require.Error(t, err, "a committed transaction cannot take an enqueue")
	})
}

func TestEnqueueFiftyGoroutinesOverlapping(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	const goroutines, perGoroutine, events = 50, 20, 10
	ids := make([]uuid.UUID, events)
	for i := range ids {
		ids[i] = outbox.EventID("overlap", fmt.Sprint(i))
	}
	type call struct {
		event  int
		amount string
		new    bool
		dup    bool
		err    error
	}
	calls := make(chan call, goroutines*perGoroutine)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perGoroutine {
				c := call{event: (g + i) % events, amount: "1"}
				if g%5 == 0 {
					c.amount = "2" // a fifth of the callers change the payload
				}
				err := pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
					res, err := b.ob.Enqueue(ctx, tx, orderPaid(ids[c.event], c.amount),
						webhookEffect("webhook.a", `{"n": 1}`), webhookEffect("webhook.b", `{"n": 2}`))
					if err == nil {
						c.new, c.dup = !res.EventExisted, res.EventExisted
					}
					return err
				})
				c.err = err
				calls <- c
			}
		}()
	}
	wg.Wait()
	close(calls)

	stored := map[int]string{}
	for i, id := range ids {
		var amount string
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT payload->>'amount' FROM `+b.db.Schema+`.outbox_events WHERE id = $1`, id).Scan(&amount))
		stored[i] = amount
	}
	created := map[int]int{}
	for c := range calls {
		switch {
		case c.err == nil && c.new:
			created[c.event]++
			require.Equal(t, stored[c.event], c.amount, "the writer's content is what is stored")
		case c.err == nil && c.dup:
			require.Equal(t, stored[c.event], c.amount, "a duplicate has the stored content")
		case errors.Is(c.err, outbox.ErrConflict):
			require.NotEqual(t, stored[c.event], c.amount, "a conflict has different content")
		default:
			t.Fatalf("event %d: unexpected outcome %+v", c.event, c)
		}
	}
	for i := range ids {
		require.Equal(t, 1, created[i], "event %d written exactly once", i)
	}
	events_, effects, jobs := b.counts(t)
	require.Equal(t, [3]int{events, 2 * events, 2 * events}, [3]int{events_, effects, jobs})
}

// TestTheDefaultEnqueueWritesOnlyTheContract: by default
// (JobsByDispatcher) the caller's transaction writes the event, its
// effects and their intake rows, and no River job; a River client is
// refused unless jobs go in the transaction.
func TestTheDefaultEnqueueWritesOnlyTheContract(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	ob, err := outbox.New(outbox.Config{Schema: b.db.Schema})
	require.NoError(t, err)
	intake := func() int {
		var n int
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM `+b.db.Schema+`.outbox_intake`).Scan(&n))
		return n
	}
	id := uuid.New()
	enqueue := func(effects ...outbox.Effect) *outbox.Result {
		var res *outbox.Result
		require.NoError(t, pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
			var err error
			res, err = ob.Enqueue(ctx, tx, orderPaid(id, "1"), effects...)
			return err
		}))
		return res
	}
	enqueue(webhookEffect("webhook.a", `{}`), webhookEffect("webhook.b", `{}`))
	events, effects, jobs := b.counts(t)
	require.Equal(t, [3]int{1, 2, 0}, [3]int{events, effects, jobs}, "no River job in the application's transaction")
	require.Equal(t, 2, intake(), "one intake row per effect")

	res := enqueue(webhookEffect("webhook.a", `{}`), webhookEffect("webhook.c", `{}`))
	require.True(t, res.Effects[0].Duplicate)
	require.False(t, res.Effects[1].Duplicate)
	require.Equal(t, 3, intake(), "a replay queues only the new effect")

	// Rolled back: nothing queued.
	tx, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = ob.Enqueue(ctx, tx, orderPaid(uuid.New(), "1"), webhookEffect("webhook.a", `{}`))
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	require.Equal(t, 3, intake())

	_, err = outbox.New(outbox.Config{Jobs: 7})
	require.ErrorContains(t, err, "Config.Jobs")

	rc, err := river.NewClient(riverpgxv5.New(nil), &river.Config{Schema: b.db.Schema})
	require.NoError(t, err)
	_, err = outbox.New(outbox.Config{Schema: b.db.Schema, River: rc})
	require.ErrorContains(t, err, "Config.River")
	_, err = outbox.New(outbox.Config{Schema: b.db.Schema, River: rc, Jobs: outbox.JobsInTransaction})
	require.NoError(t, err)
}

// TestEveryWayAnEffectArrivesMovesTheIntakeWatch: an idle dispatcher reads
// the intake only when its watch sequence moves (or after a longer
// interval), so every way an effect reaches the dispatchers must move it:
// the intake from Go and from SQL, an ordering key's wake, a tenant's
// queue. A rolled-back enqueue may move it too (it only makes them look).
func TestEveryWayAnEffectArrivesMovesTheIntakeWatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	ob, err := outbox.New(outbox.Config{Schema: b.db.Schema, Jobs: outbox.JobsByDispatcher})
	require.NoError(t, err)
	watch := func() int64 {
		var v int64
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM `+b.db.Schema+`.outbox_intake_watch`).Scan(&v))
		return v
	}
	moves := func(name string, enqueue func(tx pgx.Tx) error) {
		t.Helper()
		before := watch()
		require.NoError(t, pgx.BeginFunc(ctx, b.db.Pool, enqueue), name)
		require.Greater(t, watch(), before, "%s moves the watch", name)
	}
	moves("an effect from Go", func(tx pgx.Tx) error {
		_, err := ob.Enqueue(ctx, tx, orderPaid(uuid.New(), "1"), webhookEffect("webhook.a", `{}`))
		return err
	})
	moves("an ordered effect", func(tx pgx.Tx) error {
		e := webhookEffect("webhook.a", `{}`)
		e.OrderingKey = "order-1"
		_, err := ob.Enqueue(ctx, tx, orderPaid(uuid.New(), "1"), e)
		return err
	})
	moves("a tenant's effect", func(tx pgx.Tx) error {
		e := webhookEffect("webhook.a", `{}`)
		e.Tenant = "acme"
		_, err := ob.Enqueue(ctx, tx, orderPaid(uuid.New(), "1"), e)
		return err
	})
	moves("an effect from SQL", func(tx pgx.Tx) error {
		_, err := sqlEnqueue(ctx, tx, b.db.Schema,
			map[string]any{"id": uuid.New(), "type": "order.paid"},
			[]map[string]any{{"kind": "webhook.a", "provider": "webhook", "payload": map[string]any{"url": "https://hooks.example/x", "body": map[string]any{}}}})
		return err
	})
	carrying, err := outbox.New(outbox.Config{Schema: b.db.Schema, Jobs: outbox.EffectsByDispatcher})
	require.NoError(t, err)
	moves("an event carrying its effects", func(tx pgx.Tx) error {
		_, err := carrying.Enqueue(ctx, tx, orderPaid(uuid.New(), "1"), webhookEffect("webhook.a", `{}`), webhookEffect("webhook.b", `{}`))
		return err
	})
	var n, events int
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+b.db.Schema+`.outbox_intake) + (SELECT count(*) FROM `+b.db.Schema+`.outboxd_tenant_queue),
		(SELECT count(*) FROM `+b.db.Schema+`.outbox_event_intake)`).Scan(&n, &events))
	require.Equal(t, [2]int{4, 1}, [2]int{n, events}, "each effect, or the event carrying it, is queued for the dispatchers")
}

func TestWebhookAllowedNetworksKeepsTheOtherProviders(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	ob, err := outbox.New(outbox.Config{Jobs: outbox.JobsInTransaction, Schema: b.db.Schema,
		WebhookAllowedNetworks: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
	require.NoError(t, err)
	err = pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
		_, err := ob.Enqueue(ctx, tx, orderPaid(uuid.New(), "1"),
			outbox.Effect{Kind: "webhook.internal", Provider: "webhook", Payload: json.RawMessage(`{"url": "http://10.1.2.3/hook", "body": {}}`)},
			outbox.EffectOf("stripe.refund", stripeschema.RefundCreate{PaymentIntent: "pi_1"}))
		return err
	})
	require.NoError(t, err, "the allowed network is accepted and Stripe is still known")
	err = pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
		_, err := ob.Enqueue(ctx, tx, orderPaid(uuid.New(), "1"),
			outbox.Effect{Kind: "webhook.internal", Provider: "webhook", Payload: json.RawMessage(`{"url": "http://192.168.1.1/hook", "body": {}}`)})
		return err
	})
	require.ErrorIs(t, err, outbox.ErrInvalid, "other private networks stay refused")
}

// TestJobsByDispatcherNotifiesOnlyWhenAsked checks that Enqueue under
// JobsByDispatcher leaves NOTIFY (and the commit-time lock it takes) out of
// the application's transaction unless NotifyDispatchers is set.
// Notifications arrive in commit order, so a marker sent after the
// application's commit is the first one a listener sees when the
// application sent none.
func TestJobsByDispatcherNotifiesOnlyWhenAsked(t *testing.T) {
	t.Parallel()
	for _, notify := range []bool{false, true} {
		t.Run(fmt.Sprintf("NotifyDispatchers=%t", notify), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ob, err := outbox.New(outbox.Config{Schema: b.db.Schema, Jobs: outbox.JobsByDispatcher, NotifyDispatchers: notify})
			require.NoError(t, err)
			first := firstNotification(t, b, ob, false)
			if notify {
				require.Equal(t, outbox.IntakeChannelForTests, first, "the dispatchers are woken at commit")
			} else {
				require.Equal(t, "test_marker", first, "no NOTIFY in the application's transaction")
			}
		})
	}
}

// TestWakeDispatchersAfterCommit: with the effects in the intake, a wake-up
// sent after the commit, in a statement of its own, reaches the
// dispatchers' channel; with jobs in the transaction there is nothing to
// wake (River's insert did).
func TestWakeDispatchersAfterCommit(t *testing.T) {
	t.Parallel()
	for _, jobs := range []outbox.JobInsertion{outbox.JobsByDispatcher, outbox.JobsInTransaction} {
		t.Run(fmt.Sprintf("jobs=%d", jobs), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ob, err := outbox.New(outbox.Config{Schema: b.db.Schema, Jobs: jobs})
			require.NoError(t, err)
			first := firstNotification(t, b, ob, true)
			if jobs == outbox.JobsByDispatcher {
				require.Equal(t, outbox.IntakeChannelForTests, first, "woken after the commit")
			} else {
				require.Equal(t, "test_marker", first, "nothing to wake: the jobs are River's")
			}
		})
	}
}

// firstNotification enqueues one effect through ob and commits (then, with
// wake, calls WakeDispatchers), sends a marker notification, and returns
// the channel of the first notification of this schema a listener hears.
// Notifications arrive in commit order, so it is the marker's when no
// wake-up was sent.
func firstNotification(t *testing.T, b *testBundle, ob *outbox.Outbox, wake bool) string {
	t.Helper()
	ctx := context.Background()
	listener, err := b.db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer listener.Release()
	_, err = listener.Exec(ctx, "LISTEN "+outbox.IntakeChannelForTests+"; LISTEN test_marker")
	require.NoError(t, err)
	defer listener.Exec(ctx, "UNLISTEN *") //nolint:errcheck // the pool resets it

	require.NoError(t, pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
		_, err := ob.Enqueue(ctx, tx, orderPaid(uuid.New(), "1"), webhookEffect("webhook.a", `{}`))
		return err
	}))
	if wake {
		require.NoError(t, ob.WakeDispatchers(ctx, b.db.Pool))
	}
	_, err = b.db.Pool.Exec(ctx, "SELECT pg_notify('test_marker', $1)", b.db.Schema)
	require.NoError(t, err)

	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// Other tests wake the same channel and send the same marker, running
	// in parallel: only this schema's notifications (the payload) count.
	first, err := listener.Conn().WaitForNotification(wctx)
	for err == nil && first.Payload != b.db.Schema {
		first, err = listener.Conn().WaitForNotification(wctx)
	}
	require.NoError(t, err)
	return first.Channel
}
