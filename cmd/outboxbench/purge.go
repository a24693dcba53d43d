package main

import (
	"cmp"
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/sideeffects"
)

// purgeTrafficRate is the steady traffic offered while retention runs,
// effects per second.
const purgeTrafficRate = 300

type purgeResult struct {
	// Expired is how many effects past retention were seeded (three per
	// event), Effects and Events how many the purge deleted.
	Expired int           `json:"expired"`
	Effects int64         `json:"effects_purged"`
	Events  int64         `json:"events_purged"`
	Took    time.Duration `json:"took_ns"`
	// WALBytes is the WAL the purge wrote, from a checkpoint, with nothing
	// else running.
	WALBytes int64 `json:"wal_bytes"`
	// Sizes of side_effects and outbox_events with their indexes, before
	// the purge and after it and a VACUUM.
	SizeBefore int64 `json:"size_before_bytes"`
	SizeAfter  int64 `json:"size_after_bytes"`
	// The same purge again, yielding as the retention job does, under
	// steady traffic at purgeTrafficRate: how long it took, and the
	// traffic's achieved rate and commit-to-call p99 without and during
	// the purge.
	TookUnderTraffic time.Duration `json:"took_under_traffic_ns"`
	QuietPerSecond   float64       `json:"quiet_per_second"`
	QuietP99         time.Duration `json:"quiet_p99_ns"`
	PurgePerSecond   float64       `json:"during_purge_per_second"`
	PurgeP99         time.Duration `json:"during_purge_p99_ns"`
}

// purgeCost measures retention's purge of expired effects: alone and at
// full speed (as outboxctl purge runs it), how long it takes, the WAL it
// writes and what the tables weigh afterwards; then again, yielding as the
// periodic retention job does, while a dispatcher serves steady traffic:
// what it does to the traffic.
func (b *bench) purgeCost(ctx context.Context) (purgeResult, error) {
	var r purgeResult
	var err error
	purge := func(yield bool) (outboxtype.PurgeResult, time.Duration, error) {
		var purged atomic.Int64
		done := make(chan struct{})
		go progress(fmt.Sprintf("purging %d expired effects", r.Expired), r.Expired, func() int { return int(purged.Load()) }, done)
		defer close(done)
		op, err := b.operator()
		if err != nil {
			return outboxtype.PurgeResult{}, 0, err
		}
		start := time.Now()
		res, err := op.PurgeInBatches(ctx, time.Now().Add(-sideeffects.DefaultRetention), outboxtype.PurgeOptions{Yield: yield})
		took := time.Since(start)
		purged.Store(res.Effects)
		if err == nil && res.Effects != int64(r.Expired) {
			err = fmt.Errorf("purge deleted %d of %d expired effects", res.Effects, r.Expired)
		}
		return res, took, err
	}

	// Alone.
	if r.Expired, err = b.seedExpired(ctx, b.s.PurgeEffects); err != nil {
		return r, err
	}
	if r.SizeBefore, err = b.outboxSize(ctx); err != nil {
		return r, err
	}
	if _, err := b.pool.Exec(ctx, "CHECKPOINT"); err != nil {
		return r, err
	}
	var lsn string
	if err := b.pool.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn); err != nil {
		return r, err
	}
	res, took, err := purge(false)
	if err != nil {
		return r, err
	}
	r.Took, r.Effects, r.Events = took, res.Effects, res.Events
	if err := b.pool.QueryRow(ctx, "SELECT pg_current_wal_lsn() - $1::pg_lsn", lsn).Scan(&r.WALBytes); err != nil {
		return r, err
	}
	if err := b.vacuum(ctx); err != nil {
		return r, err
	}
	if r.SizeAfter, err = b.outboxSize(ctx); err != nil {
		return r, err
	}
	if err := b.clear(ctx); err != nil {
		return r, err
	}

	// Under traffic: traffic alone for PurgeQuiet (ten seconds by
	// default), then the purge.
	if _, err = b.seedExpired(ctx, b.s.PurgeEffects); err != nil {
		return r, err
	}
	// The purge under test is the benchmark's own call, not the
	// dispatcher's periodic one.
	tr, err := b.startTraffic(ctx, trafficOpts{rate: purgeTrafficRate, mode: enqueueModes[0]})
	if err != nil {
		return r, err
	}
	defer tr.stop()
	quietFrom := time.Now()
	if err := sleepCtx(ctx, cmp.Or(b.s.PurgeQuiet, 10*time.Second)); err != nil {
		return r, err
	}
	quietTo := time.Now()
	if _, r.TookUnderTraffic, err = purge(true); err != nil {
		return r, err
	}
	end := time.Now()
	if err := tr.stop(); err != nil {
		return r, err
	}
	r.QuietPerSecond, r.QuietP99 = tr.window(quietFrom, quietTo)
	r.PurgePerSecond, r.PurgeP99 = tr.window(end.Add(-r.TookUnderTraffic), end)
	return r, b.clear(ctx)
}

func (b *bench) outboxSize(ctx context.Context) (int64, error) {
	var n int64
	err := b.pool.QueryRow(ctx, "SELECT pg_total_relation_size($1::regclass) + pg_total_relation_size($2::regclass)",
		b.schema+".side_effects", b.schema+".outbox_events").Scan(&n)
	return n, err
}

// seedExpired writes about n confirmed effects, three per event, that
// ended between 31 and 40 days ago: past the default retention. It returns
// how many.
func (b *bench) seedExpired(ctx context.Context, n int) (int, error) {
	const batch = 150_000
	var seeded atomic.Int64
	done := make(chan struct{})
	go progress(fmt.Sprintf("seeding %d expired effects", n), n, func() int { return int(seeded.Load()) }, done)
	defer close(done)
	for int(seeded.Load()) < n {
		events := max(1, min(batch, n-int(seeded.Load()))/len(historyKinds))
		_, err := b.pool.Exec(ctx, `
WITH ev AS (
	INSERT INTO `+b.schema+`.outbox_events (id, aggregate_type, aggregate_id, event_type, payload, created_at)
	SELECT gen_random_uuid(), 'order', 'ord_' || i, 'order.paid', '{"amount": 4200, "currency": "eur"}',
		now() - interval '31 days' - random() * interval '9 days'
	FROM generate_series(1, $1) i
	RETURNING id, created_at)
INSERT INTO `+b.schema+`.side_effects (id, source_id, kind, provider, payload, state, attempts, total_attempts,
	created_at, updated_at, fired_at, first_fired_at, confirmed_at, key_window_from)
SELECT `+b.schema+`.outboxd_effect_id(ev.id, k.kind), ev.id, 'expired.' || k.kind, 'noop',
	'{"operation": "payment_intent.capture", "params": {"id": "pi_3NqXj2LkdIwHu7ix1x0Fz9p2"}}', 'confirmed', 1, 1,
	ev.created_at, ev.created_at + interval '80 milliseconds', ev.created_at + interval '20 milliseconds',
	ev.created_at + interval '20 milliseconds', ev.created_at + interval '80 milliseconds', ev.created_at + interval '20 milliseconds'
FROM ev CROSS JOIN unnest($2::text[]) AS k(kind)`, events, historyKinds)
		if err != nil {
			return int(seeded.Load()), err
		}
		seeded.Add(int64(events * len(historyKinds)))
	}
	return int(seeded.Load()), b.vacuum(ctx)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
