package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/testdb"
)

// smokeEnv runs the benchmark's end-to-end runs (make test-bench, a CI step
// of its own): each is a whole benchmark at a tiny size, minutes of both
// cores, and make test stays a suite of minutes without them.
const smokeEnv = "OUTBOXD_BENCH_SMOKE"

func needsSmoke(t *testing.T) {
	t.Helper()
	if os.Getenv(smokeEnv) == "" {
		t.Skip("a whole benchmark run: make test-bench (" + smokeEnv + "=1) runs it")
	}
}

// tiny is the benchmark at a tiny size, every phase on: the whole-run
// tests each skip the phases the other runs, and run side by side.
func tiny() settings {
	return settings{
		DatabaseURL: testdb.URL(), EnqueueDuration: 300 * time.Millisecond, Effects: 200, WebhookEffects: 200,
		Workers: 10, PoolSize: 20, FetchCooldown: 5 * time.Millisecond, FetchPollInterval: 100 * time.Millisecond,
		Rates: []int{100}, RateDuration: 500 * time.Millisecond, AdminRows: 5000,
		History: []int{0, 900}, HistoryEffects: 100, PurgeEffects: 300, PurgeQuiet: time.Second, ReadsSettle: 50 * time.Millisecond,
		LimitsEffects: 100, NoisyBacklog: 300, NoisyDuration: time.Second, BrokerEffects: 100,
	}
}

// TestBenchRuns runs the enqueue, dispatch and latency phases at a tiny
// size (TestBenchRunsLimitsAndHistory the others): it checks that the
// benchmark works end to end and reports every figure, not how fast
// anything is.
func TestBenchRuns(t *testing.T) {
	needsSmoke(t)
	t.Parallel()
	s := tiny()
	s.Skip = "limits,history,purge,admin"
	rep, printed := runBench(t, s)
	require.Len(t, rep.Enqueue, 18, "bare, four ways of enqueueing, traced, from SQL two ways and the Watermill publisher, at two concurrencies")
	for _, i := range []int{4, 13} {
		require.Contains(t, rep.Enqueue[i].Name, "effects by dispatcher")
		require.Positive(t, rep.Enqueue[i].CostRatio)
	}
	for _, i := range []int{8, 17} {
		require.Contains(t, rep.Enqueue[i].Name, "Watermill")
		require.Positive(t, rep.Enqueue[i].Txs)
		require.Positive(t, rep.Enqueue[i].CostRatio)
	}
	for _, i := range []int{5, 14} {
		require.Contains(t, rep.Enqueue[i].Name, "traced")
		require.Positive(t, rep.Enqueue[i].VsUntraced)
	}
	for _, i := range []int{6, 7, 15, 16} {
		require.Contains(t, rep.Enqueue[i].Name, "from SQL")
		require.Positive(t, rep.Enqueue[i].Txs, "the SQL function enqueued")
	}
	require.Contains(t, rep.Enqueue[7].Name, "carry => true")
	require.Len(t, rep.Fanout, 6, "1, 10 and 100 endpoints at two concurrencies")
	for _, r := range rep.Fanout {
		require.Positive(t, r.Subscribers, "fanned out to %d", r.Endpoints)
		require.Positive(t, r.CostPerEffect)
	}
	require.Len(t, rep.Brokers, 5, "the no-op provider, outboxd to NATS and Kafka, Watermill's forwarder to each")
	for _, i := range []int{1, 2} {
		require.Positive(t, rep.Brokers[i].VsNoop, rep.Brokers[i].Name)
		require.Positive(t, rep.Brokers[i].VsWatermill, rep.Brokers[i].Name)
	}
	require.Len(t, rep.Idempotency, 4, "with and without the middleware, at two concurrencies")
	require.Positive(t, rep.Idempotency[1].CostRatio)
	require.Len(t, rep.Dispatch, 10, "River fast, River with outboxd's settings, Watermill's forwarder, outboxd no-op, traced, "+
		"with provider references without and with their index, outboxd webhook with a job each and from the intake, one endpoint")
	require.Contains(t, rep.Dispatch[9].Name, "endpoint provider")
	require.Positive(t, rep.Dispatch[9].PerSecond)
	require.Contains(t, rep.Dispatch[8].Name, "webhook provider, jobs by dispatcher")
	require.Positive(t, rep.Dispatch[8].PerSecond)
	require.Positive(t, rep.Dispatch[7].VsNoop, "the webhooks against the no-op provider")
	require.Contains(t, rep.Dispatch[6].Name, "answering a reference")
	require.Positive(t, rep.Dispatch[6].VsNoRefIndex)
	require.Equal(t, 400, rep.Dispatch[5].N, "two runs of each, alternating")
	require.Contains(t, rep.Dispatch[4].Name, "traced")
	require.Positive(t, rep.Dispatch[4].VsUntraced)
	require.Contains(t, rep.Dispatch[2].Name, "Watermill")
	require.Equal(t, 200, rep.Dispatch[2].N, "every message forwarded")
	ours := rep.Dispatch[3]
	require.Contains(t, ours.Name, "outboxd, no-op")
	require.Positive(t, ours.VsWatermill)
	require.Len(t, rep.Latency, 5, "one rate, five ways of enqueueing")
	require.NotEmpty(t, rep.Machine.Autovacuum)
	require.Equal(t, 200, ours.N)
	require.Positive(t, ours.VsRiver)
	require.Positive(t, ours.VsRiverSame)
	require.Positive(t, rep.Enqueue[1].CostRatio)
	require.Equal(t, 50, rep.Latency[0].N)
	require.Equal(t, latencyRuns, rep.Latency[0].Runs)
	require.LessOrEqual(t, rep.Latency[0].CallP99Min, rep.Latency[0].CallP99)
	require.GreaterOrEqual(t, rep.Latency[0].CallP99Max, rep.Latency[0].CallP99)
	require.GreaterOrEqual(t, ours.Updates, int64(2*200), "a claim and a confirmation per effect counted")
	require.Positive(t, ours.HOTUpdates, "claims are HOT updates")
	require.Len(t, rep.Replicas, 3, "1, 2 and 3 dispatchers")
	for i, r := range rep.Replicas {
		require.Equal(t, i+1, r.Replicas)
		require.Equal(t, int64(200), r.Calls, "every effect called once")
		require.Zero(t, r.DoubleFires)
	}
	require.Positive(t, rep.Replicas[2].VsOne)
	require.Len(t, rep.Shards, 3, "1, 2 and 3 shards")
	for i, r := range rep.Shards {
		require.Equal(t, i+1, r.Shards)
		require.Equal(t, int64((i+1)*200), r.Calls, "every effect of every shard called once")
		require.Zero(t, r.DoubleFires)
	}
	require.Positive(t, rep.Shards[2].VsOne)
	require.Contains(t, printed, "DISPATCH")
	require.Contains(t, printed, "HOT UPDATES")
	require.Contains(t, printed, "VS WATERMILL FORWARDER")
	require.Contains(t, printed, "autovacuum")
	require.Contains(t, printed, "IDEMPOTENCY-KEY MIDDLEWARE")
}

// TestBenchRunsTheIntakeRows runs the dispatch phase as -intake-only
// does: effects found in the intake, and effects their events carry,
// against River's rows.
func TestBenchRunsTheIntakeRows(t *testing.T) {
	needsSmoke(t)
	t.Parallel()
	s := tiny()
	s.Skip = "enqueue,fanout,idempotency,webhook,brokers,replicas,shards,latency,history,purge,admin,limits,watermill"
	s.IntakeOnly = true
	rep, _ := runBench(t, s)
	require.Len(t, rep.Dispatch, 4, "River fast, River with outboxd's settings, from the intake, carried by their events")
	require.Contains(t, rep.Dispatch[2].Name, "jobs by dispatcher")
	carried := rep.Dispatch[3]
	require.Contains(t, carried.Name, "effects by dispatcher")
	require.Equal(t, 200, carried.N, "every carried effect written out and called")
	require.Positive(t, carried.VsIntake)
	require.Positive(t, carried.VsRiver)
}

// TestBenchRunsLimitsAndHistory runs the limits, history, purge and admin
// phases at a tiny size, beside TestBenchRuns.
func TestBenchRunsLimitsAndHistory(t *testing.T) {
	needsSmoke(t)
	t.Parallel()
	s := tiny()
	s.Skip = "watermill,enqueue,fanout,idempotency,dispatch,webhook,brokers,replicas,shards,latency"
	rep, printed := runBench(t, s)
	require.Len(t, rep.LimitCost, 2, "two alternating pairs")
	require.Positive(t, rep.LimitCost[1].OnVsOff)
	require.Positive(t, rep.LimitCost[1].Granted, "the limited runs leased tokens")
	require.Len(t, rep.Limits, 8, "Stripe and webhook, with 1 and 3 replicas, 3 with no webhook limit set, and 3 shards in one process")
	require.Equal(t, 3, rep.Limits[6].Shards, rep.Limits[6].Name)
	require.Len(t, rep.Noisy, 2, "with and without tenants")
	require.True(t, rep.Noisy[0].Tenants)
	require.Positive(t, rep.Noisy[0].BServed, "B's effects were called")
	for _, r := range rep.Limits {
		require.Zero(t, r.Failed, r.Name)
		require.Zero(t, r.ExecutedTwice, r.Name)
		require.Positive(t, r.Requests, r.Name)
		require.Positive(t, r.VsIdeal, r.Name)
	}
	require.Len(t, rep.Admin, 6)
	for _, a := range rep.Admin {
		require.True(t, a.IndexUsed, "%s: %s", a.Name, a.Plan)
	}
	require.Len(t, rep.History, 2, "empty tables, then 900 effects of history")
	require.Zero(t, rep.History[0].Effects)
	grown := rep.History[1]
	require.Equal(t, 900, grown.Effects)
	require.Equal(t, keptJobs(900), grown.RiverJobs, "an hour of completed River jobs kept")
	require.Greater(t, grown.SideEffectsBytes, rep.History[0].SideEffectsBytes)
	require.Positive(t, grown.EnqueueVsEmpty)
	require.Positive(t, grown.DispatchVsEmpty)
	require.Empty(t, rep.History[0].Reads, "no reads on empty tables")
	var web, events, ctl int
	for _, r := range grown.Reads {
		switch r.Via {
		case viaWeb:
			web++
		case viaEvents:
			events++
		case viaCtl:
			ctl++
		}
		if r.Via != viaIdle {
			require.Positive(t, r.Median, r.Read)
			require.GreaterOrEqual(t, r.Max, r.Median, r.Read)
		}
	}
	require.Equal(t, 9, web, "every web view page served by outboxd run")
	require.Equal(t, 1, events, "a provider event through outboxd run's endpoint")
	require.Equal(t, 10, ctl, "outboxctl's reads, and its floor")
	require.Positive(t, grown.P99VsEmpty)
	require.Contains(t, printed, "COST VERSUS HISTORY")
	require.NotNil(t, rep.Purge)
	require.Equal(t, 300, rep.Purge.Expired)
	require.Equal(t, int64(300), rep.Purge.Effects, "every expired effect purged")
	require.Equal(t, int64(100), rep.Purge.Events, "with its event")
	require.Positive(t, rep.Purge.WALBytes)
	require.Positive(t, rep.Purge.QuietPerSecond, "the traffic ran")
	require.Contains(t, printed, "RETENTION PURGE")
	require.Contains(t, printed, "autovacuum")
}

// TestEveryCandidateLayoutRuns runs the enqueue and dispatch phases on
// each candidate storage layout in layouts/ (docs/storage.md): each must
// take the default enqueue, the SQL function's and the jobs-in-tx one,
// and burn every effect down, or its figures mean nothing.
func TestEveryCandidateLayoutRuns(t *testing.T) {
	needsSmoke(t)
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("layouts", "*.sql"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(files), 3, "HOT confirmations, fewest entries, ended apart")
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			t.Parallel()
			rep, _ := runBench(t, settings{
				DatabaseURL: testdb.URL(), EnqueueDuration: 200 * time.Millisecond, Effects: 300, IntakeOnly: true,
				Workers: 10, PoolSize: 20, FetchCooldown: 5 * time.Millisecond, FetchPollInterval: 100 * time.Millisecond,
				LayoutSQL: file,
				Skip:      "fanout,idempotency,webhook,brokers,replicas,shards,latency,history,purge,admin,limits,watermill",
			})
			require.Equal(t, file, rep.Settings.LayoutSQL)
			for _, r := range rep.Enqueue {
				require.Positive(t, r.Txs, "%s x%d committed nothing", r.Name, r.Concurrency)
			}
			var burnt bool
			for _, r := range rep.Dispatch {
				if strings.HasPrefix(r.Name, "outboxd, no-op provider") {
					require.Equal(t, 300, r.N, r.Name)
					require.Positive(t, r.PerSecond, r.Name)
					burnt = true
				}
			}
			require.True(t, burnt, "no outboxd burn-down row: %+v", rep.Dispatch)
		})
	}
}

// TestSoakRuns runs a soak with two-second "minutes": every row reports
// the traffic and the tables.
func TestSoakRuns(t *testing.T) {
	needsSmoke(t)
	t.Parallel()
	rep, printed := runBench(t, settings{
		DatabaseURL: testdb.URL(), Workers: 10, PoolSize: 20, FetchCooldown: 5 * time.Millisecond, FetchPollInterval: 50 * time.Millisecond,
		Soak: 6 * time.Second, SoakRate: 50, SoakTick: 2 * time.Second,
	})
	require.NotNil(t, rep.Soak)
	require.Empty(t, rep.Dispatch, "a soak runs instead of the phases")
	require.Len(t, rep.Soak.Minutes, 3)
	for _, m := range rep.Soak.Minutes {
		require.Positive(t, m.Achieved, "minute %d", m.Minute)
		require.Positive(t, m.P99, "minute %d", m.Minute)
		require.Positive(t, m.Effects.HeapBytes, "minute %d", m.Minute)
		require.Positive(t, m.BytesPerKept, "minute %d", m.Minute)
	}
	require.Greater(t, rep.Soak.Minutes[2].Effects.Live, int64(0))
	require.Contains(t, printed, "SOAK AT 50/S")
}

// TestSeedingRebuildsTheIndexesItDrops: a large seed drops the secondary
// indexes and builds them again; the tables end with the same indexes,
// defined as the migrations define them.
func TestSeedingRebuildsTheIndexesItDrops(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	b := &bench{pool: db.Pool, schema: db.Schema}
	ctx := context.Background()
	indexes := func() []string {
		rows, err := db.Pool.Query(ctx, `SELECT indexdef FROM pg_indexes WHERE schemaname = $1
			AND tablename IN ('side_effects', 'outbox_events') ORDER BY indexname`, db.Schema)
		require.NoError(t, err)
		defs, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return defs
	}
	before := indexes()
	rebuild, err := b.dropSecondaryIndexes(ctx)
	require.NoError(t, err)
	require.Less(t, len(indexes()), len(before), "secondary indexes dropped while seeding")
	require.NoError(t, rebuild())
	require.Equal(t, before, indexes())
}

// TestKeptJobsAtTenMillion: the River jobs kept for a history grow with it
// (an hour of a 28-day history), without overflowing at large sizes.
func TestKeptJobsAtTenMillion(t *testing.T) {
	require.Equal(t, 1488, keptJobs(1_000_000))
	require.Equal(t, 14880, keptJobs(10_000_000))
	require.Equal(t, 148809, keptJobs(100_000_000))
}

// runBench runs the benchmark with s, its figures written to a file of the
// test's, and returns them as read back from that file, with what it
// printed.
func runBench(t *testing.T, s settings) (report, string) {
	t.Helper()
	s.Out = filepath.Join(t.TempDir(), "bench.json")
	var buf bytes.Buffer
	require.NoError(t, run(context.Background(), &buf, s), buf.String())
	raw, err := os.ReadFile(s.Out)
	require.NoError(t, err)
	var rep report
	require.NoError(t, json.Unmarshal(raw, &rep))
	return rep, buf.String()
}
