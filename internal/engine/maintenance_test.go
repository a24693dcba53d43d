package engine_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/engine"
	"github.com/outboxd/outboxd/internal/fakes"
	"github.com/outboxd/outboxd/internal/store"
	"github.com/outboxd/outboxd/internal/testdb"
	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/sideeffects/dispatchmetrics"
)

func TestSweeperDispatchesRowsWrittenBySQL(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	b.cfg.SweepGrace = time.Millisecond
	ctx := context.Background()
	s := b.db.Schema
	// A system without Go records an event and an effect with plain SQL,
	// and no River job.
	eventID := uuid.New()
	_, err := b.db.Pool.Exec(ctx, `INSERT INTO `+s+`.outbox_events (id, event_type, payload) VALUES ($1, 'order.paid', '{}')`, eventID)
	require.NoError(t, err)
	var effectID uuid.UUID
	var sqlKey string
	err = b.db.Pool.QueryRow(ctx, `INSERT INTO `+s+`.side_effects (id, source_id, kind, provider, payload)
		VALUES (gen_random_uuid(), $1, 'webhook.legacy', 'webhook', jsonb_build_object('url', $2::text, 'body', '{"from": "sql"}'::jsonb))
		RETURNING id, `+s+`.outboxd_idempotency_key(source_id, kind)`, eventID, b.recv.URL+"/legacy").Scan(&effectID, &sqlKey)
	require.NoError(t, err)

	b.start(t)
	got := b.waitFor(t, effectID, outboxtype.StateConfirmed)
	require.Equal(t, sqlKey, got.IdempotencyKey)
	ds := b.recv.Deliveries()
	require.Len(t, ds, 1)
	require.Equal(t, sqlKey, ds[0].ID, "the SQL form of the key is what the receiver sees")
	require.Equal(t, store.Key(eventID, "webhook.legacy"), ds[0].ID)
}

func TestSweeperRecoversDiscardedJob(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	b.cfg.SweepGrace = time.Millisecond
	e := b.enqueue(t, "/orders")
	// River gave up on the job (discarded) while the effect was pending.
	_, err := b.db.Pool.Exec(context.Background(), `UPDATE `+b.db.Schema+`.river_job SET state = 'discarded', finalized_at = now()
		WHERE args->>'effect_id' = $1::text`, e.ID)
	require.NoError(t, err)
	b.start(t)
	b.waitFor(t, e.ID, outboxtype.StateConfirmed)
	require.Len(t, b.recv.Deliveries(), 1)
}

func TestRetentionPurgesOnlyTerminalEffects(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	b.cfg.Retention = 48 * time.Hour
	ctx := context.Background()
	s := b.db.Schema
	confirmed := b.enqueue(t, "/orders")
	failed := b.enqueue(t, "/orders")
	pending := b.enqueue(t, "/orders")
	fired := b.enqueue(t, "/orders")
	_, err := b.db.Pool.Exec(ctx, `UPDATE `+s+`.river_job SET state = 'completed', finalized_at = now()`)
	require.NoError(t, err)
	for id, state := range map[uuid.UUID]string{confirmed.ID: "confirmed", failed.ID: "failed", pending.ID: "pending", fired.ID: "fired"} {
		_, err := b.db.Pool.Exec(ctx, `UPDATE `+s+`.side_effects SET state = $2, created_at = now() - interval '3 days',
			updated_at = now() - interval '3 days' WHERE id = $1`, id, state)
		require.NoError(t, err)
	}
	_, err = b.db.Pool.Exec(ctx, `UPDATE `+s+`.outbox_events SET created_at = now() - interval '3 days'`)
	require.NoError(t, err)

	b.start(t)
	// The old pending and fired effects are swept and dispatched, never purged.
	b.waitFor(t, pending.ID, outboxtype.StateConfirmed)
	b.waitFor(t, fired.ID, outboxtype.StateConfirmed)
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM `+s+`.side_effects WHERE id = ANY($1)`,
			[]uuid.UUID{confirmed.ID, failed.ID}).Scan(&n))
		if n == 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "retention never purged the terminal effects")
		time.Sleep(50 * time.Millisecond)
	}
	var events int
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM `+s+`.outbox_events`).Scan(&events))
	require.Equal(t, 2, events, "events of purged effects go too; events of live ones stay")
}

func TestRetentionMustExceedKeyWindows(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	b.cfg.Retention = time.Hour
	_, err := newDispatcher(b.db.Pool, b.cfg)
	require.ErrorContains(t, err, "must exceed the webhook key window")
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	reg := prometheus.NewRegistry()
	var err error
	b.cfg.Metrics, err = dispatchmetrics.New(reg)
	require.NoError(t, err)
	reg.MustRegister(dispatchmetrics.NewStateCollector(b.db.Pool, b.db.Schema))
	b.recv.Respond("/flaky", fakes.Status(500))
	// One effect waits, unfired, for a queue nobody serves.
	stalled := b.enqueueEffect(t, emailEffect("email.receipt"))
	b.start(t)
	e1 := b.enqueue(t, "/orders")
	e2 := b.enqueue(t, "/flaky")
	b.waitFor(t, e1.ID, outboxtype.StateConfirmed)
	b.waitFor(t, e2.ID, outboxtype.StateConfirmed)

	// The worker counts a transition just after its commit: wait for it.
	want := `
# HELP outboxd_transitions_total State transitions made by workers, by provider, kind and the state entered.
# TYPE outboxd_transitions_total counter
outboxd_transitions_total{kind="webhook.order_paid",provider="webhook",to="confirmed"} 2
outboxd_transitions_total{kind="webhook.order_paid",provider="webhook",to="fired"} 3
`
	require.Eventually(t, func() bool {
		return testutil.GatherAndCompare(reg, strings.NewReader(want), "outboxd_transitions_total") == nil
	}, 30*time.Second, 10*time.Millisecond)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), "outboxd_transitions_total"))
	require.Equal(t, 2, testutil.CollectAndCount(reg, "outboxd_provider_call_duration_seconds"), "an ok and an in_doubt series (a 5xx proves nothing)")
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP outboxd_effects Effects in a live or failed state, by state and kind.
# TYPE outboxd_effects gauge
outboxd_effects{kind="email.receipt",state="pending"} 1
`), "outboxd_effects"))
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP outboxd_blocked_ordering_keys Ordering keys with an effect waiting behind an earlier effect of the key that has not ended.
# TYPE outboxd_blocked_ordering_keys gauge
outboxd_blocked_ordering_keys 0
`), "outboxd_blocked_ordering_keys"))
	_ = stalled
}

// A purge that picked an old failed effect must not delete it if an
// operator moved it back to pending before the DELETE reached the row.
func TestPurgeSparesAnEffectRedrivenMeanwhile(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	ctx := context.Background()
	e := b.enqueue(t, "/orders")
	_, err := b.db.Pool.Exec(ctx, `UPDATE `+b.db.Schema+`.side_effects SET state = 'failed', updated_at = now() - interval '40 days' WHERE id = $1`, e.ID)
	require.NoError(t, err)

	// The operator's redrive holds the row while the purge runs.
	tx, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `UPDATE `+b.db.Schema+`.side_effects SET state = 'pending', updated_at = now() WHERE id = $1`, e.ID)
	require.NoError(t, err)

	res := purgeBehind(t, b, tx, outboxtype.PurgeOptions{})
	require.Zero(t, res.Effects)
	got, err := b.store.Get(ctx, b.db.Pool, e.ID)
	require.NoError(t, err, "the redriven effect still exists")
	require.Equal(t, outboxtype.StatePending, got.State)
}

// purgeBehind runs a purge of what is older than 30 days while tx holds a
// row the purge will reach, commits tx once the purge waits for that row,
// and returns what the purge deleted.
func purgeBehind(t *testing.T, b *workerBundle, tx pgx.Tx, o outboxtype.PurgeOptions) outboxtype.PurgeResult {
	t.Helper()
	ctx := context.Background()
	type result struct {
		res outboxtype.PurgeResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := b.store.PurgeInBatches(ctx, b.db.Pool, time.Now().Add(-30*24*time.Hour), o)
		done <- result{res, err}
	}()
	require.Eventually(t, func() bool {
		var waiting int
		err := b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%DELETE FROM "`+b.db.Schema+`".side_effects%'`).Scan(&waiting)
		return err == nil && waiting == 1
	}, 30*time.Second, 10*time.Millisecond, "the purge reaches the locked row")
	require.NoError(t, tx.Commit(ctx))
	r := <-done
	require.NoError(t, r.err)
	return r.res
}

func TestProviderMustBeAQueueName(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	ctx := context.Background()
	e := b.enqueue(t, "/orders")
	_, err := b.db.Pool.Exec(ctx, `INSERT INTO `+b.db.Schema+`.side_effects (id, source_id, kind, provider, payload)
		SELECT gen_random_uuid(), source_id, 'webhook.other', 'Webhook', payload FROM `+b.db.Schema+`.side_effects WHERE id = $1`, e.ID)
	require.ErrorContains(t, err, "side_effects_provider_queue_name", "plain SQL cannot write a provider River cannot queue")
}

// A row River cannot queue (here: in a database whose CHECK was dropped)
// must not stop the sweeper from re-queueing every other job-less effect.
func TestSweeperIsolatesARowItCannotQueue(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	ctx := context.Background()
	good := b.enqueue(t, "/orders")
	s := b.db.Schema
	for _, sql := range []string{
		`ALTER TABLE ` + s + `.side_effects DROP CONSTRAINT side_effects_provider_queue_name`,
		`INSERT INTO ` + s + `.side_effects (id, source_id, kind, provider, payload, updated_at)
			SELECT '00000000-0000-0000-0000-0000000000aa', source_id, 'webhook.other', 'Webhook', payload, now() - interval '1 hour'
			FROM ` + s + `.side_effects WHERE id = '` + good.ID.String() + `'`,
		`DELETE FROM ` + s + `.river_job`,
		`UPDATE ` + s + `.side_effects SET updated_at = now() - interval '1 hour'`,
	} {
		_, err := b.db.Pool.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	// Swept by hand before any dispatcher runs (its own sweeper would race).
	n, err := engine.Sweep(ctx, b.store, b.db.Pool, insertClient(t, b.db.Pool, b.db.Schema), time.Now())
	require.NoError(t, err)
	require.Equal(t, 1, n, "the good effect got its job")
	b.start(t)
	b.waitFor(t, good.ID, outboxtype.StateConfirmed)
	bad := b.waitFor(t, uuid.MustParse("00000000-0000-0000-0000-0000000000aa"), outboxtype.StateFailed)
	require.Contains(t, deref(bad.LastError), `provider "Webhook" is not a valid River queue name`)
}

// insertClient is an insert-only River client, for calling Sweep directly.
func insertClient(t *testing.T, pool *pgxpool.Pool, schema string) *river.Client[pgx.Tx] {
	t.Helper()
	c, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Schema: schema})
	require.NoError(t, err)
	return c
}

// An event goes with its last effect, in the same batch, and not before;
// an old event that never had effects goes too; two purges at once leave
// nothing expired behind.
func TestPurgeTakesEachEventWithItsLastEffect(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	ctx := context.Background()
	s := b.db.Schema
	// 300 events of three effects each: all expired for the first 200;
	// one effect still live (pending) for the next 50, and one confirmed
	// recently for the last 50. Plus 20 old events that never had effects.
	_, err := b.db.Pool.Exec(ctx, `
INSERT INTO `+s+`.outbox_events (id, event_type, payload, created_at)
SELECT `+s+`.outboxd_effect_id(gen_random_uuid(), 'ev'), CASE WHEN i <= 300 THEN 'order.paid' ELSE 'bare' END, '{}', now() - interval '40 days'
FROM generate_series(1, 320) i`)
	require.NoError(t, err)
	_, err = b.db.Pool.Exec(ctx, `
WITH ev AS (SELECT id, row_number() OVER (ORDER BY id) AS i FROM `+s+`.outbox_events WHERE event_type = 'order.paid')
INSERT INTO `+s+`.side_effects (id, source_id, kind, provider, payload, state, created_at, updated_at)
SELECT `+s+`.outboxd_effect_id(ev.id, k), ev.id, k, 'webhook', '{}',
	CASE WHEN k = 'c' AND ev.i > 200 AND ev.i <= 250 THEN 'pending' ELSE 'confirmed' END,
	now() - interval '40 days',
	CASE WHEN k = 'c' AND ev.i > 250 THEN now() - interval '1 day' ELSE now() - interval '39 days' END
FROM ev CROSS JOIN unnest(ARRAY['a', 'b', 'c']) k`)
	require.NoError(t, err)

	cutoff := time.Now().Add(-30*24*time.Hour - 12*time.Hour)
	would, err := b.store.Purge(ctx, b.db.Pool, cutoff, true)
	require.NoError(t, err)
	require.Equal(t, outboxtype.PurgeResult{Effects: 200*3 + 100*2, Events: 220}, would)

	// Two purges at once, in batches far smaller than the work, one of
	// them yielding as the retention job does.
	results := make(chan outboxtype.PurgeResult, 2)
	errs := make(chan error, 2)
	for i := range 2 {
		go func() {
			res, err := b.store.PurgeInBatches(ctx, b.db.Pool, cutoff, outboxtype.PurgeOptions{Batch: 7, Yield: i == 0})
			results <- res
			errs <- err
		}()
	}
	var total outboxtype.PurgeResult
	for range 2 {
		require.NoError(t, <-errs)
		r := <-results
		total.Effects += r.Effects
		total.Events += r.Events
	}
	require.Equal(t, would, total, "together the two purges deleted what the dry run counted")

	var effects, events, orphans int
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM `+s+`.side_effects),
		(SELECT count(*) FROM `+s+`.outbox_events),
		(SELECT count(*) FROM `+s+`.outbox_events ev WHERE NOT EXISTS (SELECT 1 FROM `+s+`.side_effects e WHERE e.source_id = ev.id))`).
		Scan(&effects, &events, &orphans))
	require.Equal(t, 100, effects, "the pending effects and the recently confirmed ones stay")
	require.Equal(t, 100, events, "their events stay")
	require.Zero(t, orphans)
}

// A batch that comes back short because another session deleted one of its
// rows first (a second purge, an operator) does not end the purge.
func TestPurgeGoesOnAfterAShortBatch(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	ctx := context.Background()
	s := b.db.Schema
	_, err := b.db.Pool.Exec(ctx, `
WITH ev AS (
	INSERT INTO `+s+`.outbox_events (id, event_type, payload, created_at)
	SELECT `+s+`.outboxd_effect_id(gen_random_uuid(), 'ev'), 'order.paid', '{}', now() - interval '40 days' FROM generate_series(1, 20)
	RETURNING id)
INSERT INTO `+s+`.side_effects (id, source_id, kind, provider, payload, state, created_at, updated_at)
SELECT `+s+`.outboxd_effect_id(id, 'a'), id, 'a', 'webhook', '{}', 'confirmed', now() - interval '40 days',
	now() - interval '39 days' + row_number() OVER () * interval '1 minute' FROM ev`)
	require.NoError(t, err)

	// Another session deletes the oldest effect, the first of the purge's
	// first batch, and commits once the purge waits for it.
	tx, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `DELETE FROM `+s+`.side_effects WHERE id = (SELECT id FROM `+s+`.side_effects ORDER BY updated_at LIMIT 1)`)
	require.NoError(t, err)
	// Batches of 5: the first comes back with 4.
	res := purgeBehind(t, b, tx, outboxtype.PurgeOptions{Batch: 5})
	require.Equal(t, int64(19), res.Effects, "every expired effect but the one deleted meanwhile")
	var left int
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM `+s+`.side_effects`).Scan(&left))
	require.Zero(t, left)
}

// With weeks of history in the tables, neither purge statement reads a
// whole table: effects through the terminal index, events that never had
// effects through their created_at index.
func TestPurgeReadsIndexesNotTables(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	s := db.Schema
	_, err := db.Pool.Exec(ctx, `
WITH ev AS (
	INSERT INTO `+s+`.outbox_events (id, event_type, payload, created_at)
	SELECT gen_random_uuid(), 'order.paid', '{}', now() - i * interval '1 minute' FROM generate_series(1, 20000) i
	RETURNING id, created_at)
INSERT INTO `+s+`.side_effects (id, source_id, kind, provider, payload, state, created_at, updated_at)
SELECT `+s+`.outboxd_effect_id(id, 'webhook.order_paid'), id, 'webhook.order_paid', 'webhook', '{}', 'confirmed', created_at, created_at
FROM ev`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, "ANALYZE "+s+".side_effects, "+s+".outbox_events")
	require.NoError(t, err)

	plans, err := store.NewStore(s).ExplainAdmin(ctx, db.Pool, time.Now(), time.Now().Add(-30*24*time.Hour))
	require.NoError(t, err)
	require.Contains(t, plans["purge.effects"], `"side_effects_terminal_idx"`)
	require.Contains(t, plans["purge.events"], `"outbox_events_created_at_idx"`)
	for _, name := range []string{"purge.effects", "purge.events"} {
		require.NotContains(t, plans[name], `"Seq Scan"`, "%s: %s", name, plans[name])
	}
}

// TestPurgeTakesOldDriftRecords: drift records older than the retention
// go with the purge, those of unknown keys (no effect) included; newer
// ones stay; a dry run counts them.
func TestPurgeTakesOldDriftRecords(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	ctx := context.Background()
	s := b.db.Schema
	_, err := b.db.Pool.Exec(ctx, `INSERT INTO `+s+`.provider_drift (reason, provider, idempotency_key, event_id, event_type, check_hint, created_at)
		SELECT 'unknown_key', 'sendgrid', 'k' || i, 'sg_' || i, 'delivered', 'check', now() - (i || ' days')::interval
		FROM generate_series(1, 40) i`)
	require.NoError(t, err)
	cutoff := time.Now().Add(-30*24*time.Hour - 12*time.Hour)
	would, err := b.store.Purge(ctx, b.db.Pool, cutoff, true)
	require.NoError(t, err)
	require.Equal(t, int64(10), would.Drift, "days 31 to 40")
	res, err := b.store.Purge(ctx, b.db.Pool, cutoff, false)
	require.NoError(t, err)
	require.Equal(t, int64(10), res.Drift)
	var left int
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM `+s+`.provider_drift`).Scan(&left))
	require.Equal(t, 30, left, "the last 30 days stay")
}

// TestAFiredEffectBehindAnOpenBreakerIsStuck: a webhook fired ten minutes
// ago whose row changes every few seconds (its gate turns it away and puts
// it back as it was while the breaker is open) is in the stuck list, by
// when it fired: its call has not moved.
func TestAFiredEffectBehindAnOpenBreakerIsStuck(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	ctx := context.Background()
	s := b.db.Schema
	for _, q := range []string{
		`INSERT INTO ` + s + `.outbox_events (id, event_type, payload) SELECT gen_random_uuid(), 'b', '{}' FROM generate_series(1, 3)`,
		`INSERT INTO ` + s + `.side_effects (id, source_id, kind, provider, payload, state, attempts, total_attempts, fired_at, created_at, updated_at)
			SELECT gen_random_uuid(), id, 'webhook.held', 'webhook', '{}', 'fired', 1, 1, now() - interval '10 minutes',
				now() - interval '11 minutes', now() FROM ` + s + `.outbox_events`,
	} {
		_, err := b.db.Pool.Exec(ctx, q)
		require.NoError(t, err)
	}
	stuck, err := b.store.Stuck(ctx, b.db.Pool, time.Now().Add(-5*time.Minute), 50)
	require.NoError(t, err)
	require.Len(t, stuck, 3, "fired 10 minutes ago, touched just now: stuck")
	fresh, err := b.store.Stuck(ctx, b.db.Pool, time.Now().Add(-20*time.Minute), 50)
	require.NoError(t, err)
	require.Empty(t, fresh, "fired after the bound: not stuck")
}
