package outboxtest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/testdb"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/outbox/outboxtest"
)

// fatal records a helper's failure instead of ending the test.
type fatal struct {
	testing.TB
	msg string
}

type stop struct{}

func (f *fatal) Helper() {}
func (f *fatal) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	panic(stop{})
}

func failure(fn func(tb testing.TB)) (msg string) {
	f := &fatal{}
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(stop); !ok {
				panic(r)
			}
			msg = f.msg
		}
	}()
	fn(f)
	return ""
}

func TestRequireEnqueuedInsideTheTransaction(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	ob, err := outbox.New(outbox.Config{Jobs: outbox.JobsInTransaction, Schema: db.Schema})
	require.NoError(t, err)
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	_, err = ob.Enqueue(ctx, tx, outbox.Event{ID: uuid.New(), Type: "order.paid"}, outbox.Effect{
		Kind: "webhook.order_paid", Provider: "webhook",
		Payload: json.RawMessage(`{"url": "https://hooks.example.com/orders", "body": {"order": "ord_42"}}`)})
	require.NoError(t, err)

	e := outboxtest.RequireEnqueued(t, tx, db.Schema, "webhook.order_paid", map[string]any{
		"body": map[string]any{"order": "ord_42"}, "url": "https://hooks.example.com/orders"})
	require.Equal(t, "webhook", e.Provider)
	require.Equal(t, "pending", e.State)
	outboxtest.RequireEnqueued(t, tx, db.Schema, "webhook.order_paid", nil)
	outboxtest.RequireNotEnqueued(t, tx, db.Schema, "email.receipt")

	msg := failure(func(tb testing.TB) {
		outboxtest.RequireEnqueued(tb, tx, db.Schema, "webhook.order_paid", `{"url": "https://hooks.example.com/orders", "body": {"order": "ord_43"}}`)
	})
	require.Contains(t, msg, "found 0 matching among 1", "a different payload fails")
	msg = failure(func(tb testing.TB) { outboxtest.RequireNotEnqueued(tb, tx, db.Schema, "webhook.order_paid") })
	require.Contains(t, msg, "want no effect")

	// Other transactions do not see it until commit.
	require.Contains(t, failure(func(tb testing.TB) {
		outboxtest.RequireEnqueued(tb, db.Pool, db.Schema, "webhook.order_paid", nil)
	}), "found 0")
	require.NoError(t, tx.Commit(ctx))
	outboxtest.RequireEnqueued(t, db.Pool, db.Schema, "webhook.order_paid", nil)
}
