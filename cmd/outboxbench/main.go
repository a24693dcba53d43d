// Command outboxbench measures what outboxd costs an application and how
// fast it dispatches, against the floor it stands on (Postgres and River),
// on the same machine in the same run. Every figure that matters is a ratio
// against a baseline measured in the same process.
//
//	go run ./cmd/outboxbench              # about 3 minutes on 2 cores
//	go run ./cmd/outboxbench -effects 5000 -admin-rows 100000   # a quick look
//
// It works in a schema of its own in DATABASE_URL and drops it at the end,
// prints a table and writes the same figures as JSON (-out).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/internal/cli"
	"github.com/outboxd/outboxd/migrations"
	"github.com/outboxd/outboxd/providers/webhook"
	"github.com/outboxd/outboxd/sideeffects"
)

// settings are the benchmark's knobs; River settings are shared by outboxd's
// dispatcher and the River baseline so the comparison is like for like.
type settings struct {
	DatabaseURL       string        `json:"-"`
	EnqueueDuration   time.Duration `json:"enqueue_duration"`
	WebhookMaxPerHost int           `json:"webhook_max_per_host"`
	Effects           int           `json:"effects"`
	WebhookEffects    int           `json:"webhook_effects"`
	BrokerEffects     int           `json:"broker_effects"`
	OrderedKeys       int           `json:"ordered_keys"`
	OrderedPerKey     int           `json:"ordered_per_key"`
	HotKeyEffects     int           `json:"hot_key_effects"`
	Workers           int           `json:"workers"`
	PoolSize          int           `json:"pool_size"`
	FetchCooldown     time.Duration `json:"fetch_cooldown"`
	FetchPollInterval time.Duration `json:"fetch_poll_interval"`
	Rates             []int         `json:"rates"`
	RateDuration      time.Duration `json:"rate_duration"`
	AdminRows         int           `json:"admin_rows"`
	History           []int         `json:"history"`
	HistoryEffects    int           `json:"history_effects"`
	// RiverJobs is how many finished dispatch jobs River's table holds at
	// each history size above zero, at least (River keeps completed jobs
	// for CompletedJobRetention: 250,000 is an hour at about 70/s).
	RiverJobs int `json:"river_jobs"`
	// SkipReads leaves the operator's reads out of the history phase;
	// ReadsSettle is how long a read's counters take to settle.
	SkipReads    bool          `json:"skip_reads,omitempty"`
	ReadsSettle  time.Duration `json:"reads_settle"`
	PurgeEffects int           `json:"purge_effects"`
	// PurgeQuiet is how long the purge phase's traffic runs alone before
	// the purge, its baseline.
	PurgeQuiet time.Duration `json:"purge_quiet"`
	// LimitsEffects is the Stripe backlog of the limits phase (the
	// webhook backlog is half of it).
	LimitsEffects int `json:"limits_effects"`
	// NoisyBacklog is tenant A's backlog in the noisy-tenant row, and
	// NoisyDuration how long tenant B commits meanwhile.
	NoisyBacklog int `json:"noisy_backlog"`
	// LimitsRuns picks the limits phase's runs by number (1: one replica,
	// 2: three, 3: three with no webhook limit, 4: three shards served by
	// one process); "" runs all.
	LimitsRuns string `json:"limits_runs,omitempty"`
	// SweepInterval is the dispatchers' sweep interval in the limits
	// phase (0: outboxd's default).
	SweepInterval time.Duration `json:"sweep_interval,omitempty"`
	NoisyDuration time.Duration `json:"noisy_duration"`
	Soak          time.Duration `json:"soak,omitempty"`
	SoakRate      int           `json:"soak_rate,omitempty"`
	// SoakTick shortens the soak's minute, for tests.
	SoakTick   time.Duration `json:"-"`
	Out        string        `json:"-"`
	CPUProfile string        `json:"-"`
	Skip       string        `json:"-"`
	IntakeOnly bool          `json:"intake_only,omitempty"`
	// DropIndexes are indexes of the migrated schema dropped before the
	// phases: a candidate storage layout measured against today's in the
	// same conditions (docs/storage.md). Reads that need them get slower.
	DropIndexes string `json:"drop_indexes,omitempty"`
	// CreateIndexes are indexes created after DropIndexes, each "table
	// (columns)" or "table USING method (columns)", separated by ";": the
	// indexes a candidate layout puts in place of those it drops.
	CreateIndexes string `json:"create_indexes,omitempty"`
	// LayoutSQL is a SQL file run on the migrated schema before the
	// phases: a candidate layout.
	LayoutSQL string `json:"layout_sql,omitempty"`
	// FillFactor, when not 0, is side_effects' fillfactor set before the
	// phases: room left on each page for its row's next versions.
	FillFactor int `json:"fillfactor,omitempty"`
}

// report is everything measured, as written to JSON.
type report struct {
	Machine  machine         `json:"machine"`
	Settings settings        `json:"settings"`
	Enqueue  []enqueueResult `json:"enqueue,omitempty"`
	// Fanout is an event fanned out to 1, 10 and 100 endpoints against
	// the same effects listed by hand.
	Fanout []fanoutResult `json:"fanout,omitempty"`
	// Idempotency is the Idempotency-Key middleware's cost per request.
	Idempotency []enqueueResult  `json:"idempotency,omitempty"`
	Dispatch    []dispatchResult `json:"dispatch,omitempty"`
	// Brokers is the relay to NATS JetStream and Kafka.
	Brokers []dispatchResult `json:"brokers,omitempty"`
	Latency []latencyResult  `json:"latency,omitempty"`
	Admin   []adminResult    `json:"admin,omitempty"`
	// Replicas is no-op dispatch with 1, 2 and 3 dispatchers.
	Replicas []replicaResult `json:"replicas,omitempty"`
	// Shards is no-op dispatch of 1, 2 and 3 shards' backlogs by one
	// process serving them all.
	Shards []shardResult `json:"shards,omitempty"`
	// History is the cost-versus-history phase, one row per size.
	History []historyResult `json:"history,omitempty"`
	// Purge is retention deleting expired effects under steady traffic.
	Purge *purgeResult `json:"purge,omitempty"`
	// Limits is the limits phase: throttling providers, 1 and 3
	// replicas; LimitCost no-op dispatch with a limit that does not bind.
	Limits    []limitsResult `json:"limits,omitempty"`
	LimitCost []limitCost    `json:"limit_cost,omitempty"`
	// Noisy is the noisy-tenant row: B's commit -> call while A drains.
	Noisy []noisyResult `json:"noisy,omitempty"`
	// Soak is a -soak run, instead of the phases.
	Soak *soakResult `json:"soak,omitempty"`
}

type machine struct {
	CPU      string `json:"cpu"`
	Cores    int    `json:"cores"`
	Go       string `json:"go"`
	Postgres string `json:"postgres"`
	// Autovacuum is the server's autovacuum setting during the run; the
	// benchmark vacuums its tables between phases either way.
	Autovacuum string `json:"autovacuum"`
	When       string `json:"when"`
}

func main() {
	var s settings
	var rates, history string
	flag.StringVar(&s.DatabaseURL, "database-url", envOr("DATABASE_URL", cli.DefaultDatabaseURL), "Postgres URL [$DATABASE_URL]")
	flag.DurationVar(&s.EnqueueDuration, "enqueue-duration", 3*time.Second, "duration of each enqueue-cost run (4 runs)")
	flag.IntVar(&s.Effects, "effects", 50000, "effects (and River jobs) burnt down in the dispatch comparison")
	flag.IntVar(&s.WebhookEffects, "webhook-effects", 20000, "effects burnt down through the webhook provider")
	flag.IntVar(&s.BrokerEffects, "broker-effects", 20000, "effects relayed to NATS JetStream and to Kafka in the brokers phase (0: skip it)")
	flag.IntVar(&s.OrderedKeys, "ordered-keys", 1000, "ordering keys in the ordered dispatch row (0: skip the ordered rows)")
	flag.IntVar(&s.OrderedPerKey, "ordered-per-key", 20, "effects per ordering key in the ordered dispatch row")
	flag.IntVar(&s.HotKeyEffects, "hot-key-effects", 1000, "effects on one ordering key in the hot-key row")
	flag.IntVar(&s.WebhookMaxPerHost, "webhook-max-per-host", webhook.DefaultMaxPerHost, "concurrent requests to the one local receiver (outboxd's default)")
	flag.IntVar(&s.Workers, "workers", sideeffects.DefaultConcurrency, "workers for the queue under test (outboxd and the River baseline with outboxd's settings; outboxd's default)")
	flag.IntVar(&s.PoolSize, "pool", 60, "Postgres pool size")
	flag.DurationVar(&s.FetchCooldown, "fetch-cooldown", sideeffects.DefaultFetchCooldown, "River FetchCooldown (both sides; outboxd's default)")
	flag.DurationVar(&s.FetchPollInterval, "fetch-poll-interval", sideeffects.DefaultFetchPollInterval, "River FetchPollInterval (both sides; outboxd's default)")
	flag.StringVar(&rates, "rates", "200,1000", "offered rates for the latency runs, effects per second")
	flag.DurationVar(&s.RateDuration, "rate-duration", 5*time.Second, "duration of each latency run")
	flag.IntVar(&s.AdminRows, "admin-rows", 1_000_000, "effects in the table for the admin-query timings")
	flag.StringVar(&history, "history", "0,1000000", "effects of confirmed history in the tables for the cost-versus-history phase, ascending (0: empty tables, the baseline)")
	flag.IntVar(&s.HistoryEffects, "history-effects", 20000, "effects burnt down at each history size")
	flag.IntVar(&s.RiverJobs, "river-jobs", 250000, "finished dispatch jobs in River's table at each history size above zero, at least (as River leaves it: an hour at about 70/s)")
	flag.BoolVar(&s.SkipReads, "skip-reads", false, "leave out the operator's reads (web view, provider event, outboxctl) at each history size")
	flag.DurationVar(&s.ReadsSettle, "reads-settle", 1500*time.Millisecond, "wait after each read for Postgres's scan counters to settle")
	flag.IntVar(&s.PurgeEffects, "purge-effects", 1_000_000, "expired effects retention purges in the purge phase")
	flag.DurationVar(&s.PurgeQuiet, "purge-quiet", 10*time.Second, "how long the purge phase's traffic runs alone before the purge (its baseline)")
	flag.DurationVar(&s.Soak, "soak", 0, "instead of the phases, offer -rate effects per second for this long and report each minute (e.g. -soak 30m -rate 300, against a Postgres with autovacuum on)")
	flag.IntVar(&s.SoakRate, "rate", 300, "effects per second offered in a -soak run")
	flag.StringVar(&s.LimitsRuns, "limits-runs", "", "the limits phase's runs to make, by number: 1 one replica, 2 three, 3 three with no webhook limit, 4 three shards served by one process (default all)")
	flag.DurationVar(&s.SweepInterval, "sweep-interval", 0, "the dispatchers' sweep interval in the limits phase (default outboxd's)")
	flag.IntVar(&s.NoisyBacklog, "noisy-backlog", 50000, "tenant A's backlog in the limits phase's noisy-tenant row (0: none)")
	flag.DurationVar(&s.NoisyDuration, "noisy-duration", time.Minute, "how long tenant B commits 5 refunds a second while A drains")
	flag.IntVar(&s.LimitsEffects, "limits-effects", 3000, "Stripe effects in the limits phase's backlog (at 100/s; the webhook backlog is half, at 50/s)")
	flag.StringVar(&s.Out, "out", "bench.json", "write the figures here as JSON (empty: don't)")
	flag.StringVar(&s.CPUProfile, "cpuprofile", "", "write outboxbench's own CPU profile here (go tool pprof)")
	flag.StringVar(&s.CreateIndexes, "create-indexes", "", `indexes to create after -drop-indexes, each "table (columns)" or "table USING method (columns)", separated by ";" (a candidate layout's replacements)`)
	flag.StringVar(&s.LayoutSQL, "layout-sql", "", "a SQL file run on the migrated bench schema (search_path set to it) before the phases: a candidate storage layout, such as cmd/outboxbench/layouts/*.sql (docs/storage.md)")
	flag.StringVar(&s.DropIndexes, "drop-indexes", "", "comma-separated indexes (or constraints) of outboxd's tables to drop before the phases, to measure a candidate storage layout (docs/storage.md)")
	flag.IntVar(&s.FillFactor, "fillfactor", 0, "side_effects' fillfactor (10-100) set before the phases, to measure a candidate storage layout (0: the migrated one)")
	flag.BoolVar(&s.IntakeOnly, "intake-only", false, "in the dispatch phase, burn down only -effects effects found in the intake (outbox.JobsByDispatcher), beside River's baselines")
	flag.StringVar(&s.Skip, "skip", "", "comma-separated phases to skip: enqueue,fanout,idempotency,dispatch,webhook,brokers,replicas,shards,latency,history,purge,admin,limits, and watermill (the peer in bench/watermill)")
	flag.Parse()
	for _, r := range strings.Split(rates, ",") {
		var n int
		if _, err := fmt.Sscan(strings.TrimSpace(r), &n); err != nil || n <= 0 {
			fmt.Fprintf(os.Stderr, "outboxbench: -rates %q: want positive integers\n", rates)
			os.Exit(2)
		}
		s.Rates = append(s.Rates, n)
	}
	for _, h := range strings.Split(history, ",") {
		var n int
		if _, err := fmt.Sscan(strings.TrimSpace(h), &n); err != nil || n < 0 || (len(s.History) > 0 && n <= s.History[len(s.History)-1]) {
			fmt.Fprintf(os.Stderr, "outboxbench: -history %q: want ascending non-negative integers, such as 0,1000000\n", history)
			os.Exit(2)
		}
		s.History = append(s.History, n)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if s.CPUProfile != "" {
		f, err := os.Create(s.CPUProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "outboxbench:", err)
			os.Exit(1)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "outboxbench:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	if err := run(ctx, os.Stdout, s); err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "outboxbench:", err)
		os.Exit(1)
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// bench holds a run's shared state.
type bench struct {
	s      settings
	pool   *pgxpool.Pool
	schema string
	// wm is the Watermill peer; nil when skipped.
	wm *watermill
	// seq numbers the benchmark's orders, so that no two share an event id.
	seq atomic.Int64
	// history is how many effects of history the tables hold; clear keeps
	// them.
	history int
	// bins are outboxd and outboxctl, built for the operator's reads.
	bins *binaries
	// cleanup runs when the run ends.
	cleanup []func()
	// traced, when set, is the tracing dispatchers use (the traced rows).
	traced *benchTracing
}

func run(ctx context.Context, out io.Writer, s settings) error {
	pool, err := cli.Connect(ctx, s.DatabaseURL, int32(s.PoolSize))
	if err != nil {
		return err
	}
	defer pool.Close()
	schema, drop, err := migrations.Temporary(ctx, pool, "outboxd_bench")
	if err != nil {
		return err
	}
	defer drop()
	if err := dropIndexes(ctx, pool, schema, s.DropIndexes); err != nil {
		return err
	}
	if err := createIndexes(ctx, pool, schema, s.CreateIndexes); err != nil {
		return err
	}
	if err := layoutSQL(ctx, pool, schema, s.LayoutSQL); err != nil {
		return err
	}
	if s.FillFactor != 0 {
		if s.FillFactor < 10 || s.FillFactor > 100 {
			return fmt.Errorf("-fillfactor %d: give 10 to 100", s.FillFactor)
		}
		if _, err := pool.Exec(ctx, fmt.Sprintf("ALTER TABLE %s SET (fillfactor = %d)",
			pgx.Identifier{schema, "side_effects"}.Sanitize(), s.FillFactor)); err != nil {
			return fmt.Errorf("-fillfactor: %w", err)
		}
	}
	bn := &bench{s: s, pool: pool, schema: schema}
	defer func() {
		for _, f := range bn.cleanup {
			f()
		}
	}()
	skip := map[string]bool{}
	for _, p := range strings.Split(s.Skip, ",") {
		skip[strings.TrimSpace(p)] = true
	}
	if s.Soak > 0 {
		if s.SoakRate <= 0 {
			return fmt.Errorf("-rate %d: want a positive rate", s.SoakRate)
		}
		rep := report{Settings: s, Machine: describeMachine(ctx, pool)}
		fmt.Fprintf(out, "outboxbench soak: %s, %d cores, %s, %s, autovacuum %s, %d effects/s for %s\n",
			rep.Machine.CPU, rep.Machine.Cores, rep.Machine.Go, rep.Machine.Postgres, rep.Machine.Autovacuum, s.SoakRate, s.Soak)
		res, err := bn.soak(ctx, out, s.Soak, s.SoakRate, s.SoakTick)
		if err != nil {
			return fmt.Errorf("soak: %w", err)
		}
		rep.Soak = &res
		return writeReport(out, s.Out, rep)
	}
	if !skip["watermill"] {
		dir, err := os.MkdirTemp("", "outboxbench")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		if bn.wm, err = buildWatermill(ctx, dir, s.DatabaseURL, schema); err != nil {
			return err
		}
	}

	rep := report{Settings: s, Machine: describeMachine(ctx, pool)}
	fmt.Fprintf(out, "outboxbench: %s, %d cores, %s, %s, autovacuum %s (tables vacuumed between phases)\n\n",
		rep.Machine.CPU, rep.Machine.Cores, rep.Machine.Go, rep.Machine.Postgres, rep.Machine.Autovacuum)
	if !skip["enqueue"] {
		if rep.Enqueue, err = bn.enqueueCost(ctx); err != nil {
			return fmt.Errorf("enqueue cost: %w", err)
		}
	}
	if !skip["fanout"] {
		if rep.Fanout, err = bn.fanoutCost(ctx); err != nil {
			return fmt.Errorf("fan-out cost: %w", err)
		}
	}
	if !skip["idempotency"] {
		if rep.Idempotency, err = bn.idempotencyCost(ctx); err != nil {
			return fmt.Errorf("idempotency middleware cost: %w", err)
		}
	}
	if !skip["dispatch"] {
		if rep.Dispatch, err = bn.dispatchThroughput(ctx, !skip["webhook"]); err != nil {
			return fmt.Errorf("dispatch: %w", err)
		}
	}
	if !skip["brokers"] && s.BrokerEffects > 0 {
		if rep.Brokers, err = bn.brokerRelay(ctx); err != nil {
			return fmt.Errorf("brokers: %w", err)
		}
	}
	if !skip["replicas"] {
		if rep.Replicas, err = bn.replicaThroughput(ctx); err != nil {
			return fmt.Errorf("replicas: %w", err)
		}
	}
	if !skip["shards"] {
		if rep.Shards, err = bn.shardThroughput(ctx); err != nil {
			return fmt.Errorf("shards: %w", err)
		}
	}
	if !skip["limits"] && s.LimitsEffects > 0 {
		if rep.LimitCost, err = bn.limitsOverhead(ctx); err != nil {
			return fmt.Errorf("limits cost: %w", err)
		}
		if rep.Limits, err = bn.limits(ctx); err != nil {
			return fmt.Errorf("limits: %w", err)
		}
		if s.NoisyBacklog > 0 {
			if rep.Noisy, err = bn.noisyTenants(ctx); err != nil {
				return fmt.Errorf("noisy tenant: %w", err)
			}
		}
	}
	if !skip["latency"] {
		if rep.Latency, err = bn.latency(ctx); err != nil {
			return fmt.Errorf("latency: %w", err)
		}
	}
	if !skip["history"] && len(s.History) > 0 {
		if rep.History, err = bn.costVersusHistory(ctx); err != nil {
			return fmt.Errorf("cost versus history: %w", err)
		}
	}
	if !skip["purge"] && s.PurgeEffects > 0 {
		p, err := bn.purgeCost(ctx)
		if err != nil {
			return fmt.Errorf("purge: %w", err)
		}
		rep.Purge = &p
	}
	if !skip["admin"] {
		if rep.Admin, err = bn.adminQueries(ctx); err != nil {
			return fmt.Errorf("admin queries: %w", err)
		}
	}
	printReport(out, rep)
	return writeReport(out, s.Out, rep)
}

// operator is the operator API over the bench schema.
func (b *bench) operator() (*sideeffects.Operator, error) {
	return sideeffects.NewOperator(b.pool, sideeffects.OperatorConfig{Schema: b.schema})
}

// writeReport writes rep as JSON to path, unless path is empty.
func writeReport(out io.Writer, path string, rep report) error {
	if path == "" {
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	enc := json.NewEncoder(f)
	enc.SetIndent("", "  ")
	if err := enc.Encode(rep); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nfigures written to %s\n", path)
	return nil
}

func describeMachine(ctx context.Context, pool *pgxpool.Pool) machine {
	m := machine{Cores: runtime.NumCPU(), Go: runtime.Version(), When: time.Now().UTC().Format(time.RFC3339), CPU: "unknown CPU"}
	if raw, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(raw), "\n") {
			if name, ok := strings.CutPrefix(line, "model name"); ok {
				m.CPU = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(name), ":"))
				break
			}
		}
	}
	var v string
	if err := pool.QueryRow(ctx, "SHOW server_version").Scan(&v); err == nil {
		m.Postgres = "PostgreSQL " + strings.Fields(v)[0]
	}
	if err := pool.QueryRow(ctx, "SHOW autovacuum").Scan(&m.Autovacuum); err != nil {
		m.Autovacuum = "unknown"
	}
	return m
}

// vacuum vacuums and analyzes the bench schema's busy tables, so that each
// phase starts from the same state whether or not autovacuum runs.
func (b *bench) vacuum(ctx context.Context) error {
	rows, err := b.pool.Query(ctx, "SELECT format('%I.%I', schemaname, tablename) FROM pg_tables WHERE schemaname = $1", b.schema)
	if err != nil {
		return err
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(tables) == 0 {
		return err
	}
	_, err = b.pool.Exec(ctx, "VACUUM ANALYZE "+strings.Join(tables, ", "))
	return err
}

func printReport(out io.Writer, rep report) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	if len(rep.Enqueue) > 0 {
		fmt.Fprintln(tw, "\nENQUEUE COST\tCONC\tTX/S\tP50\tP99\tCOST VS BARE (TX/S RATIO)")
		for _, r := range rep.Enqueue {
			cost := ratioStr(r.CostRatio, "target <= 1.5")
			if r.VsUntraced > 0 {
				cost += fmt.Sprintf("; %.2fx the untraced rate (target >= 0.9)", r.VsUntraced)
			}
			fmt.Fprintf(tw, "%s\t%d\t%.0f\t%s\t%s\t%s\n", r.Name, r.Concurrency, r.TPS, ms(r.P50), ms(r.P99), cost)
		}
	}
	if len(rep.Fanout) > 0 {
		fmt.Fprintln(tw, "\nFAN-OUT (ENDPOINTS, JOBS IN TX)\tCONC\tSUBSCRIBERS TX/S\tLISTED TX/S\tEFFECTS/S\tCOST PER EFFECT VS LISTED")
		for _, r := range rep.Fanout {
			fmt.Fprintf(tw, "%d endpoints\t%d\t%.0f\t%.0f\t%.0f\t%.2fx\n", r.Endpoints, r.Concurrency, r.Subscribers, r.ByHand, r.EffectsPerSecond, r.CostPerEffect)
		}
	}
	if len(rep.Idempotency) > 0 {
		fmt.Fprintln(tw, "\nIDEMPOTENCY-KEY MIDDLEWARE\tCONC\tREQ/S\tP50\tP99\tCOST VS NO MIDDLEWARE (REQ/S RATIO)")
		for _, r := range rep.Idempotency {
			fmt.Fprintf(tw, "%s\t%d\t%.0f\t%s\t%s\t%s\n", r.Name, r.Concurrency, r.TPS, ms(r.P50), ms(r.P99), ratioStr(r.CostRatio, "target <= 1.5"))
		}
	}
	if len(rep.LimitCost) > 0 {
		fmt.Fprintln(tw, "\nLIMIT NOT BINDING (NO-OP DISPATCH)\tN\tWITH A LIMIT/S\tWITHOUT/S\tRATIO")
		for _, c := range rep.LimitCost {
			fmt.Fprintf(tw, "limit 1,000,000/s\t%d\t%.0f\t%.0f\t%.2fx (target >= 0.9)\n", c.N, c.On, c.Off, c.OnVsOff)
		}
	}
	if len(rep.Limits) > 0 {
		fmt.Fprintln(tw, "\nLIMITS (BACKLOG, THROTTLING PROVIDER)\tLIMIT\tOUTBOXD GIVEN\tN\t429s\tATTEMPTS MEAN/MAX\tREQS MAX\tFAILED\tTWICE\tDRAIN VS IDEAL\tACHIEVED\tMAX 10S\tMAX OFFERED 1S")
		for _, r := range rep.Limits {
			fmt.Fprintf(tw, "%s\t%.0f/s\t%s\t%d\t%.1f%% (%d of %d)\t%.2f/%d\t%d\t%d\t%d\t%.2fx (%.0fs vs %.0fs)\t%.0f%%\t%.0f%%\t%.0f%%\n",
				r.Name, r.Limit, r.Configured, r.Effects, 100*r.ThrottledShare, r.Throttled, r.Requests, r.AttemptsMean, r.AttemptsMax,
				r.RequestsMax, r.Failed, r.ExecutedTwice, r.VsIdeal, r.Seconds, r.IdealSeconds, 100*r.Achieved, 100*r.Max10s, 100*r.MaxOffered1s)
		}
	}
	if len(rep.Noisy) > 0 {
		fmt.Fprintln(tw, "\nNOISY TENANT (A'S BACKLOG, B 5/S, LIMIT 100/S)\tBACKLOG\tSECONDS\tB CALLED\tB P50\tB P99\tB MAX\tA ACCEPTED/S")
		for _, r := range rep.Noisy {
			fmt.Fprintf(tw, "%s\t%d\t%.0f\t%d of %d\t%s\t%s\t%s\t%.0f\n", r.Name, r.Backlog, r.Seconds, r.BServed, r.BEnqueued,
				ms(r.P50), ms(r.P99)+" (target <= 1s)", ms(r.Max), r.AAccepted)
		}
	}
	if len(rep.Dispatch) > 0 {
		fmt.Fprintln(tw, "\nDISPATCH\tN\tPER SECOND\tSECONDS\tVS RIVER FAST\tVS RIVER, SAME SETTINGS\tVS WATERMILL FORWARDER\tVS UNORDERED\tHOT UPDATES")
		for _, r := range rep.Dispatch {
			hot, wm := "", ""
			if r.Updates > 0 {
				hot = fmt.Sprintf("%d of %d", r.HOTUpdates, r.Updates)
			}
			if r.VsWatermill > 0 {
				wm = fmt.Sprintf("%.2fx (target >= 1.0)", r.VsWatermill)
			}
			unordered := ""
			if r.VsUntraced > 0 {
				unordered = fmt.Sprintf("%.2fx untraced (target >= 0.9)", r.VsUntraced)
			}
			if r.VsUnordered > 0 {
				unordered = fmt.Sprintf("%.2fx", r.VsUnordered)
			}
			if r.VsNoRefIndex > 0 {
				unordered = fmt.Sprintf("%.2fx without the reference index", r.VsNoRefIndex)
			}
			if r.VsNoop > 0 {
				unordered = fmt.Sprintf("%.2fx the no-op provider's (target >= 0.8)", r.VsNoop)
			}
			if r.VsIntake > 0 {
				unordered += fmt.Sprintf("; %.2fx vs jobs by dispatcher", r.VsIntake)
				if r.Keys > 1 {
					unordered += " (target >= 0.8)"
				}
			}
			fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.1f\t%s\t%s\t%s\t%s\t%s\n", r.Name, r.N, r.PerSecond, r.Seconds,
				ratioStr(r.VsRiver, "target >= 0.5"), ratioStr(r.VsRiverSame, ""), wm, unordered, hot)
		}
	}
	if len(rep.Brokers) > 0 {
		fmt.Fprintln(tw, "\nBROKERS (EVENT PAYLOAD AS BODY)\tN\tPER SECOND\tSECONDS\tVS NO-OP PROVIDER\tVS WATERMILL, SAME BROKER")
		for _, r := range rep.Brokers {
			ratio := func(r float64) string {
				if r == 0 {
					return ""
				}
				return fmt.Sprintf("%.2fx", r)
			}
			fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.1f\t%s\t%s\n", r.Name, r.N, r.PerSecond, r.Seconds, ratio(r.VsNoop), ratio(r.VsWatermill))
		}
	}
	if len(rep.Replicas) > 0 {
		fmt.Fprintf(tw, "\nREPLICAS (EACH ITS OWN POOL OF %d)\tN\tPER SECOND\tSECONDS\tVS ONE REPLICA\tCALLS\tEFFECTS FIRED TWICE\n", replicaConns)
		for _, r := range rep.Replicas {
			fmt.Fprintf(tw, "%d dispatcher(s), no-op provider\t%d\t%.0f\t%.1f\t%s\t%d\t%d\n", r.Replicas, r.N, r.PerSecond, r.Seconds, ratioStr(r.VsOne, ""), r.Calls, r.DoubleFires)
		}
	}
	if len(rep.Shards) > 0 {
		fmt.Fprintf(tw, "\nSHARDS (ONE PROCESS, A POOL OF %d AND A DISPATCHER EACH)\tN EACH\tPER SECOND\tSECONDS\tVS ONE SHARD\tCALLS\tEFFECTS FIRED TWICE\n", replicaConns)
		for _, r := range rep.Shards {
			fmt.Fprintf(tw, "%d shard(s), no-op provider\t%d\t%.0f\t%.1f\t%s\t%d\t%d\n", r.Shards, r.N, r.PerSecond, r.Seconds, ratioStr(r.VsOne, ""), r.Calls, r.DoubleFires)
		}
	}
	if len(rep.Latency) > 0 {
		fmt.Fprintln(tw, "\nLATENCY, NO-OP PROVIDER (MEDIAN RUN BY P99)\tOFFERED/S\tACHIEVED/S\tCOMMIT->CALL P50/P95/P99\tP99 RANGE\tCOMMIT->CONFIRMED P50/P95/P99")
		for _, r := range rep.Latency {
			fmt.Fprintf(tw, "%s\t%d\t%.0f\t%s / %s / %s\t%s-%s of %d\t%s / %s / %s\n", r.Jobs, r.Rate, r.Achieved,
				ms(r.CallP50), ms(r.CallP95), ms(r.CallP99), ms(r.CallP99Min), ms(r.CallP99Max), r.Runs,
				ms(r.ConfirmP50), ms(r.ConfirmP95), ms(r.ConfirmP99))
		}
		fmt.Fprintln(tw, "\nLATENCY BY STEP, THE SAME RUNS\tOFFERED/S\tCOMMIT->RIVER JOB P50/P99\tJOB->RIVER FETCH P50/P99\tFETCH->CALL P50/P99")
		for _, r := range rep.Latency {
			fmt.Fprintf(tw, "%s\t%d\t%s / %s\t%s / %s\t%s / %s\n", r.Jobs, r.Rate,
				ms(r.ToJobP50), ms(r.ToJobP99), ms(r.ToFetchP50), ms(r.ToFetchP99), ms(r.ToCallP50), ms(r.ToCallP99))
		}
	}
	if len(rep.History) > 0 {
		fmt.Fprintln(tw, "\nCOST VERSUS HISTORY\tRIVER JOBS\tSIDE_EFFECTS SIZE\tENQUEUE COST VS BARE (C8)\tNO-OP DISPATCH/S\tCOMMIT->CALL P99 AT 200/S\tVS EMPTY: ENQUEUE / DISPATCH / P99 (TARGET WITHIN 10%)")
		for _, r := range rep.History {
			vs := "baseline"
			if r.Effects > 0 {
				vs = fmt.Sprintf("%.2fx / %.2fx / %.2fx", r.EnqueueVsEmpty, r.DispatchVsEmpty, r.P99VsEmpty)
			}
			fmt.Fprintf(tw, "%d effects of history\t%d\t%d MB\t%.2fx\t%.0f\t%s\t%s\n", r.Effects, r.RiverJobs, r.SideEffectsBytes>>20,
				r.EnqueueCost, r.DispatchPerSecond, ms(r.LatencyP99), vs)
		}
	}
	for _, r := range rep.History {
		if len(r.Reads) == 0 {
			continue
		}
		fmt.Fprintf(tw, "\nOPERATOR READS AT %d EFFECTS OF HISTORY\tVIA\tMEDIAN OF %d\tMAX\tFIRST (UNTIMED)\tSEQ SCANS: SIDE_EFFECTS / OUTBOX_EVENTS / RIVER_JOB\tTARGET < 100MS\n", r.Effects, readRepeats)
		for _, x := range r.Reads {
			if x.Via == viaIdle {
				fmt.Fprintf(tw, "%s\t%s\t\t\t\t%s\t\n", x.Read, x.Via, x.SeqScans)
				continue
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%t\n", x.Read, x.Via, ms(x.Median), ms(x.Max), ms(x.First), x.SeqScans, x.Median < 100*time.Millisecond)
		}
	}
	if p := rep.Purge; p != nil {
		fmt.Fprintf(tw, "\nRETENTION PURGE\tEFFECTS / EVENTS\tTOOK (UNDER TRAFFIC)\tWAL\tOUTBOX SIZE BEFORE -> AFTER VACUUM\tTRAFFIC AT %d/S, QUIET: ACHIEVED / P99\tDURING PURGE\n", purgeTrafficRate)
		fmt.Fprintf(tw, "%d expired effects\t%d / %d\t%.1fs (%.1fs)\t%d MB\t%d MB -> %d MB\t%.0f / %s\t%.0f / %s\n", p.Expired, p.Effects, p.Events,
			p.Took.Seconds(), p.TookUnderTraffic.Seconds(), p.WALBytes>>20, p.SizeBefore>>20, p.SizeAfter>>20,
			p.QuietPerSecond, ms(p.QuietP99), p.PurgePerSecond, ms(p.PurgeP99))
	}
	if len(rep.Admin) > 0 {
		fmt.Fprintln(tw, "\nADMIN QUERY\tROWS\tMEDIAN\tINTENDED INDEX USED\tPLAN")
		for _, r := range rep.Admin {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%t\t%s\n", r.Name, r.Rows, ms(r.Median), r.IndexUsed, r.Plan)
		}
	}
	_ = tw.Flush()
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d.Microseconds())/1000) }

func ratioStr(r float64, target string) string {
	if r == 0 {
		return "baseline"
	}
	if target == "" {
		return fmt.Sprintf("%.2fx", r)
	}
	return fmt.Sprintf("%.2fx (%s)", r, target)
}

// progress draws a progress bar on stderr until done is closed.
func progress(label string, total int, current func() int, done <-chan struct{}) {
	if fi, err := os.Stderr.Stat(); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		// Not a terminal: one line when the phase starts and one when it
		// ends, instead of a carriage-return line per tick.
		start := time.Now()
		fmt.Fprintf(os.Stderr, "  %s: %d ...\n", label, total)
		<-done
		fmt.Fprintf(os.Stderr, "  %s: %d/%d in %.1fs\n", label, min(current(), total), total, time.Since(start).Seconds())
		return
	}
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	draw := func() {
		n := min(current(), total)
		width := 30
		filled := 0
		if total > 0 {
			filled = n * width / total
		}
		fmt.Fprintf(os.Stderr, "\r  %-28s [%s%s] %d/%d", label, strings.Repeat("#", filled), strings.Repeat("-", width-filled), n, total)
	}
	for {
		select {
		case <-done:
			draw()
			fmt.Fprintln(os.Stderr)
			return
		case <-t.C:
			draw()
		}
	}
}

// indexSpec is one -create-indexes entry: a table of the bench schema,
// then an optional USING method and a parenthesised column list.
var indexSpec = regexp.MustCompile(`^([a-z_][a-z0-9_]*)\s+((?:USING\s+[a-z]+\s+)?\(.+\))$`)

// createIndexes creates each index of list (";"-separated "table
// (columns)") on the bench schema's tables.
func createIndexes(ctx context.Context, pool *pgxpool.Pool, schema, list string) error {
	for _, spec := range strings.Split(list, ";") {
		if spec = strings.TrimSpace(spec); spec == "" {
			continue
		}
		m := indexSpec.FindStringSubmatch(spec)
		if m == nil {
			return fmt.Errorf(`-create-indexes %q: write "table (columns)" or "table USING method (columns)"`, spec)
		}
		if _, err := pool.Exec(ctx, "CREATE INDEX ON "+pgx.Identifier{schema, m[1]}.Sanitize()+" "+m[2]); err != nil {
			return fmt.Errorf("-create-indexes %q: %w", spec, err)
		}
	}
	return nil
}

// layoutSQL runs the SQL file path, if any, on the bench schema, with
// search_path set to it.
func layoutSQL(ctx context.Context, pool *pgxpool.Pool, schema, path string) error {
	if path == "" {
		return nil
	}
	text, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("-layout-sql: %w", err)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SET search_path TO "+pgx.Identifier{schema}.Sanitize()); err != nil {
		return err
	}
	defer func() { _, _ = conn.Exec(ctx, "RESET search_path") }()
	if _, err := conn.Exec(ctx, string(text)); err != nil {
		return fmt.Errorf("-layout-sql %s: %w", path, err)
	}
	return nil
}

// dropIndexes drops each index named in list (comma-separated) from the
// bench schema, or the constraint of that name that owns it.
func dropIndexes(ctx context.Context, pool *pgxpool.Pool, schema, list string) error {
	for _, name := range strings.Split(list, ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		var table string
		err := pool.QueryRow(ctx, `SELECT coalesce((SELECT conrelid::regclass::text FROM pg_constraint
			WHERE conname = $2 AND connamespace = $1::regnamespace), '')`, schema, name).Scan(&table)
		if err != nil {
			return fmt.Errorf("-drop-indexes %s: %w", name, err)
		}
		stmt := "DROP INDEX " + pgx.Identifier{schema, name}.Sanitize()
		if table != "" {
			stmt = "ALTER TABLE " + table + " DROP CONSTRAINT " + pgx.Identifier{name}.Sanitize()
		}
		if _, err := pool.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("-drop-indexes %s: %w", name, err)
		}
	}
	return nil
}
