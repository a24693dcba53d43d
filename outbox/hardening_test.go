package outbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/testdb"
	"github.com/outboxd/outboxd/outbox"
)

// orderedHook is a webhook effect on ordering key key, as Go and as the
// JSON outboxd_enqueue takes.
func orderedHook(key string) (outbox.Effect, map[string]any) {
	e := webhookEffect("webhook.step", `{"n": 1}`)
	e.OrderingKey = key
	return e, map[string]any{"kind": "webhook.step", "provider": "webhook", "payload": json.RawMessage(e.Payload), "ordering_key": key}
}

// TestOrderingLocksBelongToTheirSchemaAndKey: an open transaction that
// enqueued on an ordering key blocks enqueues on that key in its own
// schema only: not the same key in another outboxd schema, nor another key
// whose 32-bit hash is the same; by Go and by SQL.
func TestOrderingLocksBelongToTheirSchemaAndKey(t *testing.T) {
	t.Parallel()
	a, b := setup(t), setup(t)
	ctx := context.Background()
	var collide bool
	require.NoError(t, a.db.Pool.QueryRow(ctx, `SELECT hashtext('customer:108125') = hashtext('customer:22402')`).Scan(&collide))
	require.True(t, collide, "the two keys share a 32-bit hash")

	holder, err := a.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer holder.Rollback(ctx) //nolint:errcheck
	held, _ := orderedHook("customer:108125")
	_, err = a.ob.Enqueue(ctx, holder, outbox.Event{ID: uuid.New(), Type: "t"}, held)
	require.NoError(t, err)

	for _, tc := range []struct {
		name string
		b    *testBundle
		key  string
	}{
		{"the same key in another schema", b, "customer:108125"},
		{"a key with the same 32-bit hash", a, "customer:22402"},
	} {
		goEffect, sqlEffect := orderedHook(tc.key)
		err := pgx.BeginFunc(ctx, tc.b.db.Pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '2s'`); err != nil {
				return err
			}
			_, err := tc.b.ob.Enqueue(ctx, tx, outbox.Event{ID: uuid.New(), Type: "t"}, goEffect)
			return err
		})
		require.NoError(t, err, "Go: %s is not blocked", tc.name)
		err = pgx.BeginFunc(ctx, tc.b.db.Pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '2s'`); err != nil {
				return err
			}
			_, err := sqlEnqueue(ctx, tx, tc.b.db.Schema, map[string]any{"id": uuid.New(), "type": "t"}, []map[string]any{sqlEffect})
			return err
		})
		require.NoError(t, err, "SQL: %s is not blocked", tc.name)
	}

	// The same key in the same schema still waits for the holder.
	same, sqlSame := orderedHook("customer:108125")
	for _, enqueue := range []func(tx pgx.Tx) error{
		func(tx pgx.Tx) error {
			_, err := a.ob.Enqueue(ctx, tx, outbox.Event{ID: uuid.New(), Type: "t"}, same)
			return err
		},
		func(tx pgx.Tx) error {
			_, err := sqlEnqueue(ctx, tx, a.db.Schema, map[string]any{"id": uuid.New(), "type": "t"}, []map[string]any{sqlSame})
			return err
		},
	} {
		err = pgx.BeginFunc(ctx, a.db.Pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '100ms'`); err != nil {
				return err
			}
			return enqueue(tx)
		})
		require.ErrorContains(t, err, "lock timeout", "a key's enqueues are serialised")
	}
}

// TestTemporaryObjectsCannotReorderAChain: a session that creates its own
// temporary side_effects_ordering_seq cannot choose its effect's position
// in a chain: the trigger draws from outboxd's sequence, for a plain
// INSERT, outbox.Enqueue and outboxd_enqueue alike.
func TestTemporaryObjectsCannotReorderAChain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `CREATE TEMP SEQUENCE side_effects_ordering_seq MINVALUE -1000000 START -1000000`); err != nil {
			return err
		}
		goEffect, sqlEffect := orderedHook("customer:42")
		if _, err := b.ob.Enqueue(ctx, tx, outbox.Event{ID: uuid.New(), Type: "t"}, goEffect); err != nil {
			return err
		}
		_, err := sqlEnqueue(ctx, tx, b.db.Schema, map[string]any{"id": uuid.New(), "type": "t"}, []map[string]any{sqlEffect})
		return err
	})
	require.NoError(t, err)
	var lowest int64
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT min(ordering_seq) FROM `+b.db.Schema+`.side_effects`).Scan(&lowest))
	require.Positive(t, lowest, "every position comes from outboxd's own sequence")
}

// TestASquattedEffectIdIsAConflict: when another event's effect already
// holds the id an effect derives from its event and kind (a row written by
// hand or by another tool), outbox.Enqueue and outboxd_enqueue both report
// a conflict and write nothing; neither calls it a duplicate.
func TestASquattedEffectIdIsAConflict(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	victim, squatter := uuid.New(), uuid.New()
	hook := webhookEffect("webhook.order_paid", `{"n": 1}`)
	_, err := b.db.Pool.Exec(ctx, `INSERT INTO `+b.db.Schema+`.outbox_events (id, event_type, payload) VALUES ($1, 't', '{}')`, squatter)
	require.NoError(t, err)
	_, err = b.db.Pool.Exec(ctx, `INSERT INTO `+b.db.Schema+`.side_effects (id, source_id, kind, provider, payload)
		VALUES (`+b.db.Schema+`.outboxd_effect_id($1, 'webhook.order_paid'), $2, 'webhook.other', 'webhook', $3)`, victim, squatter, hook.Payload)
	require.NoError(t, err)

	err = pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
		_, err := b.ob.Enqueue(ctx, tx, outbox.Event{ID: victim, Type: "t"}, hook)
		return err
	})
	require.ErrorIs(t, err, outbox.ErrConflict, "Go")
	var ce *outbox.ConflictError
	require.ErrorAs(t, err, &ce)
	require.True(t, ce.IDHeld)
	require.Equal(t, "webhook.order_paid", ce.Kind)
	require.Contains(t, err.Error(), "held by another event's effect")
	err = pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
		_, err := sqlEnqueue(ctx, tx, b.db.Schema, map[string]any{"id": victim, "type": "t"},
			[]map[string]any{{"kind": "webhook.order_paid", "provider": "webhook", "payload": json.RawMessage(hook.Payload)}})
		return err
	})
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr, "SQL")
	require.Equal(t, "OB409", pgErr.Code)
	require.Contains(t, pgErr.Message, "held by another event's effect")
	events, effects, _ := b.counts(t)
	require.Equal(t, [2]int{1, 1}, [2]int{events, effects}, "nothing written")
}

// TestTheLeastPrivilegedSQLCaller: a role with exactly the grants
// docs/enqueue.md lists enqueues from SQL, ordered effects included, and
// replays; one without SELECT on the tables cannot (a replay compares the
// stored rows), and is refused before writing anything.
func TestTheLeastPrivilegedSQLCaller(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	s := b.db.Schema
	role, blind := s+"_enqueuer", s+"_blind"
	grants := []string{
		`GRANT USAGE ON SCHEMA ` + s + ` TO %[1]s`,
		`GRANT SELECT, INSERT ON ` + s + `.outbox_events, ` + s + `.side_effects, ` + s + `.outbox_intake TO %[1]s`,
		`GRANT SELECT, INSERT, UPDATE ON ` + s + `.outbox_order_wake TO %[1]s`,
		`GRANT USAGE ON SEQUENCE ` + s + `.side_effects_ordering_seq TO %[1]s`,
		// for {"subscribers": true}: the endpoints' routing columns only.
		`GRANT SELECT (id, tenant, event_types) ON ` + s + `.outboxd_endpoints TO %[1]s`,
	}
	for _, r := range []string{role, blind} {
		_, err := b.db.Pool.Exec(ctx, `CREATE ROLE `+r+` NOLOGIN`)
		require.NoError(t, err)
		t.Cleanup(func() {
			_, _ = b.db.Pool.Exec(context.Background(), `DROP OWNED BY `+r)
			_, _ = b.db.Pool.Exec(context.Background(), `DROP ROLE `+r)
		})
	}
	for _, g := range grants {
		_, err := b.db.Pool.Exec(ctx, fmt.Sprintf(g, role))
		require.NoError(t, err)
	}
	_, err := b.db.Pool.Exec(ctx, fmt.Sprintf(`GRANT USAGE ON SCHEMA `+s+` TO %[1]s; GRANT INSERT ON `+s+`.outbox_events, `+s+`.side_effects, `+s+`.outbox_intake TO %[1]s`, blind))
	require.NoError(t, err)

	id := uuid.New()
	_, hook := orderedHook("customer:7")
	as := func(r string, id uuid.UUID, effect map[string]any) error {
		return pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL ROLE `+r); err != nil {
				return err
			}
			_, err := sqlEnqueue(ctx, tx, s, map[string]any{"id": id, "type": "t"}, []map[string]any{effect})
			return err
		})
	}
	require.NoError(t, as(role, id, hook), "the listed grants enqueue")
	require.NoError(t, as(role, id, hook), "and replay")
	// An effect with a tenant joins its tenant's queue without a grant on it.
	tenanted := map[string]any{"kind": "webhook.step", "provider": "webhook", "payload": hook["payload"], "tenant": "acme"}
	require.NoError(t, as(role, uuid.New(), tenanted), "an effect with a tenant")
	var queued int
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM `+s+`.outboxd_tenant_queue WHERE tenant = 'acme'`).Scan(&queued))
	require.Equal(t, 1, queued)
	// Every grant but SELECT, and an effect without an ordering key.
	plain := map[string]any{"kind": "webhook.step", "provider": "webhook", "payload": hook["payload"]}
	var pgErr *pgconn.PgError
	require.ErrorAs(t, as(blind, uuid.New(), plain), &pgErr)
	require.Equal(t, "42501", pgErr.Code, "without SELECT: permission denied")
	events, effects, _ := b.counts(t)
	require.Equal(t, [2]int{2, 2}, [2]int{events, effects})

	// Fan-out to endpoints with those grants, which do not let the role
	// read an endpoint's headers (credentials) or URL.
	ep := uuid.New()
	_, err = b.db.Pool.Exec(ctx, `INSERT INTO `+s+`.outboxd_endpoints (id, url, event_types, headers)
		VALUES ($1, 'https://partner.example.com/hooks', '{t}', '{"Authorization": "Bearer sk_partner_secret"}')`, ep)
	require.NoError(t, err)
	require.NoError(t, as(role, uuid.New(), map[string]any{"subscribers": true}), "the listed grants fan out")
	var fanned int
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM `+s+`.side_effects WHERE kind = $1`, "endpoint:"+ep.String()).Scan(&fanned))
	require.Equal(t, 1, fanned)
	for _, q := range []string{`SELECT headers FROM ` + s + `.outboxd_endpoints`, `SELECT url FROM ` + s + `.outboxd_endpoints`} {
		err := pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL ROLE `+role); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, q)
			return err
		})
		require.ErrorAs(t, err, &pgErr, q)
		require.Equal(t, "42501", pgErr.Code, "%s: permission denied", q)
	}

	// carry => true: the event intake, and the effects column for a
	// replay of an event that still carries its effects.
	carrying := func(id uuid.UUID) error {
		return pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL ROLE `+role); err != nil {
				return err
			}
			_, err := sqlEnqueueWith(ctx, tx, s, map[string]any{"id": id, "type": "t"}, []map[string]any{plain}, true)
			return err
		})
	}
	carried := uuid.New()
	require.ErrorAs(t, carrying(carried), &pgErr)
	require.Equal(t, "42501", pgErr.Code, "without INSERT on outbox_event_intake")
	for _, g := range []string{`GRANT INSERT ON ` + s + `.outbox_event_intake TO %[1]s`, `GRANT UPDATE (effects) ON ` + s + `.outbox_events TO %[1]s`} {
		_, err := b.db.Pool.Exec(ctx, fmt.Sprintf(g, role))
		require.NoError(t, err)
	}
	require.NoError(t, carrying(carried), "the listed grants carry")
	require.NoError(t, carrying(carried), "and replay what is carried")
	var rows int
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM `+s+`.side_effects WHERE source_id = $1`, carried).Scan(&rows))
	require.Equal(t, 1, rows, "the replay wrote the carried effect out")
}

// FuzzSQLEnqueue: whatever JSON a caller passes outboxd_enqueue, it
// either enqueues or refuses with OB400 or OB409, naming a field and
// quoting no row: never a raw Postgres error carrying the payload. Its
// seeds run with every `go test`; `go test -fuzz FuzzSQLEnqueue ./outbox`
// explores further (against the test database).
func FuzzSQLEnqueue(f *testing.F) {
	id := uuid.New().String()
	hook := `{"kind": "webhook.x", "provider": "webhook", "payload": {"url": "https://hooks.example.com/in", "body": {"marker": "PAYLOADMARK"}}}`
	for _, seed := range [][2]string{
		{`{"id": "` + id + `", "type": "t"}`, `[` + hook + `]`},
		{`{"id": "` + id + `", "type": "t'); DROP TABLE side_effects; --"}`, `[]`},
		{`{"id": "` + id + `", "type": "t", "traceparent": "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}`, `[]`},
		{`{"id": "` + id + `", "type": "t"}`, `[{"kind": "k", "provider": "Web Hook", "payload": {"marker": "PAYLOADMARK"}}]`},
		{`{"id": "` + id + `", "type": "t"}`, `[{"kind": "k", "provider": "webhook", "payload": {"url": "https://x.example", "body": "PAYLOADMARK"}, "not_before": "2026-02-30T00:00:00Z"}]`},
		{`{"id": "` + id + `", "type": "t"}`, `[{"kind": "k", "provider": "webhook", "payload": {"url": "https://x.example", "body": 1}, "ordering_key": "` + strings.Repeat("k", 300) + `"}]`},
		{`{"id": "` + id + `", "type": "t", "payload": {"a": 1e400}}`, `[{"kind": "\u0000", "provider": "webhook", "payload": {}}]`},
		{`[]`, `{}`},
		{`{"id": "` + id + `", "type": "t", "aggregate_id": {"x": 1}}`, `[1, "two", null]`},
	} {
		f.Add(seed[0], seed[1])
	}
	db := testdb.New(f)
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, event, effects string) {
		if !utf8.ValidString(event+effects) || !json.Valid([]byte(event)) || !json.Valid([]byte(effects)) || strings.Contains(event+effects, `\u0000`) {
			return // not text jsonb takes (22021, 22P02, 22P05): refused before the function runs
		}
		tx, err := db.Pool.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx) //nolint:errcheck
		_, err = tx.Exec(ctx, `SELECT * FROM `+db.Schema+`.outboxd_enqueue($1::jsonb, $2::jsonb)`, event, effects)
		if err == nil {
			return
		}
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr)
		require.Contains(t, []string{"OB400", "OB409"}, pgErr.Code, "event %s effects %s: %s", event, effects, pgErr.Message)
		require.NotContains(t, pgErr.Detail, "PAYLOADMARK")
		require.NotContains(t, pgErr.Message, "PAYLOADMARK")
	})
}

// TestAGoRoleWithoutUpdateReplays: a role with the grants a SQL caller
// needs, and no UPDATE on outbox_events, enqueues through Go and replays
// what it enqueued: a replay writes nothing out unless the event still
// carries effects, so it updates nothing. (It ran an UPDATE on every
// replay, refused with 42501 for such a role.)
func TestAGoRoleWithoutUpdateReplays(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	s := db.Schema
	role := s + "_go_enqueuer"
	_, err := db.Pool.Exec(ctx, `CREATE ROLE `+role+` NOLOGIN`)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = db.Pool.Exec(context.Background(), `DROP OWNED BY `+role)
		_, _ = db.Pool.Exec(context.Background(), `DROP ROLE `+role)
	})
	_, err = db.Pool.Exec(ctx, fmt.Sprintf(`GRANT USAGE ON SCHEMA %[1]s TO %[2]s;
		GRANT SELECT, INSERT ON %[1]s.outbox_events, %[1]s.side_effects, %[1]s.outbox_intake TO %[2]s`, s, role))
	require.NoError(t, err)
	ob, err := outbox.New(outbox.Config{Schema: s})
	require.NoError(t, err)

	ev := orderPaid(uuid.New(), "10.00")
	enqueue := func() (*outbox.Result, error) {
		var res *outbox.Result
		err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL ROLE `+role); err != nil {
				return err
			}
			var err error
			res, err = ob.Enqueue(ctx, tx, ev, webhookEffect("webhook.order_paid", `{"n": 1}`))
			return err
		})
		return res, err
	}
	first, err := enqueue()
	require.NoError(t, err)
	require.False(t, first.Replay())
	again, err := enqueue()
	require.NoError(t, err, "the replay needs no UPDATE")
	require.True(t, again.Replay())
	require.Equal(t, first.Effects[0].ID, again.Effects[0].ID)
}
