package engine_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/store"
	"github.com/outboxd/outboxd/internal/testdb"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/providers/webhook"
)

// TestClaimsWriteNoIndexEntries checks that the transitions of a live
// effect (claim, release after a refusal, an in-doubt record, a re-claim)
// are HOT updates, which write no index entry, while leaving the live set
// (confirm) is not. Postgres counts both, per transaction, in
// pg_stat_xact_user_tables.
func TestClaimsWriteNoIndexEntries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	ob, err := outbox.New(outbox.Config{Jobs: outbox.JobsInTransaction, Schema: db.Schema})
	require.NoError(t, err)
	var res *outbox.Result
	require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		res, err = ob.Enqueue(ctx, tx, outbox.Event{ID: outbox.EventID("test.hot", "1"), Type: "order.paid"},
			outbox.EffectOf("webhook.order_paid", webhook.Payload{URL: "https://hooks.example.com/x", Body: json.RawMessage(`{}`)}))
		return err
	}))
	id := res.Effects[0].ID
	st := store.NewStore(db.Schema)

	// updates returns the updates and HOT updates of side_effects so far
	// in tx.
	updates := func(tx pgx.Tx) (all, hot int64) {
		require.NoError(t, tx.QueryRow(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables
			WHERE schemaname = $1 AND relname = 'side_effects'`, db.Schema).Scan(&all, &hot))
		return all, hot
	}

	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // after commit, a no-op
	e, err := st.Claim(ctx, tx, id, outboxtype.StatePending)
	require.NoError(t, err)
	require.NotNil(t, e)
	ok, err := st.Release(ctx, tx, id, "retryable: HTTP 429", time.Now(), true)
	require.NoError(t, err)
	require.True(t, ok)
	e, err = st.Claim(ctx, tx, id, outboxtype.StatePending)
	require.NoError(t, err)
	require.NotNil(t, e)
	ok, err = st.RecordInDoubt(ctx, tx, id, "in doubt: timeout", time.Now())
	require.NoError(t, err)
	require.True(t, ok)
	all, hot := updates(tx)
	require.Equal(t, int64(4), all, "four transitions of a live effect")
	require.Equal(t, int64(4), hot, "each one a HOT update: no index entry written")

	confirmed, err := st.ConfirmMany(ctx, tx, []store.Ack{{ID: id, Ref: "evt_1"}}, false)
	require.NoError(t, err)
	require.Contains(t, confirmed, id)
	all, hot = updates(tx)
	require.Equal(t, int64(5), all)
	require.Equal(t, int64(4), hot, "confirming leaves the live index: not HOT")
	require.NoError(t, tx.Commit(ctx))

	got, err := st.Get(ctx, db.Pool, id)
	require.NoError(t, err)
	require.Equal(t, outboxtype.StateConfirmed, got.State)
}
