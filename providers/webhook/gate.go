package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/outboxd/outboxd/providers"
)

// Defaults of the per-destination limits.
const (
	// DefaultMaxPerHost caps concurrent requests to one destination host.
	DefaultMaxPerHost = 16
	// A destination's breaker opens when breakerFailures requests in a row
	// got no answer at all (timeouts, resets, refused connections): a host
	// that hangs, not one that sometimes fails (at 25% no-answers, eight in
	// a row happen once in 65,000 requests). It stays open breakerBase,
	// doubling with each failed probe up to breakerMax.
	breakerFailures = 8
	breakerBase     = 5 * time.Second
	breakerMax      = 5 * time.Minute
	// slotWait is how long a worker waits in process for a slot at a
	// destination at its cap without any slot being freed: a destination
	// that answers frees them continually, and its effects queue in
	// process; one that hangs frees none, and after slotWait the effect's
	// job waits capacityWait (plus jitter) without holding a worker.
	slotWait     = 100 * time.Millisecond
	capacityWait = time.Second
	// A destination this process holds nothing for starts at warmStart
	// requests in flight, and each request it accepts (answers other than
	// with an error) opens one more, at most one every warmStep, up to
	// the cap. A receiver whose rate nobody told outboxd refuses, with a
	// 429, every request in flight when its bucket runs dry: with three
	// replicas at a cap of 16 that first wave was 41 of a drain's 53 429s.
	// A receiver that keeps accepting reaches the cap in 12 answers,
	// 120 ms at the earliest.
	warmStart = 4
	warmStep  = 10 * time.Millisecond
)

// gate isolates destinations from each other: at most max requests in
// flight per host, and a host that keeps not answering is left alone for a
// growing while (a circuit breaker), so one hanging receiver cannot take
// every worker of the webhook queue. It is per process.
type gate struct {
	max int
	// maxPerAddress caps the requests in flight to one address (an IPv4
	// address, an IPv6 /64) over all its ports: a receiver listening on
	// many ports, or many addresses of one /64, cannot multiply its slots
	// past it, while receivers behind one shared address each keep their
	// own cap and breaker up to it.
	maxPerAddress int
	now           func() time.Time

	mu    sync.Mutex
	hosts map[string]*hostState
	// addresses counts the requests in flight per address group.
	addresses map[string]int
	// swept is when forgetIdle last looked.
	swept time.Time
	// addrs caches destination's answers by host; lookup resolves a name
	// (nil: the system's resolver).
	addrs  map[string]resolved
	lookup func(ctx context.Context, network, host string) ([]netip.Addr, error)
}

type hostState struct {
	inFlight int
	// waiters are the callers queued for a slot, oldest first; lastFreed
	// is when a slot was last released.
	waiters   []chan struct{}
	lastFreed time.Time
	// failures counts requests in a row that got no answer.
	failures  int
	open      bool
	opens     int // consecutive openings, for the back-off
	openUntil time.Time
	// probing is true while the one request let through after the breaker
	// opened is in flight.
	probing bool
	// window is how many requests may be in flight to the host now (its
	// warm-up; 0: the cap), opened one more at grownAt.
	window  int
	grownAt time.Time
}

// limit is how many requests may be in flight to h: its warm-up's
// window, or max once warmed up.
func (h *hostState) limit(max int) int {
	if h.window <= 0 || h.window >= max {
		return max
	}
	return h.window
}

// addressShare is how many destinations' caps one address may fill.
const addressShare = 4

func newGate(max int) *gate {
	return &gate{max: max, maxPerAddress: addressShare * max, now: time.Now, hosts: map[string]*hostState{},
		addresses: map[string]int{}, addrs: map[string]resolved{}}
}

// addressOf is the address group of a destination key (as destination
// returns it): its IPv4 address, its IPv6 /64, or its name when it did not
// resolve.
func addressOf(host string) string {
	if _, addr, ok := strings.Cut(host, "@"); ok {
		host = addr
	}
	name, _, err := net.SplitHostPort(host)
	if err != nil {
		name = strings.Trim(host, "[]")
	}
	ip, err := netip.ParseAddr(name)
	if err != nil {
		return name
	}
	ip = ip.Unmap()
	if ip.Is6() {
		return netip.PrefixFrom(ip, 64).Masked().String()
	}
	return ip.String()
}

// hostOf is the destination host (host[:port], as written) of a webhook
// payload, or "" when it has none (Send then fails it permanently).
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

// addrTTL is how long the gate keeps the address a host name resolved to.
const addrTTL = 30 * time.Second

type resolved struct {
	key     string
	expires time.Time
}

// destination is the gate's key for host (host[:port]): an address
// literal is its own key; a name is resolved (kept for addrTTL) and keyed
// "name:port@address:port" by its first IPv4 address, else its first
// address. Each name has its own cap and breaker, so that receivers of
// several tenants behind one shared address (a platform's ingress) do not
// wait for each other's hanging one, while all of them together stay
// within the address's cap (maxPerAddress), so that many names of one
// receiver cannot multiply its slots past it. A name that does not
// resolve keeps its name (the request then fails before any byte is
// sent).
func (g *gate) destination(ctx context.Context, host string) string {
	name, port, err := net.SplitHostPort(host)
	if err != nil {
		// No port: the scheme's (the gate does not know it; a host is
		// reached by one scheme in practice).
		name, port = strings.Trim(host, "[]"), ""
	}
	if ip, err := netip.ParseAddr(name); err == nil {
		return net.JoinHostPort(ip.Unmap().String(), port)
	}
	g.mu.Lock()
	r, ok := g.addrs[host]
	g.mu.Unlock()
	if ok && g.now().Before(r.expires) {
		return r.key
	}
	lookup := g.lookup
	if lookup == nil {
		lookup = net.DefaultResolver.LookupNetIP
	}
	lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	ips, err := lookup(lctx, "ip", strings.TrimSuffix(name, "."))
	if err != nil || len(ips) == 0 {
		return host
	}
	pick := ips[0]
	for _, ip := range ips {
		if ip.Unmap().Is4() {
			pick = ip
			break
		}
	}
	key := host + "@" + net.JoinHostPort(pick.Unmap().String(), port)
	g.mu.Lock()
	if len(g.addrs) > 10_000 {
		clear(g.addrs)
	}
	g.addrs[host] = resolved{key: key, expires: g.now().Add(addrTTL)}
	g.mu.Unlock()
	return key
}

// admit takes a slot for host. While the host is at its cap the caller
// queues for the next freed slot (first come, first served) as long as the
// host frees one at least every slotWait; otherwise, or while its breaker
// is open, admit says how long the effect should wait.
func (g *gate) admit(ctx context.Context, host string) (ok bool, wait time.Duration) {
	ok, wait, slot := g.tryAdmit(host)
	if ok || slot == nil {
		return ok, wait
	}
	timer := time.NewTimer(slotWait)
	defer timer.Stop()
	for {
		select {
		case <-slot:
			return true, 0
		case <-timer.C:
		case <-ctx.Done():
		}
		g.mu.Lock()
		h := g.hosts[host]
		select {
		case <-slot: // granted meanwhile
			g.mu.Unlock()
			return true, 0
		default:
		}
		if since := g.now().Sub(h.lastFreed); ctx.Err() == nil && since < slotWait {
			g.mu.Unlock()
			timer.Reset(slotWait - since)
			continue
		}
		h.waiters = slices.DeleteFunc(h.waiters, func(w chan struct{}) bool { return w == slot })
		g.mu.Unlock()
		return false, wait
	}
}

// tryAdmit takes a slot for host if one is free. When the host is at its
// cap it queues the caller: the returned channel receives the slot when one
// is freed.
func (g *gate) tryAdmit(host string) (ok bool, wait time.Duration, slot chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	h := g.hosts[host]
	if h == nil {
		h = &hostState{window: warmStart}
		g.hosts[host] = h
	}
	now := g.now()
	if h.open {
		if now.Before(h.openUntil) {
			return false, h.openUntil.Sub(now) + jitter(), nil
		}
		// Half open: one request probes whether the host answers again.
		if h.probing || h.inFlight >= g.max {
			return false, capacityWait + jitter(), nil
		}
		h.probing = true
	}
	if !h.open {
		g.grantWaiting(host, h)
	}
	if h.inFlight >= h.limit(g.max) || len(h.waiters) > 0 {
		if h.open {
			return false, capacityWait + jitter(), nil
		}
		slot = make(chan struct{}, 1)
		h.waiters = append(h.waiters, slot)
		return false, capacityWait + jitter(), slot
	}
	if g.addresses[addressOf(host)] >= g.maxPerAddress {
		// Its address is at its cap over other ports or addresses.
		if h.probing {
			h.probing = false
		}
		return false, capacityWait + jitter(), nil
	}
	h.inFlight++
	g.addresses[addressOf(host)]++
	return true, 0, nil
}

// grantWaiting gives the slots host's warm-up opened to the callers
// waiting, oldest first, within its address's cap. g.mu is held.
func (g *gate) grantWaiting(host string, h *hostState) {
	for len(h.waiters) > 0 && h.inFlight < h.limit(g.max) && g.addresses[addressOf(host)] < g.maxPerAddress {
		var next chan struct{}
		next, h.waiters = h.waiters[0], h.waiters[1:]
		h.inFlight++
		g.addresses[addressOf(host)]++
		next <- struct{}{}
	}
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
	wasProbe := h.probing
	h.probing = false
	h.lastFreed = g.now()
	if sendErr == nil && h.window > 0 && h.window < g.max && h.lastFreed.Sub(h.grownAt) >= warmStep {
		h.window++ // accepted: one more may go (the warm-up)
		h.grownAt = h.lastFreed
	}
	if len(h.waiters) > 0 && !h.open {
		// The slot passes to the oldest waiter (of the same address), and
		// so do those the warm-up opened.
		next := h.waiters[0]
		h.waiters = h.waiters[1:]
		next <- struct{}{}
		g.grantWaiting(host, h)
	} else {
		h.inFlight--
		if addr := addressOf(host); g.addresses[addr] <= 1 {
			delete(g.addresses, addr)
		} else {
			g.addresses[addr]--
		}
	}
	answered := sendErr == nil || !errors.Is(sendErr, providers.ErrNoResponse)
	switch {
	case errors.Is(sendErr, providers.ErrNotAttempted):
	case answered && h.open && !wasProbe:
		// A request admitted before the breaker opened: not a probe.
	case answered:
		h.failures, h.open, h.opens, h.openUntil = 0, false, 0, time.Time{}
	case h.open && !wasProbe:
	default:
		h.failures++
		if h.open || h.failures >= breakerFailures {
			h.open = true
			h.openUntil = g.now().Add(min(breakerBase<<min(h.opens, 10), breakerMax))
			h.opens++
		}
	}
	if h.inFlight == 0 && len(h.waiters) == 0 && !h.open && h.failures == 0 && h.window <= warmStart {
		// Nothing to keep; a host that warmed up is kept (forgetIdle),
		// or its next burst would warm up again.
		delete(g.hosts, host)
	}
	g.forgetIdle()
}

// forgetIdleAfter is how long the gate keeps a destination it holds
// nothing for but a count of failures (its breaker closed): tenant-chosen
// URLs must not grow the gate's state, or its metric series, without
// bound. g.mu is held.
const forgetIdleAfter = 10 * time.Minute

// forgetIdle drops, at most once a minute, the destinations with nothing
// in flight and nobody waiting that freed their last slot more than
// forgetIdleAfter ago, and whose breaker, if open, ended its wait as long
// ago (nobody has tried them since). g.mu is held.
func (g *gate) forgetIdle() {
	now := g.now()
	if now.Sub(g.swept) < time.Minute {
		return
	}
	g.swept = now
	for host, h := range g.hosts {
		if h.inFlight == 0 && len(h.waiters) == 0 && now.Sub(h.lastFreed) > forgetIdleAfter &&
			(!h.open || now.Sub(h.openUntil) > forgetIdleAfter) {
			delete(g.hosts, host)
		}
	}
}

func jitter() time.Duration { return rand.N(capacityWait / 2) }

// states reports the destinations the gate holds anything for, by host.
func (g *gate) states() []providers.DestinationState {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]providers.DestinationState, 0, len(g.hosts))
	for key, h := range g.hosts {
		if h.inFlight == 0 && len(h.waiters) == 0 && !h.open && h.failures == 0 {
			continue // kept only for its warm-up: holds nothing
		}
		host, addr, _ := strings.Cut(key, "@")
		st := providers.DestinationState{Host: host, Address: addr, InFlight: h.inFlight, Waiting: len(h.waiters), Limit: g.max,
			Failures: h.failures, BreakerOpen: h.open}
		if h.open {
			st.OpenUntil = h.openUntil
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b providers.DestinationState) int { return strings.Compare(a.Host, b.Host) })
	return out
}
