package store

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/outboxtype"
)

// Stats computes Stats over the last window (zero: every row kept).
func (s *Store) Stats(ctx context.Context, db DB, window time.Duration) (*outboxtype.Stats, error) {
	var now time.Time
	if err := db.QueryRow(ctx, "SELECT now()").Scan(&now); err != nil {
		return nil, err
	}
	since := now.Add(-window)
	if window == 0 {
		since = time.Time{}
	}
	st := &outboxtype.Stats{Window: window, WindowSeconds: window.Seconds(), CollectedAt: now}
	if window > 0 {
		// The minutes the per-minute summary holds are read from it.
		var sumSince, upTo time.Time
		if err := db.QueryRow(ctx, s.sql(sqlMinutesSummarized)).Scan(&sumSince, &upTo); err != nil {
			return nil, fmt.Errorf("stats: %w", err)
		}
		lo := since.Truncate(time.Minute)
		if lo.Before(since) {
			lo = lo.Add(time.Minute)
		}
		if lo.Before(sumSince) {
			lo = sumSince
		}
		if upTo.Sub(lo) >= summaryWorthIt {
			if err := s.statsFromSummary(ctx, db, st, since, lo, upTo); err != nil {
				return nil, fmt.Errorf("stats: %w", err)
			}
			if err := db.QueryRow(ctx, s.sql(sqlStatsOldest)).Scan(&st.OldestPending, &st.OldestFired); err != nil {
				return nil, fmt.Errorf("stats: %w", err)
			}
			if err := db.QueryRow(ctx, s.sql(sqlStatsByHand), since).Scan(&st.ConfirmedByHand); err != nil {
				return nil, fmt.Errorf("stats: %w", err)
			}
			return st, nil
		}
	}
	rows, err := db.Query(ctx, s.sql(sqlStatsCounts), since)
	if err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	st.Counts, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (outboxtype.StateKindCount, error) {
		var c outboxtype.StateKindCount
		err := r.Scan(&c.State, &c.Kind, &c.Count)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	if err := db.QueryRow(ctx, s.sql(sqlStatsOldest)).Scan(&st.OldestPending, &st.OldestFired); err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	rows, err = db.Query(ctx, s.sql(sqlStatsAttempts), since)
	if err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	st.Attempts, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (outboxtype.AttemptsBucket, error) {
		var b outboxtype.AttemptsBucket
		err := r.Scan(&b.Attempts, &b.Count)
		return b, err
	})
	if err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	if err := db.QueryRow(ctx, s.sql(sqlStatsByHand), since).Scan(&st.ConfirmedByHand); err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	if err := db.QueryRow(ctx, s.sql(sqlStatsLatency), since).Scan(&st.Confirmed, &st.LatencyP50, &st.LatencyP95, &st.LatencyP99); err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	return st, nil
}

// summaryWorthIt is how much of a window the per-minute summary must
// cover before Stats reads it (and estimates the latency percentiles from
// its histogram) instead of every effect that ended in the window.
const summaryWorthIt = 10 * time.Minute

// statsFromSummary fills st's windowed figures for [since, now] from the
// per-minute summary for [lo, hi) and from side_effects for the rest:
// [since, lo), minutes the summary does not hold, and [hi, now], the
// minutes not yet summarized.
func (s *Store) statsFromSummary(ctx context.Context, db DB, st *outboxtype.Stats, since, lo, hi time.Time) error {
	rows, err := db.Query(ctx, s.sql(sqlStatsLiveCounts))
	if err != nil {
		return err
	}
	live, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (outboxtype.StateKindCount, error) {
		var c outboxtype.StateKindCount
		err := r.Scan(&c.State, &c.Kind, &c.Count)
		return c, err
	})
	if err != nil {
		return err
	}
	type key struct{ phase, kind, attempts string }
	counts := map[key]int64{}
	hist := map[int]int64{}
	far := time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, part := range []struct {
		counts, latency string
		from, to        time.Time
	}{
		{sqlEndedCounts, sqlEndedLatency, since, lo},
		{sqlSummaryCounts, sqlSummaryLatency, lo, hi},
		{sqlEndedCounts, sqlEndedLatency, hi, far},
	} {
		if !part.from.Before(part.to) {
			continue
		}
		rows, err := db.Query(ctx, s.sql(part.counts), part.from, part.to)
		if err != nil {
			return err
		}
		var k key
		var n int64
		if _, err := pgx.ForEachRow(rows, []any{&k.phase, &k.kind, &k.attempts, &n}, func() error {
			counts[k] += n
			return nil
		}); err != nil {
			return err
		}
		rows, err = db.Query(ctx, s.sql(part.latency), part.from, part.to)
		if err != nil {
			return err
		}
		var b int
		if _, err := pgx.ForEachRow(rows, []any{&b, &n}, func() error {
			hist[b] += n
			return nil
		}); err != nil {
			return err
		}
	}
	byKind := map[[2]string]int64{}
	attempts := map[string]int64{}
	for k, n := range counts {
		byKind[[2]string{k.phase, k.kind}] += n
		if k.phase == string(outboxtype.StateConfirmed) {
			attempts[k.attempts] += n
		}
	}
	st.Counts = live
	for pk, n := range byKind {
		st.Counts = append(st.Counts, outboxtype.StateKindCount{State: outboxtype.State(pk[0]), Kind: pk[1], Count: n})
	}
	slices.SortFunc(st.Counts, func(a, b outboxtype.StateKindCount) int {
		return cmp.Or(cmp.Compare(a.State, b.State), cmp.Compare(a.Kind, b.Kind))
	})
	st.Attempts = nil
	for _, label := range []string{"0", "1", "2", "3", "4-5", "6-10", ">10"} {
		if n := attempts[label]; n > 0 {
			st.Attempts = append(st.Attempts, outboxtype.AttemptsBucket{Attempts: label, Count: n})
		}
	}
	st.Confirmed, st.LatencyP50, st.LatencyP95, st.LatencyP99 = 0, 0, 0, 0
	for _, n := range hist {
		st.Confirmed += n
	}
	st.LatencyP50, st.LatencyP95, st.LatencyP99 = histogramQuantile(hist, st.Confirmed, 0.5), histogramQuantile(hist, st.Confirmed, 0.95),
		histogramQuantile(hist, st.Confirmed, 0.99)
	st.LatencyEstimated = true
	return nil
}

// histogramQuantile estimates quantile q of a latency histogram of n
// values (bucket b: [2^(b/4), 2^((b+1)/4)) ms), in seconds: the geometric
// middle of the bucket that holds it, within 10% of the true value.
func histogramQuantile(hist map[int]int64, n int64, q float64) float64 {
	if n == 0 {
		return 0
	}
	buckets := make([]int, 0, len(hist))
	for b := range hist {
		buckets = append(buckets, b)
	}
	slices.Sort(buckets)
	rank := int64(math.Ceil(q * float64(n)))
	var seen int64
	for _, b := range buckets {
		seen += hist[b]
		if seen >= rank {
			return math.Pow(2, (float64(b)+0.5)/4) / 1000
		}
	}
	return math.Pow(2, (float64(buckets[len(buckets)-1])+0.5)/4) / 1000
}

// SummarizeMinutes adds the minutes before upTo that the per-minute
// summary does not hold yet (an hour a transaction, so that catching up
// after a stop stays small) and returns the first minute it does not hold.
func (s *Store) SummarizeMinutes(ctx context.Context, pool *pgxpool.Pool, upTo time.Time) (time.Time, error) {
	for {
		var from, to time.Time
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if err := tx.QueryRow(ctx, s.sql(sqlLockSummarized)).Scan(&from); err != nil {
				return err
			}
			to = from
			if !from.Before(upTo) {
				return nil
			}
			to = from.Add(time.Hour)
			if upTo.Before(to) {
				to = upTo
			}
			// JIT would compile each hour's statement for longer than it runs.
			if _, err := tx.Exec(ctx, "SET LOCAL jit = off"); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, s.sql(sqlSummarizeMinutes), from, to)
			return err
		})
		if err != nil {
			return time.Time{}, fmt.Errorf("summarize minutes: %w", err)
		}
		if !to.Before(upTo) || to.Equal(from) {
			return to, nil
		}
	}
}
