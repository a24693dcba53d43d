package webui

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/outboxtype"
)

// The chart reads each minute until it is settled, then keeps it: a later
// overview reads only from the first unsettled minute, and a kept minute
// leaves when it leaves the hour.
func TestTheChartReadsOnlyTheMinutesNotSettled(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	db := map[time.Time]outboxtype.MinuteCount{}
	for i := range 120 {
		m := t0.Add(time.Duration(i) * time.Minute)
		db[m] = outboxtype.MinuteCount{Minute: m, Confirmed: int64(i), Failed: int64(i % 3)}
	}
	var reads []time.Time
	var now time.Time
	m := &minuteCounts{read: func(_ context.Context, since time.Time) ([]outboxtype.MinuteCount, error) {
		reads = append(reads, since)
		var out []outboxtype.MinuteCount
		for minute, c := range db {
			if !minute.Before(since) && !minute.After(now) { // nothing has ended in the future
				out = append(out, c)
			}
		}
		return out, nil
	}}
	hour := func(now time.Time) []outboxtype.MinuteCount {
		start := now.Truncate(time.Minute).Add(-59 * time.Minute)
		got, err := m.hour(context.Background(), start, now)
		require.NoError(t, err)
		return got
	}
	now = t0.Add(70*time.Minute + 30*time.Second) // 13:10:30
	got := hour(now)
	require.Equal(t, now.Truncate(time.Minute).Add(-59*time.Minute), reads[0], "the first overview reads the hour")
	require.Len(t, got, 60)
	require.Equal(t, t0.Add(11*time.Minute), got[0].Minute)
	require.Equal(t, int64(70), got[59].Confirmed)

	// The current minute changes; a settled one would not be read again.
	db[t0.Add(70*time.Minute)] = outboxtype.MinuteCount{Minute: t0.Add(70 * time.Minute), Confirmed: 700}
	db[t0.Add(60*time.Minute)] = outboxtype.MinuteCount{Minute: t0.Add(60 * time.Minute), Confirmed: 600}
	now = now.Add(10 * time.Second)
	got = hour(now)
	require.Equal(t, t0.Add(68*time.Minute), reads[1], "then only from the first minute not settled")
	require.Equal(t, int64(700), got[59].Confirmed)
	require.Equal(t, int64(60), got[49].Confirmed, "a settled minute is what ended in it")

	// Five minutes later: the hour moves on, kept minutes leave it.
	now = now.Add(5 * time.Minute)
	got = hour(now)
	require.Equal(t, t0.Add(68*time.Minute), reads[2])
	require.Equal(t, t0.Add(16*time.Minute), got[0].Minute)
	require.Len(t, got, 60)
	for i, c := range got {
		require.Equal(t, got[0].Minute.Add(time.Duration(i)*time.Minute), c.Minute, "oldest first, no minute twice")
	}
	require.Len(t, m.kept, 57, "kept: the settled minutes of the hour only")
}
