package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

type adminResult struct {
	Name      string        `json:"name"`
	Rows      int           `json:"rows"`
	Median    time.Duration `json:"median_ns"`
	IndexUsed bool          `json:"intended_index_used"`
	Plan      string        `json:"plan_summary"`
}

// intendedIndexes are the partial indexes each admin statement should use.
var intendedIndexes = map[string][]string{
	"stuck":          {"side_effects_live_idx", "side_effects_failed_idx"},
	"stats.counts":   {"side_effects_live_idx", "side_effects_terminal_idx"},
	"stats.oldest":   {"side_effects_live_idx"},
	"stats.attempts": {"side_effects_terminal_idx"},
	"stats.latency":  {"side_effects_terminal_idx"},
}

// adminQueries fills the table with AdminRows effects (mostly confirmed,
// spread over 40 days; 0.3% pending, 0.2% fired, 0.5% failed) and times the
// stuck and stats queries, checking their plans.
func (b *bench) adminQueries(ctx context.Context) ([]adminResult, error) {
	n := b.s.AdminRows
	const batch = 100_000
	var seeded int
	rebuild := func() error { return nil }
	if n >= rebuildIndexesAbove { // as the history phase seeds
		var err error
		if rebuild, err = b.dropSecondaryIndexes(ctx); err != nil {
			return nil, err
		}
	}
	done := make(chan struct{})
	go progress("seeding admin rows", n, func() int { return seeded }, done)
	for i := 0; i < n; i += batch {
		m := min(batch, n-i)
		_, err := b.pool.Exec(ctx, `
WITH ev AS (
	INSERT INTO `+b.schema+`.outbox_events (id, event_type, payload, created_at)
	SELECT gen_random_uuid(), 'bench', '{}', now() - random() * interval '40 days' FROM generate_series(1, $1)
	RETURNING id, created_at),
numbered AS (SELECT id, created_at, row_number() OVER () AS i FROM ev)
INSERT INTO `+b.schema+`.side_effects (id, source_id, kind, provider, payload, state, attempts, last_error,
	created_at, updated_at, fired_at, first_fired_at, confirmed_at)
SELECT gen_random_uuid(), id,
	(ARRAY['webhook.order_paid', 'stripe.refund', 'email.receipt'])[1 + i % 3],
	(ARRAY['webhook', 'stripe', 'sendgrid'])[1 + i % 3], '{}',
	s.state, CASE WHEN s.state = 'pending' THEN 0 ELSE 1 + (i % 4)::int END,
	CASE WHEN s.state = 'failed' THEN 'HTTP 410 (endpoint gone)' END,
	created_at, created_at + interval '2 seconds',
	CASE WHEN s.state <> 'pending' THEN created_at + interval '1 second' END,
	CASE WHEN s.state <> 'pending' THEN created_at + interval '1 second' END,
	CASE WHEN s.state = 'confirmed' THEN created_at + interval '2 seconds' END
FROM numbered, LATERAL (SELECT CASE WHEN i % 1000 < 3 THEN 'pending' WHEN i % 1000 < 5 THEN 'fired'
	WHEN i % 1000 < 10 THEN 'failed' ELSE 'confirmed' END AS state) s`, m)
		if err != nil {
			close(done)
			return nil, err
		}
		seeded += m
	}
	close(done)
	if err := rebuild(); err != nil {
		return nil, err
	}
	if _, err := b.pool.Exec(ctx, "VACUUM ANALYZE "+b.schema+".side_effects"); err != nil {
		return nil, err
	}
	op, err := b.operator()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	timeIt := func(fn func() error) (time.Duration, error) {
		var ds []time.Duration
		for range 7 {
			t0 := time.Now()
			if err := fn(); err != nil {
				return 0, err
			}
			ds = append(ds, time.Since(t0))
		}
		slices.Sort(ds)
		return ds[len(ds)/2], nil
	}
	stuckTime, err := timeIt(func() error {
		_, err := op.Stuck(ctx, 5*time.Minute, 100)
		return err
	})
	if err != nil {
		return nil, err
	}
	statsTime, err := timeIt(func() error {
		_, err := op.Stats(ctx, time.Hour)
		return err
	})
	if err != nil {
		return nil, err
	}
	stats24Time, err := timeIt(func() error {
		_, err := op.Stats(ctx, 24*time.Hour)
		return err
	})
	if err != nil {
		return nil, err
	}
	// The same windows read from the per-minute summary the leader keeps
	// (migration 00026): the seeded history predates the summary, so it is
	// summarized first, as a summary that began 41 days ago would hold it.
	if _, err := b.pool.Exec(ctx, `UPDATE `+b.schema+`.outboxd_minutes_summarized
		SET since = date_trunc('minute', now() - interval '41 days'), up_to = date_trunc('minute', now() - interval '41 days')`); err != nil {
		return nil, err
	}
	t0 := time.Now()
	if _, err := op.SummarizeMinutes(ctx, time.Now().Truncate(time.Minute).Add(-time.Minute)); err != nil {
		return nil, err
	}
	backfill := time.Since(t0)
	var summaryRows int
	if err := b.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+b.schema+`.outboxd_minute_counts) + (SELECT count(*) FROM `+b.schema+`.outboxd_minute_latency)`).Scan(&summaryRows); err != nil {
		return nil, err
	}
	statsSum, err := timeIt(func() error {
		_, err := op.Stats(ctx, time.Hour)
		return err
	})
	if err != nil {
		return nil, err
	}
	stats24Sum, err := timeIt(func() error {
		st, err := op.Stats(ctx, 24*time.Hour)
		if err == nil && !st.LatencyEstimated {
			err = fmt.Errorf("stats --window 24h did not read the summary")
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	plans, err := op.ExplainReads(ctx, now.Add(-5*time.Minute), now.Add(-24*time.Hour))
	if err != nil {
		return nil, err
	}
	check := func(names ...string) (bool, string) {
		ok := true
		var summary []string
		for _, name := range names {
			plan := plans[name]
			used := []string{}
			for _, idx := range intendedIndexes[name] {
				if strings.Contains(plan, `"`+idx+`"`) {
					used = append(used, idx)
				}
			}
			seq := strings.Contains(plan, `"Seq Scan"`) && strings.Contains(plan, `"Relation Name": "side_effects"`) && seqOnEffects(plan)
			if len(used) == 0 || seq {
				ok = false
			}
			s := fmt.Sprintf("%s: %s", name, strings.Join(used, "+"))
			if seq {
				s += " + SEQ SCAN"
			}
			summary = append(summary, s)
		}
		return ok, strings.Join(summary, "; ")
	}
	stuckOK, stuckPlan := check("stuck")
	statsOK, statsPlan := check("stats.counts", "stats.oldest", "stats.attempts", "stats.latency")
	if _, err := b.pool.Exec(ctx, "TRUNCATE "+b.schema+".side_effects, "+b.schema+".outbox_events CASCADE"); err != nil {
		return nil, err
	}
	return []adminResult{
		{Name: "stuck", Rows: n, Median: stuckTime, IndexUsed: stuckOK, Plan: stuckPlan},
		{Name: "stats --window 1h (default)", Rows: n, Median: statsTime, IndexUsed: statsOK, Plan: statsPlan},
		{Name: "stats --window 24h", Rows: n, Median: stats24Time, IndexUsed: statsOK, Plan: "as above"},
		{Name: "summary backfill of the history (once)", Rows: n, Median: backfill, IndexUsed: true, Plan: fmt.Sprintf("%d summary rows", summaryRows)},
		{Name: "stats --window 1h, from the per-minute summary", Rows: n, Median: statsSum, IndexUsed: true, Plan: "summary + the minutes not summarized"},
		{Name: "stats --window 24h, from the per-minute summary", Rows: n, Median: stats24Sum, IndexUsed: true, Plan: "summary + the minutes not summarized"},
	}, nil
}

// seqOnEffects reports whether a JSON plan sequentially scans side_effects:
// a "Seq Scan" node whose relation is side_effects.
func seqOnEffects(plan string) bool {
	for _, part := range strings.Split(plan, `"Node Type": "Seq Scan"`)[1:] {
		end := strings.Index(part, `"Node Type"`)
		if end < 0 {
			end = len(part)
		}
		if strings.Contains(part[:end], `"Relation Name": "side_effects"`) {
			return true
		}
	}
	return false
}
