package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/outbox"
)

type latencyResult struct {
	Jobs       string        `json:"jobs"`
	Rate       int           `json:"offered_per_second"`
	Achieved   float64       `json:"achieved_per_second"`
	N          int           `json:"n"`
	CallP50    time.Duration `json:"commit_to_call_p50_ns"`
	CallP95    time.Duration `json:"commit_to_call_p95_ns"`
	CallP99    time.Duration `json:"commit_to_call_p99_ns"`
	ConfirmP50 time.Duration `json:"commit_to_confirmed_p50_ns"`
	ConfirmP95 time.Duration `json:"commit_to_confirmed_p95_ns"`
	ConfirmP99 time.Duration `json:"commit_to_confirmed_p99_ns"`
	// Runs is how many runs were made; this is the one with the median
	// commit-to-call p99, and CallP99Min/Max the range over all of them.
	Runs       int           `json:"runs"`
	CallP99Min time.Duration `json:"commit_to_call_p99_min_ns"`
	CallP99Max time.Duration `json:"commit_to_call_p99_max_ns"`
	// Where the time goes, p50 and p99 of each step, read from the River
	// job that carried each effect: commit to the job's insert (by the
	// application's transaction itself, or the intake), the insert to
	// River's fetch of it (attempted_at), the fetch to the provider call
	// (the claim, limits, the call's start).
	ToJobP50   time.Duration `json:"commit_to_job_p50_ns"`
	ToJobP99   time.Duration `json:"commit_to_job_p99_ns"`
	ToFetchP50 time.Duration `json:"job_to_fetch_p50_ns"`
	ToFetchP99 time.Duration `json:"job_to_fetch_p99_ns"`
	ToCallP50  time.Duration `json:"fetch_to_call_p50_ns"`
	ToCallP99  time.Duration `json:"fetch_to_call_p99_ns"`
}

// steps reads, for each effect of the run, the first River job that
// carried it (its own, or a batch's), and sets the step percentiles.
func (b *bench) steps(ctx context.Context, tr *traffic, r *latencyResult) error {
	rows, err := b.pool.Query(ctx, `
SELECT e.id, min(j.created_at), min(j.attempted_at) FROM `+b.schema+`.river_job j
CROSS JOIN LATERAL (SELECT j.args->>'effect_id' AS id WHERE j.args ? 'effect_id'
	UNION ALL SELECT jsonb_array_elements_text(j.args->'effect_ids') WHERE j.args ? 'effect_ids') e
WHERE j.attempted_at IS NOT NULL GROUP BY e.id`)
	if err != nil {
		return err
	}
	var toJob, toFetch, toCall []time.Duration
	var id string
	var inserted, fetched time.Time
	tr.mu.Lock()
	defer tr.mu.Unlock()
	_, err = pgx.ForEachRow(rows, []any{&id, &inserted, &fetched}, func() error {
		uid, err := uuid.Parse(id)
		if err != nil {
			return nil
		}
		c, ok := tr.committed[uid]
		v, called := tr.calls.Load(id)
		if !ok || !called {
			return nil
		}
		toJob = append(toJob, max(0, inserted.Sub(c)))
		toFetch = append(toFetch, max(0, fetched.Sub(inserted)))
		toCall = append(toCall, max(0, v.(time.Time).Sub(fetched)))
		return nil
	})
	if err != nil {
		return err
	}
	for _, l := range [][]time.Duration{toJob, toFetch, toCall} {
		slices.Sort(l)
	}
	r.ToJobP50, r.ToJobP99 = percentile(toJob, .5), percentile(toJob, .99)
	r.ToFetchP50, r.ToFetchP99 = percentile(toFetch, .5), percentile(toFetch, .99)
	r.ToCallP50, r.ToCallP99 = percentile(toCall, .5), percentile(toCall, .99)
	return nil
}

// enqueueMode is one way an application hands effects to the dispatchers.
type enqueueMode struct {
	name   string
	jobs   outbox.JobInsertion
	notify bool
	// wake calls Outbox.WakeDispatchers after the commit.
	wake bool
}

var enqueueModes = []enqueueMode{
	{"jobs in tx", outbox.JobsInTransaction, false, false},
	{"jobs by dispatcher", outbox.JobsByDispatcher, false, false},
	{"jobs by dispatcher + NOTIFY", outbox.JobsByDispatcher, true, false},
	{"effects by dispatcher", outbox.EffectsByDispatcher, false, false},
}

// latencyModes are enqueueModes and the wake-up after the commit, which
// costs the transaction nothing (the enqueue phase's rows would repeat
// "jobs by dispatcher").
var latencyModes = append(slices.Clone(enqueueModes), enqueueMode{"jobs by dispatcher + wake after commit", outbox.JobsByDispatcher, false, true})

func (m enqueueMode) config(schema string) outbox.Config {
	return outbox.Config{Schema: schema, Jobs: m.jobs, NotifyDispatchers: m.notify}
}

// latencyRuns is how many times each latency run is repeated; the report
// shows the run with the median p99 and the range of p99 over all.
const latencyRuns = 3

// latency offers effects at a fixed rate, one per application transaction,
// to a running dispatcher with a no-op provider, and measures commit to
// provider call and commit to confirmed.
func (b *bench) latency(ctx context.Context) ([]latencyResult, error) {
	var out []latencyResult
	for _, mode := range latencyModes {
		for _, rate := range b.s.Rates {
			var runs []latencyResult
			for range latencyRuns {
				if err := b.vacuum(ctx); err != nil {
					return nil, err
				}
				r, err := b.latencyAt(ctx, rate, mode)
				if err != nil {
					return nil, fmt.Errorf("%s at %d/s: %w", mode.name, rate, err)
				}
				runs = append(runs, r)
			}
			slices.SortFunc(runs, func(a, b latencyResult) int { return cmp.Compare(a.CallP99, b.CallP99) })
			med := runs[len(runs)/2]
			med.Runs, med.CallP99Min, med.CallP99Max = len(runs), runs[0].CallP99, runs[len(runs)-1].CallP99
			out = append(out, med)
		}
	}
	return out, nil
}

func (b *bench) latencyAt(ctx context.Context, rate int, mode enqueueMode) (latencyResult, error) {
	total := int(float64(rate) * b.s.RateDuration.Seconds())
	tr, err := b.startTraffic(ctx, trafficOpts{rate: rate, mode: mode, limit: total})
	if err != nil {
		return latencyResult{}, err
	}
	defer tr.stop()
	done := make(chan struct{})
	go progress(fmt.Sprintf("latency at %d/s", rate), total, tr.called, done)
	err = tr.offered()
	achieved := float64(total) / time.Since(tr.start).Seconds()
	if err == nil {
		err = b.waitFor(ctx, func() bool { return true }, "SELECT count(*) FROM "+b.schema+".side_effects WHERE phase = 'live'")
	}
	close(done)
	if err != nil {
		return latencyResult{}, err
	}
	if err := tr.stop(); err != nil {
		return latencyResult{}, err
	}

	rows, err := b.pool.Query(ctx, "SELECT id, confirmed_at FROM "+b.schema+".side_effects WHERE state = 'confirmed' AND kind = 'noop.effect'")
	if err != nil {
		return latencyResult{}, err
	}
	confirmedAt := map[uuid.UUID]time.Time{}
	for rows.Next() {
		var id uuid.UUID
		var t time.Time
		if err := rows.Scan(&id, &t); err != nil {
			return latencyResult{}, err
		}
		confirmedAt[id] = t
	}
	if err := rows.Err(); err != nil {
		return latencyResult{}, err
	}
	toCall := tr.latencies(tr.start, time.Now())
	var toConfirm []time.Duration
	tr.mu.Lock()
	n := len(tr.committed)
	for id, c := range tr.committed {
		if t, ok := confirmedAt[id]; ok {
			toConfirm = append(toConfirm, max(0, t.Sub(c)))
		}
	}
	tr.mu.Unlock()
	slices.Sort(toConfirm)
	res := latencyResult{
		Jobs: mode.name, Rate: rate, Achieved: achieved, N: n,
		CallP50: percentile(toCall, .5), CallP95: percentile(toCall, .95), CallP99: percentile(toCall, .99),
		ConfirmP50: percentile(toConfirm, .5), ConfirmP95: percentile(toConfirm, .95), ConfirmP99: percentile(toConfirm, .99),
	}
	if err := b.steps(ctx, tr, &res); err != nil {
		return latencyResult{}, err
	}
	if err := b.clear(ctx); err != nil {
		return latencyResult{}, err
	}
	return res, nil
}
