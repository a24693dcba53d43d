package webhook

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/providers"
)

func TestGateCapsEachHostAndBacksOffFromOneThatNeverAnswers(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	g := newGate(2)
	g.now = func() time.Time { return now }
	ctx := context.Background()
	timeout := providers.TransportError(errors.New("i/o timeout"), true)

	// The cap is per host.
	for range 2 {
		ok, _ := g.admit(ctx, "slow.example:443")
		require.True(t, ok)
	}
	ok, wait := g.admit(ctx, "slow.example:443")
	require.False(t, ok, "third concurrent request to one host")
	require.Positive(t, wait)
	ok, _ = g.admit(ctx, "fast.example:443")
	require.True(t, ok, "another host is not affected")
	g.done("fast.example:443", nil)

	// A worker waiting at the cap gets the slot a finished request frees.
	got := make(chan bool)
	go func() { ok, _ := g.admit(ctx, "slow.example:443"); got <- ok }()
	g.done("slow.example:443", nil)
	require.True(t, <-got, "admitted when a slot was freed")
	g.done("slow.example:443", nil)
	g.done("slow.example:443", nil)

	// Requests in a row without an answer open the breaker; an answer in
	// between starts the count again.
	for i := range breakerFailures - 1 {
		ok, _ = g.admit(ctx, "slow.example:443")
		require.True(t, ok, "%d failures: still closed", i)
		g.done("slow.example:443", timeout)
	}
	ok, _ = g.admit(ctx, "slow.example:443")
	require.True(t, ok)
	g.done("slow.example:443", providers.InDoubt(errors.New("HTTP 503")))
	for range breakerFailures {
		ok, _ = g.admit(ctx, "slow.example:443")
		require.True(t, ok, "the 503 was an answer: the count started again")
		g.done("slow.example:443", timeout)
	}
	ok, wait = g.admit(ctx, "slow.example:443")
	require.False(t, ok, "open")
	require.GreaterOrEqual(t, wait, breakerBase)
	// What operators see of it.
	states := g.states()
	require.Len(t, states, 1)
	require.Equal(t, "slow.example:443", states[0].Host)
	require.True(t, states[0].BreakerOpen)
	require.Equal(t, now.Add(breakerBase), states[0].OpenUntil)
	require.Equal(t, breakerFailures, states[0].Failures)
	require.Equal(t, 2, states[0].Limit)

	// After the back-off, one probe goes through; a second waits for it.
	now = now.Add(breakerBase)
	ok, _ = g.admit(ctx, "slow.example:443")
	require.True(t, ok, "half open: one probe")
	ok, _ = g.admit(ctx, "slow.example:443")
	require.False(t, ok, "only one probe at a time")
	g.done("slow.example:443", timeout)
	ok, wait = g.admit(ctx, "slow.example:443")
	require.False(t, ok)
	require.GreaterOrEqual(t, wait, 2*breakerBase, "the back-off doubles")

	// A host that answers, even with an error status, closes the breaker.
	now = now.Add(2 * breakerBase)
	ok, _ = g.admit(ctx, "slow.example:443")
	require.True(t, ok)
	g.done("slow.example:443", providers.InDoubt(errors.New("HTTP 503")))
	for range 2 {
		ok, _ = g.admit(ctx, "slow.example:443")
		require.True(t, ok, "closed again")
	}
	// A slot released without a request changes nothing.
	g.done("slow.example:443", providers.ErrNotAttempted)
	g.done("slow.example:443", providers.ErrNotAttempted)
	require.Empty(t, g.hosts, "idle healthy hosts are forgotten")
}

// TestNamesBehindOneAddressEachHaveTheirOwnGate: a name is keyed by
// itself and the address it is dialled at, so that receivers behind one
// shared address (a platform's ingress) each have their own cap and
// breaker: one that hangs does not hold another's deliveries; together
// they stay within the address's cap.
func TestNamesBehindOneAddressEachHaveTheirOwnGate(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	g := newGate(1)
	g.now = func() time.Time { return now }
	lookups := 0
	g.lookup = func(_ context.Context, _, host string) ([]netip.Addr, error) {
		lookups++
		switch host {
		case "localhost":
			return []netip.Addr{netip.MustParseAddr("::1"), netip.MustParseAddr("127.0.0.1")}, nil
		case "hooks.example.com":
			return []netip.Addr{netip.MustParseAddr("2001:db8::7")}, nil
		case "a.ingress.example", "b.ingress.example", "c.ingress.example", "d.ingress.example", "e.ingress.example", "f.ingress.example":
			return []netip.Addr{netip.MustParseAddr("203.0.113.9")}, nil
		}
		return nil, errors.New("no such host")
	}
	ctx := context.Background()
	require.Equal(t, "127.0.0.1:8080", g.destination(ctx, "127.0.0.1:8080"))
	require.Equal(t, "localhost:8080@127.0.0.1:8080", g.destination(ctx, "localhost:8080"), "a name, at the IPv4 address it is dialled at")
	require.Equal(t, "localhost:9090@127.0.0.1:9090", g.destination(ctx, "localhost:9090"), "another port, another destination")
	require.Equal(t, "hooks.example.com:443@[2001:db8::7]:443", g.destination(ctx, "hooks.example.com:443"))
	require.Equal(t, "[::1]:8080", g.destination(ctx, "[::1]:8080"))
	require.Equal(t, "nowhere.invalid:443", g.destination(ctx, "nowhere.invalid:443"), "unresolved: keyed by its name")
	n := lookups
	g.destination(ctx, "localhost:8080")
	require.Equal(t, n, lookups, "an answer is kept for a while")
	now = now.Add(addrTTL + time.Second)
	g.destination(ctx, "localhost:8080")
	require.Equal(t, n+1, lookups, "and looked up again after it")

	// a's receiver hangs: its one slot is taken and its breaker opens.
	a := g.destination(ctx, "a.ingress.example:443")
	ok, _ := g.admit(ctx, a)
	require.True(t, ok)
	ok, _ = g.admit(ctx, a)
	require.False(t, ok, "a waits for its own cap")
	for range breakerFailures {
		g.done(a, providers.ErrNoResponse)
		_, _ = g.admit(ctx, a)
	}
	b := g.destination(ctx, "b.ingress.example:443")
	ok, _ = g.admit(ctx, b)
	require.True(t, ok, "b, behind the same address, is not held by a's hanging receiver")
	states := g.states()
	var open []string
	for _, st := range states {
		if st.BreakerOpen {
			open = append(open, st.Host+" "+st.Address)
		}
	}
	require.Equal(t, []string{"a.ingress.example:443 203.0.113.9:443"}, open, "the breaker is a's alone")

	// All the names of one address together: at most four hosts' caps.
	admitted := 0
	for _, name := range []string{"c", "d", "e", "f"} {
		if ok, _ := g.admit(ctx, g.destination(ctx, name+".ingress.example:443")); ok {
			admitted++
		}
	}
	require.Equal(t, 3, admitted, "the address has 4 slots and b holds one: three of c, d, e and f get one")
}

// TestIPv6FormsThatReachLocalNetworksAreRefused: addresses that embed an
// IPv4 address or reach a site-local network are refused at dial time.
func TestIPv6FormsThatReachLocalNetworksAreRefused(t *testing.T) {
	for addr, reason := range map[string]string{
		"::127.0.0.1":     "IPv4-compatible (deprecated)",
		"2002:7f00:1::1":  "6to4",
		"2001:0:4136::1":  "Teredo",
		"fec0::1":         "site-local (deprecated)",
		"100::1":          "discard-only",
		"::ffff:10.0.0.1": "private",
	} {
		require.Equal(t, reason, blockedReason(netip.MustParseAddr(addr).Unmap(), nil), addr)
	}
	require.Empty(t, blockedReason(netip.MustParseAddr("2606:4700::1111"), nil), "a public IPv6 address")
	require.Empty(t, blockedReason(netip.MustParseAddr("2002:7f00:1::1"), []netip.Prefix{netip.MustParsePrefix("2002::/16")}), "unless allowed")
}

// TestTheGateForgetsIdleDestinations: destinations that failed a few times
// and then went quiet (tenant-chosen URLs, one each) are forgotten once idle
// for forgetIdleAfter, so neither the gate's state nor its metric series
// grow without bound; an open breaker is kept until it closes.
func TestTheGateForgetsIdleDestinations(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	g := newGate(4)
	g.now = func() time.Time { return now }
	ctx := context.Background()
	timeout := providers.TransportError(errors.New("i/o timeout"), true)
	for i := range 500 {
		host := fmt.Sprintf("h%d.example:443", i)
		ok, _ := g.admit(ctx, host)
		require.True(t, ok)
		g.done(host, timeout)
	}
	// One that stopped answering: its breaker opens.
	for range breakerFailures {
		ok, _ := g.admit(ctx, "dead.example:443")
		require.True(t, ok)
		g.done("dead.example:443", timeout)
	}
	require.Len(t, g.states(), 501, "each holds a count of failures")

	// Much later the dead one is probed and fails again: its breaker is
	// open anew and kept; the quiet ones are forgotten.
	now = now.Add(forgetIdleAfter + 2*time.Minute)
	ok, _ := g.admit(ctx, "dead.example:443")
	require.True(t, ok, "a probe")
	g.done("dead.example:443", timeout)
	states := g.states()
	require.Len(t, states, 1, "only the open breaker is kept: %v", states)
	require.Equal(t, "dead.example:443", states[0].Host)
	require.True(t, states[0].BreakerOpen)

	// Nobody tries it again: it is forgotten too, once its wait is long over.
	now = now.Add(breakerMax + forgetIdleAfter + 2*time.Minute)
	ok, _ = g.admit(ctx, "fresh.example:443")
	require.True(t, ok)
	g.done("fresh.example:443", nil)
	require.Empty(t, g.states())
}

// TestOneAddressCannotMultiplyItsSlots: a receiver on many ports of one
// address, or on many addresses of one IPv6 /64, gets at most four
// destinations' caps in all; another address is not affected, and a
// freed slot is usable again.
func TestOneAddressCannotMultiplyItsSlots(t *testing.T) {
	g := newGate(2)
	ctx := context.Background()
	admitted := 0
	for port := 8000; port < 8005; port++ {
		for range 2 {
			if ok, _ := g.admit(ctx, fmt.Sprintf("203.0.113.7:%d", port)); ok {
				admitted++
			}
		}
	}
	require.Equal(t, 8, admitted, "five ports, two slots each, eight for the address")
	ok, _ := g.admit(ctx, "203.0.113.8:8000")
	require.True(t, ok, "another address has its own")
	g.done("203.0.113.7:8000", nil)
	ok, _ = g.admit(ctx, "203.0.113.7:8004")
	require.True(t, ok, "a freed slot of the address is usable by any of its ports")

	admitted = 0
	for i := 1; i <= 10; i++ {
		if ok, _ := g.admit(ctx, fmt.Sprintf("[2001:db8::%x]:443", i)); ok {
			admitted++
		}
	}
	require.Equal(t, 8, admitted, "one /64 is one address")
	ok, _ = g.admit(ctx, "[2001:db8:0:1::1]:443")
	require.True(t, ok, "the next /64 is another")
}

// TestADestinationWarmsUpToItsCap: a destination the gate holds nothing
// for gets 4 requests in flight at first; each request it accepts opens
// one more, at most one every 10 ms, up to its cap (16); a refusal opens
// none. A receiver whose rate nobody told outboxd refuses every request
// in flight when its bucket runs dry, so that first wave stays small. The
// slots the warm-up opens go to the workers waiting.
func TestADestinationWarmsUpToItsCap(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	g := newGate(16)
	g.now = func() time.Time { return now }
	const host = "partner.example:443"
	for i := range 4 {
		ok, _, _ := g.tryAdmit(host)
		require.True(t, ok, "request %d", i+1)
	}
	ok, _, first := g.tryAdmit(host)
	require.False(t, ok, "a fifth at once waits")
	_, _, second := g.tryAdmit(host)

	// Refused (a 429): its slot passes on, no more open.
	now = now.Add(20 * time.Millisecond)
	g.done(host, providers.Throttled(errors.New("HTTP 429"), 0))
	requireGranted(t, first)
	requireWaiting(t, second)
	require.Equal(t, 4, g.hosts[host].inFlight)

	// Accepted: its slot passes on, and one more opens.
	now = now.Add(20 * time.Millisecond)
	g.done(host, nil)
	requireGranted(t, second)
	ok, _, _ = g.tryAdmit(host)
	require.True(t, ok, "the one it opened")
	ok, _, third := g.tryAdmit(host)
	require.False(t, ok, "and no more")
	require.Equal(t, 5, g.hosts[host].inFlight)
	g.done(host, providers.Throttled(errors.New("HTTP 429"), 0))
	requireGranted(t, third)

	// At most one more every 10 ms, however many answers come.
	g.done(host, nil)
	g.done(host, nil)
	require.Equal(t, 5, g.hosts[host].window)

	// A receiver that keeps accepting: the cap.
	for range 20 {
		now = now.Add(10 * time.Millisecond)
		ok, _, _ := g.tryAdmit(host)
		require.True(t, ok)
		g.done(host, nil)
	}
	for g.hosts[host].inFlight < 16 {
		ok, _, _ := g.tryAdmit(host)
		require.True(t, ok, "admitted up to the cap")
	}
	ok, _, _ = g.tryAdmit(host)
	require.False(t, ok, "and no further")

	// Its next burst, after a pause, starts warm; a host idle for
	// forgetIdleAfter is forgotten and warms up again.
	for g.hosts[host].inFlight > 0 {
		g.done(host, nil)
	}
	require.Empty(t, g.states(), "a warm host holding nothing is not reported")
	now = now.Add(time.Minute)
	for range 16 {
		ok, _, _ := g.tryAdmit(host)
		require.True(t, ok, "warm after a minute's pause")
	}
	for g.hosts[host].inFlight > 0 {
		g.done(host, nil)
	}
	now = now.Add(forgetIdleAfter + 2*time.Minute)
	g.forgetIdle()
	require.NotContains(t, g.hosts, host)
	for range 4 {
		ok, _, _ := g.tryAdmit(host)
		require.True(t, ok)
	}
	ok, _, _ = g.tryAdmit(host)
	require.False(t, ok, "cold again")
}

func requireGranted(t *testing.T, slot chan struct{}) {
	t.Helper()
	select {
	case <-slot:
	default:
		t.Fatal("the waiting caller was not given a slot")
	}
}

func requireWaiting(t *testing.T, slot chan struct{}) {
	t.Helper()
	select {
	case <-slot:
		t.Fatal("the waiting caller was given a slot")
	default:
	}
}
