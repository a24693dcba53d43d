package webui

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/outboxd/outboxd/outboxtype"
)

// settle is how long after a minute ends its count is taken as final:
// an effect's ended_at is its transaction's start, and the web view's
// clock may differ from Postgres's by a little.
const settle = 2 * time.Minute

// minuteCounts keeps the overview chart's per-minute counts. A minute is
// read from the terminal index until it is settle old, then kept until it
// leaves the hour: each overview reads the last few minutes' ended effects
// instead of the hour's, whatever the rate. A kept minute is what ended in
// it: an effect retried or confirmed by hand afterwards is counted again in
// the minute it ends next, as it is then.
type minuteCounts struct {
	read func(ctx context.Context, since time.Time) ([]outboxtype.MinuteCount, error)

	mu   sync.Mutex
	upTo time.Time // minutes before it are kept
	kept map[time.Time]outboxtype.MinuteCount
}

// hour returns the counts of the minutes from start to now, oldest first;
// minutes with nothing are left out.
func (m *minuteCounts) hour(ctx context.Context, start, now time.Time) ([]outboxtype.MinuteCount, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	since := start
	if m.upTo.After(since) {
		since = m.upTo
	}
	fresh, err := m.read(ctx, since)
	if err != nil {
		return nil, err
	}
	if m.kept == nil {
		m.kept = map[time.Time]outboxtype.MinuteCount{}
	}
	for minute := range m.kept {
		if minute.Before(start) {
			delete(m.kept, minute)
		}
	}
	settled := now.Truncate(time.Minute).Add(-settle)
	var out []outboxtype.MinuteCount
	for _, c := range fresh {
		if c.Minute.Before(settled) {
			m.kept[c.Minute] = c
		} else {
			out = append(out, c)
		}
	}
	if settled.After(m.upTo) {
		m.upTo = settled
	}
	for _, c := range m.kept {
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b outboxtype.MinuteCount) int { return a.Minute.Compare(b.Minute) })
	return out, nil
}
