package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/store"
	"github.com/outboxd/outboxd/internal/testdb"
	"github.com/outboxd/outboxd/outboxtype"
)

// Listing failed effects, newest first (the web view's and outboxctl
// list's "failed" filter), reads the small index of failed effects, not
// the created_at index through every confirmed one; of one kind, the
// index of failures by kind.
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

	st := store.NewStore(s)
	plans, err := st.ExplainAdmin(ctx, db.Pool, time.Now(), time.Now().Add(-time.Hour))
	require.NoError(t, err)
	require.Contains(t, plans["list.failed"], `"side_effects_failed_list_idx"`)
	require.Contains(t, plans["list.failed.kind"], `"side_effects_failed_kind_idx"`, "one kind: its own order, stopping at the page")

	got, err := st.List(ctx, db.Pool, outboxtype.Filter{States: []outboxtype.State{outboxtype.StateFailed}, Kind: "webhook.order_paid", Limit: 30})
	require.NoError(t, err)
	require.Len(t, got, 30)
	acknowledged := 0
	for i, e := range got {
		require.Equal(t, outboxtype.StateFailed, e.State)
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

// The overview's failure reasons group the newest failures only, read
// through the failed index by when they failed: however many failures
// history keeps, the read stops at that many. A provider reference is
// found through its own index.
func TestFailureReasonsReadTheNewestFailures(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	s := db.Schema
	// 3,000 old failures (HTTP 410), then 5 new ones (HTTP 503), then one
	// acknowledged, newer still, which is not counted.
	_, err := db.Pool.Exec(ctx, `
WITH ev AS (
	INSERT INTO `+s+`.outbox_events (id, event_type, payload, created_at)
	SELECT gen_random_uuid(), 't', '{}', now() - i * interval '1 minute' FROM generate_series(1, 3006) i
	RETURNING id, created_at)
INSERT INTO `+s+`.side_effects (id, source_id, kind, provider, payload, state, acknowledged_at, last_error, provider_ref, created_at, updated_at)
SELECT `+s+`.outboxd_effect_id(id, 'webhook.order_paid'), id, 'webhook.order_paid', 'webhook', '{}', 'failed',
	CASE WHEN n = 1 THEN now() END,
	CASE WHEN n <= 6 THEN 'retries exhausted: HTTP 503 (busy)' ELSE 'permanent: HTTP 410 (endpoint gone)' END,
	'ref_' || n, created_at, created_at
FROM (SELECT id, created_at, row_number() OVER (ORDER BY created_at DESC) AS n FROM ev) e`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, "ANALYZE "+s+".side_effects")
	require.NoError(t, err)

	st := store.NewStore(s)
	got, err := st.FailureReasons(ctx, db.Pool, 20, 10)
	require.NoError(t, err)
	require.Equal(t, []outboxtype.ReasonCount{
		{Kind: "webhook.order_paid", Reason: "HTTP 410 (endpoint gone)", Count: 5},
		{Kind: "webhook.order_paid", Reason: "retries exhausted", Count: 5},
	}, got, "the newest 10 not acknowledged")
	got, err = st.FailureReasons(ctx, db.Pool, 20, 1_000_000)
	require.NoError(t, err)
	require.Equal(t, int64(3000), got[0].Count)

	plans, err := st.ExplainAdmin(ctx, db.Pool, time.Now(), time.Now().Add(-time.Hour))
	require.NoError(t, err)
	require.Contains(t, plans["overview.reasons"], `"side_effects_failed_idx"`)
	require.Contains(t, plans["overview.reasons"], `"Limit"`)
	require.Contains(t, plans["search.provider_ref"], `"side_effects_provider_ref_idx"`)

	found, err := st.ByProviderRef(ctx, db.Pool, "ref_7", 50)
	require.NoError(t, err)
	require.Len(t, found, 1)
	require.Equal(t, "ref_7", *found[0].ProviderRef)
	found, err = st.ByProviderRef(ctx, db.Pool, "ref_7.filterdrecv-p3mdw1", 50)
	require.NoError(t, err)
	require.Len(t, found, 1, "a SendGrid event's sg_message_id: the message id before the dot")
}
