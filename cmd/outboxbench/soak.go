package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"text/tabwriter"
	"time"
)

// soakMinute is one minute of a soak run.
type soakMinute struct {
	Minute int `json:"minute"`
	// Achieved is how many of the effects committed in the minute were
	// called, per second; P99 their commit-to-call p99.
	Achieved float64       `json:"achieved_per_second"`
	P99      time.Duration `json:"commit_to_call_p99_ns"`
	// Tables at the end of the minute.
	Effects      soakTable `json:"side_effects"`
	Jobs         soakTable `json:"river_job"`
	EventsBytes  int64     `json:"outbox_events_bytes"`
	BytesPerKept float64   `json:"bytes_per_retained_effect"`
	// Checkpoints started in the minute (requested by WAL volume or timed).
	Checkpoints int64 `json:"checkpoints"`
}

// soakTable is one table's state: rows, dead rows, sizes, and the share of
// the minute's updates that were HOT.
type soakTable struct {
	Live        int64   `json:"live"`
	Dead        int64   `json:"dead"`
	DeadRatio   float64 `json:"dead_ratio"`
	HeapBytes   int64   `json:"heap_bytes"`
	IndexBytes  int64   `json:"index_bytes"`
	HOTShare    float64 `json:"hot_update_share"`
	Autovacuums int64   `json:"autovacuums"`
	updates     int64
	hot         int64
}

type soakResult struct {
	Rate    int          `json:"offered_per_second"`
	Minutes []soakMinute `json:"minutes"`
	// Against the targets, for the minutes after the tenth.
	FirstTenP99  time.Duration `json:"first_ten_minutes_p99_ns"`
	LaterP99Max  time.Duration `json:"later_p99_max_ns"`
	LaterRateMin float64       `json:"later_rate_min"`
	LaterRateMax float64       `json:"later_rate_max"`
	LaterDeadMax float64       `json:"later_dead_ratio_max"`
	BytesAtTen   float64       `json:"bytes_per_effect_at_ten"`
	BytesAtEnd   float64       `json:"bytes_per_effect_at_end"`
	Autovacuum   string        `json:"autovacuum"`
	// CompletedJobsH is River's retention of completed jobs, in hours (0:
	// outboxd's default).
	CompletedJobsH float64 `json:"completed_job_retention_hours"`
}

// soak offers effects at a steady rate for the whole duration to a
// dispatcher with outboxd's defaults and reports, per minute, what a team
// watches when an outbox runs for weeks: rate, p99, dead tuples, sizes.
// Rows are a minute apart, or tick apart when tick is set (tests).
func (b *bench) soak(ctx context.Context, out io.Writer, d time.Duration, rate int, tick time.Duration) (soakResult, error) {
	tick = cmp.Or(tick, time.Minute)
	res := soakResult{Rate: rate, Autovacuum: describeMachine(ctx, b.pool).Autovacuum,
		CompletedJobsH: b.dispatcherConfig(&noopProvider{}).CompletedJobRetention.Hours()}
	tr, err := b.startTraffic(ctx, trafficOpts{rate: rate, mode: enqueueModes[0], retention: true})
	if err != nil {
		return res, err
	}
	defer tr.stop()
	start := time.Now()
	var prev soakMinute
	var prevCkpt int64
	if prevCkpt, err = b.checkpoints(ctx); err != nil {
		return res, err
	}
	var rows []soakMinute
	for m := 1; time.Duration(m)*tick <= d; m++ {
		if err := sleepCtx(ctx, time.Until(start.Add(time.Duration(m)*tick))); err != nil {
			return res, err
		}
		row := soakMinute{Minute: m}
		if row.Effects, err = b.tableState(ctx, "side_effects", prev.Effects); err != nil {
			return res, err
		}
		if row.Jobs, err = b.tableState(ctx, "river_job", prev.Jobs); err != nil {
			return res, err
		}
		if err := b.pool.QueryRow(ctx, "SELECT pg_total_relation_size($1::regclass)", b.schema+".outbox_events").Scan(&row.EventsBytes); err != nil {
			return res, err
		}
		ckpt, err := b.checkpoints(ctx)
		if err != nil {
			return res, err
		}
		row.Checkpoints, prevCkpt = ckpt-prevCkpt, ckpt
		total := row.Effects.HeapBytes + row.Effects.IndexBytes + row.Jobs.HeapBytes + row.Jobs.IndexBytes + row.EventsBytes
		if row.Effects.Live > 0 {
			row.BytesPerKept = float64(total) / float64(row.Effects.Live)
		}
		fmt.Fprintf(os.Stderr, "  soak minute %d/%d: side_effects %d live, %.1f%% dead; river_job %d live; %.0f bytes per effect\n",
			m, int(d/tick), row.Effects.Live, 100*row.Effects.DeadRatio, row.Jobs.Live, row.BytesPerKept)
		rows = append(rows, row)
		prev = row
	}
	if err := tr.stop(); err != nil {
		return res, err
	}
	for i := range rows {
		from := start.Add(time.Duration(i) * tick)
		rows[i].Achieved, rows[i].P99 = tr.window(from, from.Add(tick))
	}
	res.Minutes = rows
	res.summarize()
	printSoak(out, res)
	return res, nil
}

func (r *soakResult) summarize() {
	var first []time.Duration
	for _, m := range r.Minutes {
		if m.Minute <= 10 {
			first = append(first, m.P99)
			r.BytesAtTen = m.BytesPerKept
			continue
		}
		r.LaterP99Max = max(r.LaterP99Max, m.P99)
		if r.LaterRateMin == 0 || m.Achieved < r.LaterRateMin {
			r.LaterRateMin = m.Achieved
		}
		r.LaterRateMax = max(r.LaterRateMax, m.Achieved)
		r.LaterDeadMax = max(r.LaterDeadMax, m.Effects.DeadRatio, m.Jobs.DeadRatio)
	}
	slices.Sort(first)
	if len(first) > 0 {
		r.FirstTenP99 = first[len(first)/2]
	}
	if n := len(r.Minutes); n > 0 {
		r.BytesAtEnd = r.Minutes[n-1].BytesPerKept
	}
}

func printSoak(out io.Writer, r soakResult) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "\nSOAK AT %d/S, AUTOVACUUM %s\tACHIEVED/S\tP99\tSIDE_EFFECTS LIVE / DEAD%%\tHEAP+INDEX MB\tHOT%%\tRIVER_JOB LIVE / DEAD%%\tHEAP+INDEX MB\tHOT%%\tEVENTS MB\tBYTES/EFFECT\tCHECKPOINTS\tAUTOVACUUMS (EFFECTS, JOBS)\n", r.Rate, r.Autovacuum)
	for _, m := range r.Minutes {
		fmt.Fprintf(tw, "minute %d\t%.0f\t%s\t%d / %.1f\t%d+%d\t%.0f\t%d / %.1f\t%d+%d\t%.0f\t%d\t%.0f\t%d\t%d, %d\n", m.Minute, m.Achieved, ms(m.P99),
			m.Effects.Live, 100*m.Effects.DeadRatio, m.Effects.HeapBytes>>20, m.Effects.IndexBytes>>20, 100*m.Effects.HOTShare,
			m.Jobs.Live, 100*m.Jobs.DeadRatio, m.Jobs.HeapBytes>>20, m.Jobs.IndexBytes>>20, 100*m.Jobs.HOTShare,
			m.EventsBytes>>20, m.BytesPerKept, m.Checkpoints, m.Effects.Autovacuums, m.Jobs.Autovacuums)
	}
	_ = tw.Flush()
	if len(r.Minutes) <= 10 {
		fmt.Fprintln(out, "\n(the targets apply after the tenth minute: run 15 minutes or more)")
		return
	}
	lo, hi := float64(r.Rate)*0.9, float64(r.Rate)*1.1
	fmt.Fprintf(out, "\nafter minute 10: rate %.0f-%.0f/s (target %.0f-%.0f: %t); p99 max %s vs %s in minutes 1-10 (target <= 1.5x: %.2fx, %t);\n",
		r.LaterRateMin, r.LaterRateMax, lo, hi, r.LaterRateMin >= lo && r.LaterRateMax <= hi,
		ms(r.LaterP99Max), ms(r.FirstTenP99), float64(r.LaterP99Max)/float64(max(r.FirstTenP99, 1)), float64(r.LaterP99Max) <= 1.5*float64(r.FirstTenP99))
	fmt.Fprintf(out, "dead tuples at most %.1f%% of live rows (target < 20%%: %t); bytes per retained effect %.0f at minute 10, %.0f at the end\n",
		100*r.LaterDeadMax, r.LaterDeadMax < 0.2, r.BytesAtTen, r.BytesAtEnd)
}

// tableState reads a table's rows, dead rows and sizes, and the share of
// its updates since prev that were HOT.
func (b *bench) tableState(ctx context.Context, table string, prev soakTable) (soakTable, error) {
	var t soakTable
	err := b.pool.QueryRow(ctx, `
SELECT n_live_tup, n_dead_tup, n_tup_upd, n_tup_hot_upd, autovacuum_count,
	pg_relation_size(relid), pg_indexes_size(relid)
FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = $2`, b.schema, table).
		Scan(&t.Live, &t.Dead, &t.updates, &t.hot, &t.Autovacuums, &t.HeapBytes, &t.IndexBytes)
	if err != nil {
		return t, fmt.Errorf("%s: %w", table, err)
	}
	if t.Live > 0 {
		t.DeadRatio = float64(t.Dead) / float64(t.Live)
	}
	if n := t.updates - prev.updates; n > 0 {
		t.HOTShare = float64(t.hot-prev.hot) / float64(n)
	}
	return t, nil
}

func (b *bench) checkpoints(ctx context.Context) (int64, error) {
	var n int64
	err := b.pool.QueryRow(ctx, "SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter").Scan(&n)
	return n, err
}
