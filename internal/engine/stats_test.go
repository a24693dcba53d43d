package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/outboxtype"
)

// TestStatsReadTheMinuteSummary: once the leader has summarized the
// minutes, stats over a window reads the per-minute summary for them and
// side_effects only for the rest, and says the same as reading every
// effect: counts by state and kind, attempts, confirmed count, and latency
// percentiles within 10% (a histogram's estimate, said so). Summarizing
// twice adds nothing; an effect that ends after the summary is counted.
func TestStatsReadTheMinuteSummary(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	ctx := context.Background()
	s := b.db.Schema
	exec := func(q string, args ...any) {
		_, err := b.db.Pool.Exec(ctx, q, args...)
		require.NoError(t, err, q)
	}
	// The summary began four hours ago; three hours of effects ended since.
	exec(`UPDATE ` + s + `.outboxd_minutes_summarized SET since = date_trunc('minute', now()) - interval '4 hours', up_to = date_trunc('minute', now()) - interval '4 hours'`)
	exec(`INSERT INTO ` + s + `.outbox_events (id, event_type, payload) SELECT gen_random_uuid(), 'e', '{}' FROM generate_series(1, 1200)`)
	exec(`INSERT INTO ` + s + `.side_effects (id, source_id, kind, provider, payload, state, attempts, created_at, updated_at, fired_at, confirmed_at)
		SELECT gen_random_uuid(), id, CASE WHEN n % 2 = 0 THEN 'webhook.a' ELSE 'webhook.b' END, 'webhook', '{}',
			CASE WHEN n % 20 = 0 THEN 'cancelled' ELSE 'confirmed' END, 1 + n % 7,
			ended - (0.05 + (n % 97) * 0.05) * interval '1 second', ended, ended, CASE WHEN n % 20 <> 0 THEN ended END
		FROM (SELECT id, row_number() OVER () AS n,
			-- each its own time, at least two minutes ago: in minutes the
			-- summary will hold (an uncorrelated LATERAL is read once, and
			-- could put every effect in the current minute)
			now() - interval '2 minutes' - interval '168 minutes' * random() AS ended
			FROM ` + s + `.outbox_events) e`)
	exec(`INSERT INTO ` + s + `.side_effect_audit (effect_id, action, actor, reason, from_state, to_state)
		SELECT id, 'confirm', 'ada', 'by hand', 'fired', 'confirmed' FROM ` + s + `.side_effects WHERE state = 'confirmed' LIMIT 3`)

	raw, err := b.store.Stats(ctx, b.db.Pool, 3*time.Hour)
	require.NoError(t, err)
	require.False(t, raw.LatencyEstimated, "nothing summarized yet: every effect is read")
	require.EqualValues(t, 1137, raw.Confirmed, "1,140 confirmed, 3 of them by hand")

	upTo := time.Now().Truncate(time.Minute).Add(-time.Minute)
	reached, err := b.store.SummarizeMinutes(ctx, b.db.Pool, upTo)
	require.NoError(t, err)
	require.True(t, reached.Equal(upTo), "caught up four hours, an hour a statement")
	for range 2 {
		sum, err := b.store.Stats(ctx, b.db.Pool, 3*time.Hour)
		require.NoError(t, err)
		require.True(t, sum.LatencyEstimated)
		require.ElementsMatch(t, raw.Counts, sum.Counts)
		require.Equal(t, raw.Attempts, sum.Attempts)
		require.Equal(t, raw.Confirmed, sum.Confirmed)
		require.Equal(t, raw.ConfirmedByHand, sum.ConfirmedByHand)
		require.InEpsilon(t, raw.LatencyP50, sum.LatencyP50, 0.1)
		require.InEpsilon(t, raw.LatencyP95, sum.LatencyP95, 0.1)
		require.InEpsilon(t, raw.LatencyP99, sum.LatencyP99, 0.1)
		_, err = b.store.SummarizeMinutes(ctx, b.db.Pool, upTo) // again: nothing added
		require.NoError(t, err)
	}

	// An effect that ends now, after the summary: read from side_effects.
	// (One confirmed in a summarized minute: one confirmed in this minute
	// is read from side_effects too.)
	exec(`UPDATE `+s+`.side_effects SET state = 'cancelled', updated_at = now()
		WHERE id = (SELECT id FROM `+s+`.side_effects WHERE state = 'confirmed' AND kind = 'webhook.a' AND updated_at < $1 LIMIT 1)`, upTo)
	sum, err := b.store.Stats(ctx, b.db.Pool, 3*time.Hour)
	require.NoError(t, err)
	count := func(st *outboxtype.Stats, state outboxtype.State, kind string) int64 {
		for _, c := range st.Counts {
			if c.State == state && c.Kind == kind {
				return c.Count
			}
		}
		return 0
	}
	require.Equal(t, count(raw, outboxtype.StateCancelled, "webhook.a")+1, count(sum, outboxtype.StateCancelled, "webhook.a"))
	require.Equal(t, count(raw, outboxtype.StateConfirmed, "webhook.a"), count(sum, outboxtype.StateConfirmed, "webhook.a"),
		"the minute it was confirmed in keeps it: a minute counts what ended in it")
}
