package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/sideeffects"
)

// historyKinds are the kinds of the seeded history: the three effects of an
// order, as the enqueue phase writes them.
var historyKinds = []string{"history.webhook", "history.capture", "history.receipt"}

// historyDays is how far back the seeded history reaches: inside the
// default 30-day retention, so none of it is due for purging.
const historyDays = 28

type historyResult struct {
	// Effects is how many confirmed effects of history the tables held;
	// RiverJobs how many completed River jobs, as River's cleaner leaves
	// them (an hour of jobs at the rate that made the history).
	Effects   int `json:"history_effects"`
	RiverJobs int `json:"river_jobs"`
	// SideEffectsBytes is side_effects' size with its indexes.
	SideEffectsBytes int64 `json:"side_effects_bytes"`
	// EnqueueCost is the bare transaction's rate over the order
	// transaction's, at concurrency 8 (jobs in the caller's transaction).
	EnqueueCost       float64       `json:"enqueue_cost_ratio"`
	DispatchPerSecond float64       `json:"noop_dispatch_per_second"`
	LatencyP99        time.Duration `json:"commit_to_call_p99_ns"`
	// The same figures over the empty tables' (1.0 is no change; for
	// enqueue and latency above 1 is worse, for dispatch below 1 is).
	EnqueueVsEmpty  float64 `json:"enqueue_cost_vs_empty,omitempty"`
	DispatchVsEmpty float64 `json:"dispatch_vs_empty,omitempty"`
	P99VsEmpty      float64 `json:"p99_vs_empty,omitempty"`
	// Reads are the operator's reads at this size, through the binaries.
	Reads []readResult `json:"operator_reads,omitempty"`
}

// costVersusHistory measures enqueue cost, no-op dispatch and commit-to-call
// latency with each configured amount of confirmed history in the tables,
// growing it from one size to the next. The history is removed at the end.
func (b *bench) costVersusHistory(ctx context.Context) ([]historyResult, error) {
	if err := b.createOrders(ctx); err != nil {
		return nil, err
	}
	defer func() { _ = b.clearHistory(context.WithoutCancel(ctx)) }()
	// A first pass is thrown away: the first size's figures would otherwise
	// include warming caches and connections when this phase runs alone.
	if err := b.seedHistory(ctx, b.s.History[0]); err != nil {
		return nil, err
	}
	if _, err := b.atHistory(ctx, false); err != nil {
		return nil, fmt.Errorf("warm-up: %w", err)
	}
	var out []historyResult
	for _, size := range b.s.History {
		if err := b.seedHistory(ctx, size); err != nil {
			return nil, fmt.Errorf("seeding %d effects of history: %w", size, err)
		}
		r, err := b.atHistory(ctx, b.history > 0 && !b.s.SkipReads)
		if err != nil {
			return nil, fmt.Errorf("with %d effects of history: %w", size, err)
		}
		if len(out) > 0 && out[0].Effects == 0 {
			base := out[0]
			r.EnqueueVsEmpty = r.EnqueueCost / base.EnqueueCost
			r.DispatchVsEmpty = r.DispatchPerSecond / base.DispatchPerSecond
			if base.LatencyP99 > 0 {
				r.P99VsEmpty = float64(r.LatencyP99) / float64(base.LatencyP99)
			}
		}
		out = append(out, r)
	}
	return out, nil
}

// atHistory takes the three measures against the tables as they are, and
// the operator's reads if asked.
func (b *bench) atHistory(ctx context.Context, reads bool) (historyResult, error) {
	r := historyResult{Effects: b.history}
	if err := b.pool.QueryRow(ctx, "SELECT count(*) FROM "+b.schema+".river_job").Scan(&r.RiverJobs); err != nil {
		return r, err
	}
	if err := b.pool.QueryRow(ctx, "SELECT pg_total_relation_size($1::regclass)", b.schema+".side_effects").Scan(&r.SideEffectsBytes); err != nil {
		return r, err
	}
	label := fmt.Sprintf(" (%d of history)", b.history)
	bare, err := b.runTxs(ctx, "bare domain tx"+label, 8, b.bareTx())
	if err != nil {
		return r, err
	}
	// A job per effect, as in every earlier round of these figures.
	ob, err := outbox.New(outbox.Config{Schema: b.schema, Jobs: outbox.JobsInTransaction})
	if err != nil {
		return r, err
	}
	order, err := b.runTxs(ctx, "domain tx + Enqueue(1+3)"+label, 8, b.orderTx(ob))
	if err != nil {
		return r, err
	}
	r.EnqueueCost = bare.TPS / order.TPS
	if err := b.clear(ctx); err != nil {
		return r, err
	}
	noop := &noopProvider{}
	d, err := b.burnDown(ctx, "outboxd, no-op provider"+label, b.s.HistoryEffects, noop, `{}`, func() int { return int(noop.calls.Load()) })
	if err != nil {
		return r, err
	}
	r.DispatchPerSecond = d.PerSecond
	var runs []latencyResult
	for range latencyRuns {
		if err := b.vacuum(ctx); err != nil {
			return r, err
		}
		l, err := b.latencyAt(ctx, 200, enqueueModes[0])
		if err != nil {
			return r, err
		}
		runs = append(runs, l)
	}
	slices.SortFunc(runs, func(a, b latencyResult) int { return cmp.Compare(a.CallP99, b.CallP99) })
	r.LatencyP99 = runs[len(runs)/2].CallP99
	if reads {
		if err := b.clear(ctx); err != nil {
			return r, err
		}
		if err := b.onCallLoad(ctx); err != nil {
			return r, fmt.Errorf("the on-call load: %w", err)
		}
		if err := b.vacuum(ctx); err != nil {
			return r, err
		}
		if r.Reads, err = b.operatorReads(ctx); err != nil {
			return r, fmt.Errorf("operator reads: %w", err)
		}
	}
	return r, nil
}

// seedHistory grows the history to size effects: three per event (an
// order's), created over the last historyDays days, with their events, all
// confirmed but the webhook of one order in 200, failed (what the stuck
// list and the failed searches find);
// and River's job table as River's cleaner leaves it at that rate: the
// completed jobs of the last hour (outboxd's CompletedJobRetention).
func (b *bench) seedHistory(ctx context.Context, size int) error {
	const batch = 150_000
	from := b.history
	rebuild := func() error { return nil }
	if size-from >= rebuildIndexesAbove {
		var err error
		if rebuild, err = b.dropSecondaryIndexes(ctx); err != nil {
			return err
		}
	}
	var seeded atomic.Int64
	seeded.Store(int64(from))
	done := make(chan struct{})
	go progress(fmt.Sprintf("seeding history to %d", size), size, func() int { return int(seeded.Load()) }, done)
	defer close(done)
	for b.history < size {
		events := max(1, min(batch, size-b.history)/len(historyKinds))
		_, err := b.pool.Exec(ctx, `
WITH ev AS (
	INSERT INTO `+b.schema+`.outbox_events (id, aggregate_type, aggregate_id, event_type, payload, created_at)
	SELECT gen_random_uuid(), 'order', 'ord_' || i, 'order.paid', '{"amount": 4200, "currency": "eur"}',
		now() - random() * interval '`+fmt.Sprint(historyDays)+` days'
	FROM generate_series(1, $1) i
	RETURNING id, created_at, substr(aggregate_id, 5)::int AS i)
INSERT INTO `+b.schema+`.side_effects (id, source_id, kind, provider, payload, state, attempts, total_attempts,
	created_at, updated_at, fired_at, first_fired_at, confirmed_at, key_window_from, last_error, provider_ref)
SELECT `+b.schema+`.outboxd_effect_id(ev.id, k.kind), ev.id, k.kind, 'noop',
	'{"operation": "payment_intent.capture", "params": {"id": "pi_3NqXj2LkdIwHu7ix1x0Fz9p2"}}', s.state, 1, 1,
	ev.created_at, ev.created_at + interval '80 milliseconds', ev.created_at + interval '20 milliseconds',
	ev.created_at + interval '20 milliseconds', CASE WHEN s.state = 'confirmed' THEN ev.created_at + interval '80 milliseconds' END,
	ev.created_at + interval '20 milliseconds', CASE WHEN s.state = 'failed' THEN 'HTTP 410 (endpoint gone)' END,
	CASE WHEN s.state = 'confirmed' AND k.kind = $2[2] THEN 'pi_' || left(md5(ev.id::text), 24) END
FROM ev CROSS JOIN unnest($2::text[]) AS k(kind),
	LATERAL (SELECT CASE WHEN k.kind = $2[1] AND ev.i % 200 = 0 THEN 'failed' ELSE 'confirmed' END AS state) s`, events, historyKinds)
		if err != nil {
			return err
		}
		b.history += events * len(historyKinds)
		seeded.Store(int64(b.history))
	}
	if err := rebuild(); err != nil {
		return err
	}
	jobs := keptJobs(b.history) - keptJobs(from)
	if from == 0 && b.history > 0 {
		// River's table as River leaves it at a production rate, whatever
		// the rate that made this history.
		jobs = max(keptJobs(b.history), b.s.RiverJobs)
	}
	if jobs > 0 {
		_, err := b.pool.Exec(ctx, `
INSERT INTO `+b.schema+`.river_job (state, attempt, max_attempts, attempted_at, created_at, finalized_at, scheduled_at,
	args, attempted_by, kind, queue, tags)
SELECT 'completed', 1, 25, t, t, t, t, jsonb_build_object('effect_id', gen_random_uuid()), ARRAY['bench'],
	$2, 'noop', ARRAY['history']
FROM (SELECT now() - random() * $3::interval AS t FROM generate_series(1, $1)) s`, jobs, sideeffects.JobKind, sideeffects.DefaultCompletedJobRetention)
		if err != nil {
			return err
		}
	}
	return b.vacuum(ctx)
}

// keptJobs is how many completed dispatch jobs River keeps (outboxd's
// default retention of them) at the rate that made n effects of history.
func keptJobs(n int) int {
	return int(float64(n) * float64(sideeffects.DefaultCompletedJobRetention) / float64(historyDays*24*time.Hour))
}

// clear removes what a phase wrote, keeping the seeded history.
func (b *bench) clear(ctx context.Context) error {
	if b.history == 0 {
		_, err := b.pool.Exec(ctx, "TRUNCATE "+b.schema+".side_effects, "+b.schema+".outbox_events, "+b.schema+".river_job, "+b.schema+".outbox_intake, "+
			b.schema+".outbox_event_intake, "+b.schema+".outbox_order_wake CASCADE")
		return err
	}
	if _, err := b.pool.Exec(ctx, "DELETE FROM "+b.schema+".side_effects WHERE kind <> ALL ($1::text[])", historyKinds); err != nil {
		return err
	}
	for _, q := range []string{
		"DELETE FROM " + b.schema + ".outbox_events ev WHERE NOT EXISTS (SELECT 1 FROM " + b.schema + ".side_effects e WHERE e.source_id = ev.id)",
		"DELETE FROM " + b.schema + ".river_job WHERE NOT ('history' = ANY (tags))",
		"DELETE FROM " + b.schema + ".outbox_intake",
		"DELETE FROM " + b.schema + ".outbox_event_intake",
		"DELETE FROM " + b.schema + ".outbox_order_wake",
	} {
		if _, err := b.pool.Exec(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

// clearHistory empties the tables, history included.
func (b *bench) clearHistory(ctx context.Context) error {
	b.history = 0
	return b.clear(ctx)
}

// rebuildIndexesAbove is the growth of history above which seeding drops
// the secondary indexes of side_effects and outbox_events and builds them
// again afterwards: inserting millions of rows into random places of eight
// B-trees, with a full-page image after every checkpoint, slows seeding to
// about a thousand rows a second past five million rows here.
const rebuildIndexesAbove = 500_000

// dropSecondaryIndexes drops the indexes of side_effects and outbox_events
// that back no constraint, and returns what builds them again, from their
// own definitions (pg_get_indexdef), so that the tables end as the
// migrations made them. Built at once, they are more compact than indexes
// grown row by row over weeks.
func (b *bench) dropSecondaryIndexes(ctx context.Context) (func() error, error) {
	rows, err := b.pool.Query(ctx, `
SELECT i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid)
FROM pg_index i
JOIN pg_class c ON c.oid = i.indrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname IN ('side_effects', 'outbox_events')
	AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid)`, b.schema)
	if err != nil {
		return nil, err
	}
	type index struct{ name, def string }
	indexes, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (index, error) {
		var x index
		return x, r.Scan(&x.name, &x.def)
	})
	if err != nil {
		return nil, err
	}
	for _, x := range indexes {
		if _, err := b.pool.Exec(ctx, "DROP INDEX "+x.name); err != nil {
			return nil, err
		}
	}
	return func() error {
		conn, err := b.pool.Acquire(ctx)
		if err != nil {
			return err
		}
		defer conn.Release()
		if _, err := conn.Exec(ctx, "SET maintenance_work_mem = '1GB'"); err != nil {
			return err
		}
		defer conn.Exec(context.WithoutCancel(ctx), "RESET maintenance_work_mem") //nolint:errcheck // the session ends with the pool
		for _, x := range indexes {
			if _, err := conn.Exec(ctx, x.def); err != nil {
				return fmt.Errorf("rebuild %s: %w", x.name, err)
			}
		}
		return nil
	}, nil
}

// Stuck effects without a River job and scheduled jobs, planted before
// the operator's reads: the worst case for the overview's stuck list
// (each jobless effect's job lookup), as an incident leaves it.
const (
	joblessStuckEffects = 60
	scheduledJobs       = 20_000
)

// onCallLoad plants what an incident adds to a history for the operator's
// reads, and summarizes the history per minute as a leader running since
// before it would have (stats reads the summary):
//   - 60 Stripe refunds written by SQL an hour ago, pending, with no River
//     job (the reads' outboxd serves no Stripe effects, so no sweep gives
//     them one);
//   - 20,000 dispatch jobs scheduled for tomorrow (retries of a destination
//     that is down).
//
// clear removes both before the next size.
func (b *bench) onCallLoad(ctx context.Context) error {
	_, err := b.pool.Exec(ctx, `
WITH ev AS (
	INSERT INTO `+b.schema+`.outbox_events (id, aggregate_type, aggregate_id, event_type, payload, created_at)
	SELECT gen_random_uuid(), 'refund', 're_' || i, 'refund.requested', '{}', now() - interval '1 hour'
	FROM generate_series(1, $1) i
	RETURNING id, created_at)
INSERT INTO `+b.schema+`.side_effects (id, source_id, kind, provider, payload, state, created_at, updated_at)
SELECT `+b.schema+`.outboxd_effect_id(ev.id, 'stripe.refund'), ev.id, 'stripe.refund', 'stripe',
	'{"operation": "refund.create", "params": {"payment_intent": "pi_3NqXj2LkdIwHu7ix1x0Fz9p2"}}', 'pending', ev.created_at, ev.created_at
FROM ev`, joblessStuckEffects)
	if err != nil {
		return err
	}
	if _, err := b.pool.Exec(ctx, `
INSERT INTO `+b.schema+`.river_job (state, attempt, max_attempts, attempted_at, created_at, scheduled_at, args, kind, queue, errors)
SELECT 'retryable', 3, 25, now() - interval '10 minutes', now() - interval '1 hour', now() + interval '1 day',
	jsonb_build_object('effect_id', gen_random_uuid()), $2, 'webhook',
	ARRAY[jsonb_build_object('at', now() - interval '10 minutes', 'attempt', 2, 'error', 'HTTP 503')]
FROM generate_series(1, $1)`, scheduledJobs, sideeffects.JobKind); err != nil {
		return err
	}
	if _, err := b.pool.Exec(ctx, `TRUNCATE `+b.schema+`.outboxd_minute_counts, `+b.schema+`.outboxd_minute_latency`); err != nil {
		return err
	}
	if _, err := b.pool.Exec(ctx, `UPDATE `+b.schema+`.outboxd_minutes_summarized
		SET since = date_trunc('minute', now() - interval '`+fmt.Sprint(historyDays+1)+` days'),
			up_to = date_trunc('minute', now() - interval '`+fmt.Sprint(historyDays+1)+` days')`); err != nil {
		return err
	}
	op, err := b.operator()
	if err != nil {
		return err
	}
	_, err = op.SummarizeMinutes(ctx, time.Now().Truncate(time.Minute).Add(-time.Minute))
	return err
}
