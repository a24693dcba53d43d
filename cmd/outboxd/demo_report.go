package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/providers"
)

// What the demo saw and how it prints it.

// fire is one provider call the demo saw.
type fire struct {
	at      time.Time
	outcome string
}

// recorder notes when each effect was fired and how each attempt ended,
// for the demo's report.
type recorder struct {
	mu    sync.Mutex
	fires map[string][]fire
}

func (r *recorder) wrap(p providers.Provider) providers.Provider {
	return &recordingProvider{Provider: p, rec: r}
}

func (r *recorder) firesOf(id uuid.UUID) []fire {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]fire(nil), r.fires[id.String()]...)
}

type recordingProvider struct {
	providers.Provider
	rec *recorder
}

func (p *recordingProvider) Send(ctx context.Context, req providers.Request) (providers.Result, error) {
	start := time.Now()
	res, err := p.Provider.Send(ctx, req)
	outcome := "ok"
	if err != nil {
		outcome = err.Error()
	}
	p.rec.mu.Lock()
	p.rec.fires[req.EffectID] = append(p.rec.fires[req.EffectID], fire{at: start, outcome: outcome})
	p.rec.mu.Unlock()
	return res, err
}

// path renders an effect's transitions, e.g.
// "pending -> fired +12ms (HTTP 500: in doubt) -> fired +0.6s -> confirmed +0.6s".
// After an answer that proves the provider did nothing the effect goes
// back to pending; after any other failure it stays fired (in doubt) and is
// re-fired with the same key.
func path(e demoEffect, f *outboxtype.Effect, fires []fire) string {
	since := func(t time.Time) string {
		d := t.Sub(e.committed)
		if d < time.Second {
			return fmt.Sprintf("+%dms", d.Milliseconds())
		}
		return fmt.Sprintf("+%.2fs", d.Seconds())
	}
	var b strings.Builder
	b.WriteString("pending")
	for i, fr := range fires {
		fmt.Fprintf(&b, " -> fired %s", since(fr.at))
		if fr.outcome != "ok" {
			msg, class := fr.outcome, ""
			if i := strings.Index(msg, ": "); i >= 0 {
				msg, class = msg[i+2:], msg[:i]
			}
			if len(msg) > 60 {
				msg = msg[:57] + "..."
			}
			if class == "in_doubt" {
				msg += ": in doubt"
			}
			fmt.Fprintf(&b, " (%s)", msg)
			if i < len(fires)-1 && class == "retryable" {
				b.WriteString(" -> pending")
			}
		}
	}
	switch {
	case f.State == outboxtype.StateConfirmed && f.ConfirmedAt != nil:
		fmt.Fprintf(&b, " -> confirmed %s", since(*f.ConfirmedAt))
	default:
		fmt.Fprintf(&b, " -> %s", f.State)
	}
	return b.String()
}
