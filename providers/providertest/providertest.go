// Package providertest is the conformance suite of the provider contract
// (docs/providers.md, "The contract"): what outboxd's dispatcher relies on
// from every provider, checked against a real destination the test
// controls. Every built-in provider runs it with its own Fixture, as each
// Watermill Pub/Sub runs pubsub/tests.TestPubSub; a provider written for
// one application can run it too.
//
//	func TestConformance(t *testing.T) {
//		providertest.Run(t, providertest.Fixture{New: func(t *testing.T) providertest.Setup { ... }})
//	}
//
// What a provider does beyond the contract (Stripe's operations, a
// webhook's signature, a stream's window) stays in its own tests.
package providertest

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/providers"
)

// Fixture is the provider under test: how to set it up against a fresh
// destination for each check.
type Fixture struct {
	// New returns the provider pointed at a new destination of its own
	// (both closed by t's cleanup).
	New func(t *testing.T) Setup
}

// Setup is one provider and the destination it talks to.
type Setup struct {
	Provider providers.Provider
	// Kind and Payload are an effect the provider sends to this
	// destination: valid, and acknowledged unless the destination is told
	// otherwise.
	Kind    string
	Payload json.RawMessage
	// Event is the effect's event, for a provider that relays it
	// (providers.EventPublisher).
	Event *providers.SourceEvent
	// Keys returns the idempotency key of every request the destination
	// has received (or stored), waiting until there are at least n.
	Keys func(t *testing.T, n int) []string
	// Throttle makes the destination's next answer a refusal for rate
	// (an HTTP 429); nil when it has none.
	Throttle func()
	// Reject makes the destination's next answer a refusal of the
	// request itself, final for this payload (an HTTP 400, 410 or 422);
	// nil when it has none.
	Reject func()
	// Unreachable makes the destination unreachable from now on (its
	// server closed, its broker stopped); nil to skip that check.
	Unreachable func(t *testing.T)
}

// queueName is River's rule for a queue name, which a provider's name is.
var queueName = regexp.MustCompile(`^[a-z0-9]+([_-][a-z0-9]+)*$`)

// Run checks the contract for the provider f makes, each check a subtest.
func Run(t *testing.T, f Fixture) {
	t.Helper()
	require.NotNil(t, f.New, "Fixture.New")
	setup := func(t *testing.T) Setup {
		s := f.New(t)
		require.NotNil(t, s.Provider, "Setup.Provider")
		require.NotNil(t, s.Keys, "Setup.Keys")
		return s
	}

	t.Run("Declares", func(t *testing.T) {
		t.Parallel()
		s := setup(t)
		p := s.Provider
		name := p.Name()
		require.True(t, len(name) <= 64 && queueName.MatchString(name),
			"the name %q is its River queue: lower-case letters and digits, '_' or '-' between them", name)
		g := p.Guarantees()
		require.GreaterOrEqual(t, g.KeyWindow, time.Duration(0))
		if g.KeyWindow > 0 {
			require.Greater(t, g.Refirable(), time.Duration(0), "the margin %s leaves nothing of the window %s", g.KeyWindowMargin, g.KeyWindow)
		}
		require.Contains(t, []providers.InDoubtPolicy{providers.AtLeastOnce, providers.AtMostOnce}, g.InDoubt,
			"an attempt in doubt is re-sent or parked, nothing else")
		if timed, ok := p.(providers.Timed); ok {
			require.Greater(t, timed.Timeout(), time.Duration(0), "a provider with a timeout of its own names it")
		}
	})

	t.Run("ValidatesPayloads", func(t *testing.T) {
		t.Parallel()
		s := setup(t)
		p := s.Provider
		require.NoError(t, p.ValidatePayload(s.Kind, s.Payload), "the fixture's payload")
		for _, bad := range []string{`[]`, `"text"`, `null`, `{`} {
			require.Error(t, p.ValidatePayload(s.Kind, json.RawMessage(bad)), "a payload that is not a JSON object: %s", bad)
		}
	})

	t.Run("AnAcknowledgedRequestCarriesItsKey", func(t *testing.T) {
		t.Parallel()
		s := setup(t)
		p := s.Provider
		key := newKey(1)
		_, err := p.Send(context.Background(), s.request(key))
		require.NoError(t, err)
		require.Equal(t, []string{key}, s.Keys(t, 1))
	})

	t.Run("EveryAttemptOfAnEffectCarriesTheSameKey", func(t *testing.T) {
		t.Parallel()
		s := setup(t)
		p := s.Provider
		first, second := newKey(2), newKey(3)
		for _, key := range []string{first, first, second} {
			_, err := p.Send(context.Background(), s.request(key))
			require.NoError(t, err)
		}
		seen := map[string]int{}
		for _, k := range s.Keys(t, 2) {
			seen[k]++
		}
		require.Len(t, seen, 2, "one key per effect, never a new one for a re-send: %v", seen)
		require.Contains(t, seen, first)
		require.Contains(t, seen, second)
	})

	t.Run("ARefusalForRateIsThrottled", func(t *testing.T) {
		t.Parallel()
		s := setup(t)
		p := s.Provider
		if s.Throttle == nil {
			t.Skip("the destination has no refusal for rate")
		}
		s.Throttle()
		_, err := p.Send(context.Background(), s.request(newKey(4)))
		require.Error(t, err)
		require.True(t, providers.IsThrottled(err), "a 429 slows the whole limit key: %v", err)
		class, _ := providers.Classify(err)
		require.NotEqual(t, providers.ClassPermanent, class)
	})

	t.Run("ARejectedRequestIsPermanent", func(t *testing.T) {
		t.Parallel()
		s := setup(t)
		p := s.Provider
		if s.Reject == nil {
			t.Skip("the destination has no final refusal")
		}
		s.Reject()
		_, err := p.Send(context.Background(), s.request(newKey(5)))
		require.Error(t, err)
		class, _ := providers.Classify(err)
		require.Equal(t, providers.ClassPermanent, class, "%v", err)
	})

	t.Run("AnUnreachableDestinationNeverFailsForGood", func(t *testing.T) {
		t.Parallel()
		s := setup(t)
		p := s.Provider
		if s.Unreachable == nil {
			t.Skip("the fixture cannot take its destination away")
		}
		s.Unreachable(t)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := p.Send(ctx, s.request(newKey(6)))
		require.Error(t, err, "nothing acknowledged it")
		class, _ := providers.Classify(err)
		require.NotEqual(t, providers.ClassPermanent, class, "an outage fails no effect: %v", err)
	})

	t.Run("ACancelledCallIsNotAcknowledged", func(t *testing.T) {
		t.Parallel()
		s := setup(t)
		p := s.Provider
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := p.Send(ctx, s.request(newKey(7)))
		require.Error(t, err)
		class, _ := providers.Classify(err)
		require.NotEqual(t, providers.ClassPermanent, class, "a shutdown fails no effect: %v", err)
	})
}

// request is an attempt of the setup's effect with key.
func (s Setup) request(key string) providers.Request {
	return providers.Request{
		EffectID: "0190c3a0-7b1e-8c3d-9f00-" + key[len(key)-12:], Kind: s.Kind, Key: key, Payload: s.Payload,
		Attempt: 1, EventID: "0190c3a0-7b1e-7c3d-9f00-000000000001", Event: s.Event,
	}
}

// newKey is a key of the contract's shape (64 hex characters), distinct
// for each n and each test.
func newKey(n int) string {
	return fmt.Sprintf("%056x%08x", time.Now().UnixNano(), n)
}
