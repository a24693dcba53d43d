package store

import (
	"context"
	"fmt"
	"time"

	"github.com/outboxd/outboxd/outboxtype"
)

// ExplainAdmin returns the JSON plans of the statements behind Stuck, Stats,
// List of failed effects of one kind and the retention purge, keyed by
// name, so their index use can be checked at scale.
func (s *Store) ExplainAdmin(ctx context.Context, db DB, notSince, since time.Time) (map[string]string, error) {
	plans := map[string]string{}
	for name, q := range map[string]struct {
		sql  string
		args []any
	}{
		"stuck":          {s.sql(sqlStuck), []any{notSince, 100}},
		"stats.counts":   {s.sql(sqlStatsCounts), []any{since}},
		"stats.oldest":   {s.sql(sqlStatsOldest), nil},
		"stats.attempts": {s.sql(sqlStatsAttempts), []any{since}},
		"stats.latency":  {s.sql(sqlStatsLatency), []any{since}},
		// The retention purge's two statements, with since as the cutoff
		// (EXPLAIN without ANALYZE deletes nothing).
		"purge.effects": {s.sql(sqlPurgeEffects), []any{since, 5000}},
		"purge.events":  {s.sql(sqlPurgeEvents), []any{since, 5000}},
		"list.failed": {s.sql(sqlListFailed), []any{[]string{string(outboxtype.StateFailed)}, nil,
			nil, nil, nil, nil, nil, nil, 50}},
		"list.failed.kind": {s.sql(sqlListFailedKind), []any{[]string{string(outboxtype.StateFailed)}, "webhook.order_paid",
			nil, nil, nil, nil, nil, nil, 50}},
		"overview.reasons":    {s.sql(sqlFailureReasons), []any{20, 1000}},
		"search.provider_ref": {s.sql(sqlEffectsByProviderRef), []any{"pi_3NqXj2LkdIwHu7ix1x0Fz9p2", 50}},
	} {
		var plan string
		if err := db.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+q.sql, q.args...).Scan(&plan); err != nil {
			return nil, fmt.Errorf("explain %s: %w", name, err)
		}
		plans[name] = plan
	}
	return plans, nil
}
