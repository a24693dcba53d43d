package webhook

import (
	"context"
	"errors"
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
