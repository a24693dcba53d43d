package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/engine"
	"github.com/outboxd/outboxd/internal/testdb"
)

// Listing failed effects of one kind, newest first (the web view's and
// outboxctl list's "failed" filter), reads the small index of failed
// effects, not the created_at index through every confirmed one.
func TestListFailedReadsTheFailedIndex(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	s := db.Schema
	_, err := db.Pool.Exec(ctx, `
WITH ev AS (
	INSERT INTO `+s+`.outbox_events (id, event_type, payload, created_at)
	SELECT gen_random_uuid(), 't', '{}', now() - i * interval '1 second' FROM generate_series(1, 20000) i
	RETURNING id, created_at)
INSERT INTO `+s+`.side_effects (id, source_id, kind, provider, payload, state, acknowledged_at, created_at, updated_at)
SELECT `+s+`.outboxd_effect_id(id, k), id, k, 'webhook', '{}',
	CASE WHEN n % 200 = 0 THEN 'failed' ELSE 'confirmed' END,
	CASE WHEN n % 400 = 0 THEN now() END, created_at, created_at
FROM (SELECT id, created_at, row_number() OVER () AS n FROM ev) e,
	LATERAL (SELECT (ARRAY['webhook.order_paid', 'webhook.refunded'])[1 + n % 2] AS k) kinds`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, "ANALYZE "+s+".side_effects")
	require.NoError(t, err)

	store := engine.NewStore(s)
	plans, err := store.ExplainAdmin(ctx, db.Pool, time.Now(), time.Now().Add(-time.Hour))
	require.NoError(t, err)
	require.Contains(t, plans["list.failed"], `"side_effects_failed_list_idx"`)

	got, err := store.List(ctx, db.Pool, engine.Filter{States: []engine.State{engine.StateFailed}, Kind: "webhook.order_paid", Limit: 30})
	require.NoError(t, err)
	require.Len(t, got, 30)
	acknowledged := 0
	for i, e := range got {
		require.Equal(t, engine.StateFailed, e.State)
		require.Equal(t, "webhook.order_paid", e.Kind)
		if e.AcknowledgedAt != nil {
			acknowledged++
		}
		if i > 0 {
			require.False(t, e.CreatedAt.After(got[i-1].CreatedAt), "newest first")
		}
	}
	require.Positive(t, acknowledged, "acknowledged failures are failed effects too")
}
