package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/internal/cli"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/sideeffects"
)

// replicaConns is each replica's pool: outboxd run's default --db-max-conns.
const replicaConns = 20

type replicaResult struct {
	Replicas  int     `json:"replicas"`
	N         int     `json:"n"`
	Seconds   float64 `json:"seconds"`
	PerSecond float64 `json:"per_second"`
	// VsOne is this rate over one replica's.
	VsOne float64 `json:"vs_one_replica,omitempty"`
	// Calls counts provider calls; DoubleFires the effects called more than
	// once (the run fails unless it is zero).
	Calls       int64 `json:"calls"`
	DoubleFires int64 `json:"double_fires"`
}

// replicaThroughput burns down the same number of no-op effects with 1, 2
// and 3 dispatchers, each with a pool of its own as separate outboxd
// processes would have, and counts the calls per effect.
func (b *bench) replicaThroughput(ctx context.Context) ([]replicaResult, error) {
	var out []replicaResult
	for k := 1; k <= 3; k++ {
		r, err := b.replicas(ctx, k)
		if err != nil {
			return nil, fmt.Errorf("%d replicas: %w", k, err)
		}
		if len(out) > 0 {
			r.VsOne = r.PerSecond / out[0].PerSecond
		}
		out = append(out, r)
		if r.DoubleFires > 0 {
			return out, fmt.Errorf("%d replicas: %d effects fired twice", k, r.DoubleFires)
		}
	}
	return out, nil
}

func (b *bench) replicas(ctx context.Context, k int) (replicaResult, error) {
	n := b.s.Effects
	if err := b.seedEffects(ctx, n, noopName, `{}`); err != nil {
		return replicaResult{}, err
	}
	schemas := make([]string, k)
	for i := range schemas {
		schemas[i] = b.schema
	}
	d, err := b.burnDownBy(ctx, fmt.Sprintf("%d replica(s), no-op provider", k), schemas, n)
	if err != nil {
		return replicaResult{}, err
	}
	return replicaResult{Replicas: k, N: n, Seconds: d.seconds, PerSecond: float64(n) / d.seconds, Calls: d.calls,
		DoubleFires: d.doubleFires}, nil
}

// burnDownResult is what burnDownBy measured.
type burnDownResult struct {
	seconds            float64
	calls, doubleFires int64
}

// burnDownBy starts a dispatcher for each of schemas (a schema named k
// times is k replicas of it), each with a pool of its own as separate
// outboxd processes or shards would have, all calling one no-op
// provider; it waits until total effects were called, checks that each
// was, and counts those called more than once. The tables are cleared
// after.
func (b *bench) burnDownBy(ctx context.Context, name string, schemas []string, total int) (burnDownResult, error) {
	var mu sync.Mutex
	seen := make(map[string]int, total)
	var calls atomic.Int64
	noop := &noopProvider{onSend: func(req providers.Request) {
		mu.Lock()
		seen[req.EffectID]++
		mu.Unlock()
		calls.Add(1)
	}}
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
	ds := make([]*sideeffects.Dispatcher, len(schemas))
	for i, schema := range schemas {
		pool, err := cli.Connect(ctx, b.s.DatabaseURL, replicaConns)
		if err != nil {
			return burnDownResult{}, err
		}
		pools = append(pools, pool)
		cfg := b.dispatcherConfig(noop)
		cfg.Schema = schema
		if ds[i], err = sideeffects.NewDispatcher(pool, cfg); err != nil {
			return burnDownResult{}, err
		}
	}
	done := make(chan struct{})
	go progress(name, total, func() int { return int(calls.Load()) }, done)
	start := time.Now()
	for _, d := range ds {
		if err := d.Start(ctx); err != nil {
			close(done)
			return burnDownResult{}, err
		}
		started = append(started, d)
	}
	err := b.waitFor(ctx, func() bool { return int(calls.Load()) >= total },
		"SELECT count(*) FROM "+b.schema+".side_effects WHERE phase = 'live'")
	elapsed := time.Since(start)
	close(done)
	if err != nil {
		return burnDownResult{}, err
	}
	r := burnDownResult{seconds: elapsed.Seconds(), calls: calls.Load()}
	mu.Lock()
	for _, c := range seen {
		if c > 1 {
			r.doubleFires++
		}
	}
	distinct := len(seen)
	mu.Unlock()
	if distinct != total {
		return r, fmt.Errorf("%d of %d effects called", distinct, total)
	}
	// Stopped before the tables are emptied: TRUNCATE waits for the
	// running dispatchers' locks.
	stopAll()
	return r, b.clear(ctx)
}
