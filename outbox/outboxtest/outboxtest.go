// Package outboxtest helps an application test its own enqueueing, in the
// manner of rivertest: assert, inside the transaction under test, that it
// enqueued an effect of a kind with a payload, or that it did not.
//
//	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
//		if err := app.PayOrder(ctx, tx, "ord_42"); err != nil {
//			return err
//		}
//		outboxtest.RequireEnqueued(t, tx, schema, "webhook.order_paid", map[string]any{
//			"url": "https://hooks.example.com/orders", "body": map[string]any{"order": "ord_42"},
//		})
//		return nil
//	})
package outboxtest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/outboxd/outboxd/pgschema"
)

// DB is what the helpers query: the transaction under test (its own
// uncommitted rows are visible to it), a connection or a pool.
type DB interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Enqueued is an effect found by RequireEnqueued.
type Enqueued struct {
	ID             uuid.UUID
	EventID        uuid.UUID
	Kind           string
	Provider       string
	IdempotencyKey string
	Payload        json.RawMessage
	State          string
}

// RequireEnqueued fails the test unless db holds exactly one effect of kind
// whose payload equals payload as JSON (key order and spacing aside); a
// nil payload matches any. payload may be a json.RawMessage, a string of
// JSON or any value encoding/json marshals. schema is outboxd's schema
// ("" for search_path).
func RequireEnqueued(tb testing.TB, db DB, schema, kind string, payload any) *Enqueued {
	tb.Helper()
	found, err := effectsOf(db, schema, kind)
	if err != nil {
		tb.Fatalf("outboxtest: %v", err)
	}
	if payload == nil {
		if len(found) != 1 {
			tb.Fatalf("outboxtest: want 1 effect of kind %q, found %d", kind, len(found))
		}
		return &found[0]
	}
	want, err := asJSON(payload)
	if err != nil {
		tb.Fatalf("outboxtest: payload: %v", err)
	}
	var match []Enqueued
	for _, e := range found {
		if jsonEqual(e.Payload, want) {
			match = append(match, e)
		}
	}
	if len(match) != 1 {
		var got []string
		for _, e := range found {
			got = append(got, string(e.Payload))
		}
		tb.Fatalf("outboxtest: want 1 effect of kind %q with payload %s, found %d matching among %d of that kind: %s",
			kind, want, len(match), len(found), strings.Join(got, ", "))
	}
	return &match[0]
}

// RequireNotEnqueued fails the test if db holds any effect of kind.
func RequireNotEnqueued(tb testing.TB, db DB, schema, kind string) {
	tb.Helper()
	found, err := effectsOf(db, schema, kind)
	if err != nil {
		tb.Fatalf("outboxtest: %v", err)
	}
	if len(found) > 0 {
		tb.Fatalf("outboxtest: want no effect of kind %q, found %d (first: %s)", kind, len(found), found[0].Payload)
	}
}

func effectsOf(db DB, schema, kind string) ([]Enqueued, error) {
	if err := pgschema.Check(schema); err != nil {
		return nil, err
	}
	table, keyFunc := pgschema.Table(schema, "side_effects"), pgschema.Table(schema, "outboxd_idempotency_key")
	events, idFunc := pgschema.Table(schema, "outbox_events"), pgschema.Table(schema, "outboxd_effect_id")
	// With outbox.EffectsByDispatcher an event carries its effects until
	// a dispatcher writes their rows: they count as enqueued (pending).
	rows, err := db.Query(context.Background(), `
SELECT id, source_id, kind, provider, `+keyFunc+`(source_id, kind), payload, state FROM (
	SELECT id, source_id, kind, provider, payload, state, created_at FROM `+table+` WHERE kind = $1
	UNION ALL
	SELECT `+idFunc+`(ev.id, x.kind), ev.id, x.kind, x.provider, x.payload, 'pending', ev.created_at
	FROM `+events+` ev, jsonb_to_recordset(ev.effects) AS x(kind text, provider text, payload jsonb)
	WHERE ev.effects IS NOT NULL AND x.kind = $1) e
ORDER BY created_at, id`, kind)
	if err != nil {
		return nil, fmt.Errorf("read effects of kind %q: %w", kind, err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Enqueued, error) {
		var e Enqueued
		err := r.Scan(&e.ID, &e.EventID, &e.Kind, &e.Provider, &e.IdempotencyKey, &e.Payload, &e.State)
		return e, err
	})
}

func asJSON(v any) (json.RawMessage, error) {
	switch p := v.(type) {
	case json.RawMessage:
		return p, nil
	case []byte:
		return p, nil
	case string:
		return json.RawMessage(p), nil
	default:
		return json.Marshal(v)
	}
}

func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}
