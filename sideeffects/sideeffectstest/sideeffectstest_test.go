package sideeffectstest_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/testdb"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/sideeffects"
	"github.com/outboxd/outboxd/sideeffects/sideeffectstest"
)

// counter is an application's provider that counts its calls.
type counter struct{ calls atomic.Int32 }

func (*counter) Name() string                                  { return "counter" }
func (*counter) ValidatePayload(string, json.RawMessage) error { return nil }
func (*counter) Guarantees() providers.Guarantees {
	return providers.Guarantees{InDoubt: providers.AtLeastOnce}
}
func (c *counter) Send(context.Context, providers.Request) (providers.Result, error) {
	c.calls.Add(1)
	return providers.Result{Ref: "ok"}, nil
}

// TestStartDispatchesUntilTheTestEnds: what an application's test does
// with Start — enqueue, let the dispatcher fire the effect once, read it
// confirmed — and the dispatcher is stopped when the test that started it
// ends.
func TestStartDispatchesUntilTheTestEnds(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	p := &counter{}
	ob, err := outbox.New(outbox.Config{Schema: db.Schema, Providers: []providers.Validator{p}})
	require.NoError(t, err)
	op, err := sideeffects.NewOperator(db.Pool, sideeffects.OperatorConfig{Schema: db.Schema})
	require.NoError(t, err)

	var d *sideeffects.Dispatcher
	t.Run("the application's test", func(t *testing.T) {
		d = sideeffectstest.Start(t, db.Pool, sideeffects.Config{Schema: db.Schema, Providers: []providers.Provider{p}})
		var res *outbox.Result
		require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			res, err = ob.Enqueue(ctx, tx, outbox.Event{ID: uuid.New(), Type: "order.paid", Payload: json.RawMessage(`{}`)},
				outbox.Effect{Provider: "counter", Kind: "counter.ping", Payload: json.RawMessage(`{}`)})
			return err
		}))
		require.Eventually(t, func() bool {
			e, err := op.Get(ctx, res.Effects[0].ID)
			return err == nil && e.State == sideeffects.StateConfirmed
		}, 30*time.Second, 10*time.Millisecond)
		require.EqualValues(t, 1, p.calls.Load())
	})
	select {
	case <-d.Stopped():
	default:
		t.Fatal("the dispatcher still runs after the test that started it ended")
	}
}
