package webhook

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/outboxd/outboxd/providers"
)

// Defaults of the per-destination limits.
const (
	// DefaultMaxPerHost caps concurrent requests to one destination host.
	DefaultMaxPerHost = 4
	// breakerThreshold consecutive requests without an answer (timeouts,
	// resets, refused connections) open a destination's breaker.
	breakerThreshold = 3
	breakerBase      = 5 * time.Second
	breakerMax       = 5 * time.Minute
	// capacityWait is how long an effect for a destination at its cap waits
	// before its job is tried again (plus jitter).
	capacityWait = time.Second
)

// gate isolates destinations from each other: at most max requests in
// flight per host, and a host that keeps not answering is left alone for a
// growing while (a circuit breaker), so one hanging receiver cannot take
// every worker of the webhook queue. It is per process.
type gate struct {
	max int
	now func() time.Time

	mu    sync.Mutex
	hosts map[string]*hostState
}

type hostState struct {
	inFlight int
	// failures counts consecutive requests that got no answer.
	failures  int
	openUntil time.Time
	// probing is true while the one request let through after the breaker
	// opened is in flight.
	probing bool
}

func newGate(max int) *gate {
	return &gate{max: max, now: time.Now, hosts: map[string]*hostState{}}
}

// hostOf is the destination host (host:port) of a webhook payload, or ""
// when it has none (Send then fails it permanently).
func hostOf(payload json.RawMessage) string {
	var p struct {
		URL string `json:"url"`
	}
	if json.Unmarshal(payload, &p) != nil {
		return ""
	}
	u, err := url.Parse(p.URL)
	if err != nil {
		return ""
	}
	return strings.ToLower(u.Host)
}

// admit takes a slot for host, or says how long to wait.
func (g *gate) admit(host string) (ok bool, wait time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	h := g.hosts[host]
	if h == nil {
		h = &hostState{}
		g.hosts[host] = h
	}
	now := g.now()
	if h.failures >= breakerThreshold {
		if now.Before(h.openUntil) {
			return false, h.openUntil.Sub(now) + jitter()
		}
		// Half open: one request probes whether the host answers again.
		if h.probing {
			return false, capacityWait + jitter()
		}
		h.probing = true
	}
	if h.inFlight >= g.max {
		return false, capacityWait + jitter()
	}
	h.inFlight++
	return true, 0
}

// done releases host's slot and records whether the host answered at all
// (any HTTP status counts as an answer).
func (g *gate) done(host string, sendErr error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	h := g.hosts[host]
	if h == nil {
		return
	}
	h.inFlight--
	h.probing = false
	switch {
	case errors.Is(sendErr, providers.ErrNotAttempted):
	case sendErr == nil || !errors.Is(sendErr, providers.ErrNoResponse):
		h.failures = 0
		h.openUntil = time.Time{}
	default:
		h.failures++
		if h.failures >= breakerThreshold {
			backoff := breakerBase << min(h.failures-breakerThreshold, 10)
			h.openUntil = g.now().Add(min(backoff, breakerMax))
		}
	}
	if h.inFlight == 0 && h.failures == 0 {
		delete(g.hosts, host)
	}
}

func jitter() time.Duration { return rand.N(capacityWait / 2) }
