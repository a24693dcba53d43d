package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/internal/cli"
	"github.com/outboxd/outboxd/migrations"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/sideeffects"
)

// shardResult is a burn-down of the same backlog in each of k shards by
// one process serving them all (outboxd run --shard-database).
type shardResult struct {
	Shards int `json:"shards"`
	// N is the effects of each shard.
	N         int     `json:"n_per_shard"`
	Seconds   float64 `json:"seconds"`
	PerSecond float64 `json:"per_second"`
	// VsOne is this rate over one shard's.
	VsOne       float64 `json:"vs_one_shard,omitempty"`
	Calls       int64   `json:"calls"`
	DoubleFires int64   `json:"double_fires"`
}

// shardThroughput burns down n no-op effects queued in the intake of
// each of 1, 2 and 3 shards (schemas of the bench's database, each with
// its own pool and dispatcher, as outboxd run gives each shard), the
// dispatchers in this one process sharing the provider.
func (b *bench) shardThroughput(ctx context.Context) ([]shardResult, error) {
	var out []shardResult
	for k := 1; k <= 3; k++ {
		r, err := b.shards(ctx, k)
		if err != nil {
			return nil, fmt.Errorf("%d shards: %w", k, err)
		}
		if len(out) > 0 {
			r.VsOne = r.PerSecond / out[0].PerSecond
		}
		out = append(out, r)
		if r.DoubleFires > 0 {
			return out, fmt.Errorf("%d shards: %d effects fired twice", k, r.DoubleFires)
		}
	}
	return out, nil
}

func (b *bench) shards(ctx context.Context, k int) (shardResult, error) {
	n := b.s.Effects
	var mu sync.Mutex
	seen := make(map[string]int, k*n)
	var calls atomic.Int64
	noop := &noopProvider{onSend: func(req providers.Request) {
		mu.Lock()
		seen[req.EffectID]++
		mu.Unlock()
		calls.Add(1)
	}}
	schemas := []string{b.schema}
	for range k - 1 {
		schema, drop, err := migrations.Temporary(ctx, b.pool, "outboxd_bench_shard")
		if err != nil {
			return shardResult{}, err
		}
		defer drop()
		schemas = append(schemas, schema)
	}
	home := b.schema
	defer func() { b.schema = home }()
	for _, schema := range schemas {
		b.schema = schema
		if err := b.seedIntake(ctx, n, noop.Name(), `{}`); err != nil {
			return shardResult{}, err
		}
		if err := b.vacuum(ctx); err != nil {
			return shardResult{}, err
		}
	}
	b.schema = home
	var started []*sideeffects.Dispatcher
	stopAll := func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, d := range started {
			_ = d.Stop(stopCtx)
		}
		started = nil
	}
	defer stopAll()
	var pools []*pgxpool.Pool
	defer func() {
		for _, p := range pools {
			p.Close()
		}
	}()
	ds := make([]*sideeffects.Dispatcher, k)
	for i, schema := range schemas {
		pool, err := cli.Connect(ctx, b.s.DatabaseURL, replicaConns)
		if err != nil {
			return shardResult{}, err
		}
		pools = append(pools, pool)
		cfg := b.dispatcherConfig(noop)
		cfg.Schema = schema
		if ds[i], err = sideeffects.NewDispatcher(pool, cfg); err != nil {
			return shardResult{}, err
		}
	}
	name := fmt.Sprintf("%d shard(s), one process, no-op provider", k)
	done := make(chan struct{})
	go progress(name, k*n, func() int { return int(calls.Load()) }, done)
	start := time.Now()
	for _, d := range ds {
		if err := d.Start(ctx); err != nil {
			close(done)
			return shardResult{}, err
		}
		started = append(started, d)
	}
	err := b.waitFor(ctx, func() bool { return int(calls.Load()) >= k*n },
		"SELECT count(*) FROM "+b.schema+".side_effects WHERE phase = 'live'")
	elapsed := time.Since(start)
	close(done)
	if err != nil {
		return shardResult{}, err
	}
	r := shardResult{Shards: k, N: n, Seconds: elapsed.Seconds(), PerSecond: float64(k*n) / elapsed.Seconds(), Calls: calls.Load()}
	mu.Lock()
	for _, c := range seen {
		if c > 1 {
			r.DoubleFires++
		}
	}
	distinct := len(seen)
	mu.Unlock()
	if distinct != k*n {
		return r, fmt.Errorf("%d of %d effects called", distinct, k*n)
	}
	stopAll()
	return r, b.clear(ctx)
}
