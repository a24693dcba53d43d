package main

import (
	"context"
	"fmt"

	"github.com/outboxd/outboxd/migrations"
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
		if err := b.seedIntake(ctx, n, noopName, `{}`); err != nil {
			return shardResult{}, err
		}
		if err := b.vacuum(ctx); err != nil {
			return shardResult{}, err
		}
	}
	b.schema = home
	d, err := b.burnDownBy(ctx, fmt.Sprintf("%d shard(s), one process, no-op provider", k), schemas, k*n)
	if err != nil {
		return shardResult{}, err
	}
	return shardResult{Shards: k, N: n, Seconds: d.seconds, PerSecond: float64(k*n) / d.seconds, Calls: d.calls,
		DoubleFires: d.doubleFires}, nil
}
