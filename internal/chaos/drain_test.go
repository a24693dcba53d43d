//go:build chaos

package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/stripe"
	"github.com/outboxd/outboxd/providers/stripe/stripeschema"
	"github.com/outboxd/outboxd/providers/webhook"
)

// A limited drain after a backlog: 3,000 Stripe refunds and 2,000
// webhooks, three replicas SIGKILLed four times in the first 30 s, against
// a Stripe that answers 429 rate_limit (no Retry-After) beyond 100 a
// second and a receiver that answers 429 with Retry-After: 1 beyond 50 a
// second. Ideal drains: 30 s and 40 s.
const (
	drainStripe, drainWebhooks = 3000, 2000
	stripeRate, receiverRate   = 100, 50
	// What a SIGKILL costs at most, as docs/dispatch.md says: the killed
	// replica's jobs are handed back by River's rescuer, which runs every
	// 30 s, once they have run --rescue-after (8 s in this suite); the
	// first retry's delay is 100 ms here.
	crashRecovery = 38*time.Second + 100*time.Millisecond
)

// TestChaosLimitedDrainKnownLimits: both limits configured (--limit):
// each provider drains within 1.2× its ideal plus the crash recovery,
// with at most 1% of requests refused 429 and each provider's requests
// within its rate (+5%) over any 10 s.
func TestChaosLimitedDrainKnownLimits(t *testing.T) {
	t.Parallel()
	limitedDrain(t, drainCase{seed: 4, slack: 1.2, refused: 0.01, knownLimits: true, flags: func(receiverKey string) []string {
		return []string{"--limit", fmt.Sprintf("stripe=%d", stripeRate), "--limit", fmt.Sprintf("%s=%d", receiverKey, receiverRate)}
	}})
}

// TestChaosLimitedDrainUnknownReceiver: a live Stripe key (its published
// 100/s) and no rate for the receiver, which outboxd learns from its 429s:
// at most 2% refused, each drain within 1.5× its ideal plus the crash
// recovery.
func TestChaosLimitedDrainUnknownReceiver(t *testing.T) {
	t.Parallel()
	limitedDrain(t, drainCase{seed: 5, slack: 1.5, refused: 0.02, flags: func(string) []string {
		return []string{"--stripe-api-key", "sk_live_chaos"}
	}})
}

type drainCase struct {
	seed uint64
	// each provider's drain within slack × its ideal plus crashRecovery,
	// at most refused of its requests answered 429
	slack, refused float64
	// with both limits known, every provider's requests, the refused ones
	// included, stay within its rate (+5%) over any 10 s
	knownLimits bool
	// the limits' flags, given the receiver's limit key
	flags func(receiverKey string) []string
}

func limitedDrain(t *testing.T, c drainCase) {
	w := newWorld(t)
	ctx := context.Background()
	w.stripe.Limit(stripeRate)
	w.recv.Limit(receiverRate, "1")
	ob, err := outbox.New(outbox.Config{Jobs: outbox.JobsInTransaction, Schema: w.db.Schema, Providers: []providers.Validator{
		webhook.Schema{AllowedNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}, stripe.Schema{},
	}})
	require.NoError(t, err)
	port := w.recv.URL[strings.LastIndex(w.recv.URL, ":")+1:]
	for batch := 0; batch < drainStripe; batch += 500 {
		require.NoError(t, pgx.BeginFunc(ctx, w.db.Pool, func(tx pgx.Tx) error {
			for i := batch; i < batch+500; i++ {
				order := fmt.Sprintf("d%05d", i)
				effects := []outbox.Effect{outbox.EffectOf("stripe.refund", stripeschema.RefundCreate{PaymentIntent: "pi_" + order})}
				if i < drainWebhooks {
					effects = append(effects, outbox.EffectOf("webhook.order_paid", webhook.Payload{URL: "http://localhost:" + port + "/hook",
						Body: json.RawMessage(`{"order": "` + order + `"}`)}))
				}
				res, err := ob.Enqueue(ctx, tx, outbox.Event{ID: outbox.EventID("chaos-drain", order), Type: "order.paid"}, effects...)
				if err != nil {
					return err
				}
				w.remember(res, order)
			}
			return nil
		}))
	}
	start := time.Now()
	w.killReplicas(t, c.seed, 4, 5*time.Second, 2*time.Second,
		append(c.flags("webhook:localhost:"+port), "--concurrency", "webhook=20,stripe=20", "--db-max-conns", "8")...)
	w.waitAllConfirmed(t, 4*time.Minute)
	w.checkKeys(t)

	var stripeAt, stripeOK, webhookAt, webhookOK []time.Time
	for _, r := range w.stripe.Requests() {
		stripeAt = append(stripeAt, r.At)
		if r.Status < 300 {
			stripeOK = append(stripeOK, r.At)
		}
	}
	for _, d := range w.recv.Deliveries() {
		webhookAt = append(webhookAt, d.At)
		if d.Status < 300 {
			webhookOK = append(webhookOK, d.At)
		}
	}
	var attempts float64
	require.NoError(t, w.db.Pool.QueryRow(ctx, `SELECT avg(total_attempts) FROM `+w.db.Schema+`.side_effects`).Scan(&attempts))
	for _, p := range []struct {
		name          string
		n, rate       int
		all, accepted []time.Time
	}{
		{"stripe", drainStripe, stripeRate, stripeAt, stripeOK},
		{"webhook", drainWebhooks, receiverRate, webhookAt, webhookOK},
	} {
		ideal := time.Duration(float64(p.n) / float64(p.rate) * float64(time.Second))
		drain := p.accepted[len(p.accepted)-1].Sub(start)
		over := len(p.all) - len(p.accepted)
		most := busiest(p.all, 10*time.Second)
		t.Logf("%s: %d effects drained in %s (ideal %s, allowed %s); %d requests, %d refused 429 (%.2f%%); at most %d in any 10 s (rate %d/s); requests per 10 s: %v",
			p.name, p.n, drain.Round(100*time.Millisecond), ideal, (time.Duration(c.slack*float64(ideal)) + crashRecovery).Round(time.Second),
			len(p.all), over, 100*float64(over)/float64(len(p.all)), most, p.rate, perWindow(p.all, start, 10*time.Second))
		require.LessOrEqual(t, drain, time.Duration(c.slack*float64(ideal))+crashRecovery, "%s drained within %.1f× its ideal plus the crash recovery", p.name, c.slack)
		require.LessOrEqual(t, float64(over), c.refused*float64(len(p.all)), "%s: at most %.0f%% of requests refused 429", p.name, 100*c.refused)
		if c.knownLimits {
			// The fake refuses what is over its rate; counting refused
			// requests too, the replicas together stayed within it.
			require.LessOrEqual(t, most, 10*p.rate*105/100, "%s: the replicas together stayed within its rate", p.name)
		}
	}
	t.Logf("attempts per effect: %.3f (a SIGKILL mid-call re-fires with the same key)", attempts)
}

// perWindow counts at in consecutive windows from start.
func perWindow(at []time.Time, start time.Time, window time.Duration) []int {
	var counts []int
	for _, a := range at {
		i := int(a.Sub(start) / window)
		for len(counts) <= i {
			counts = append(counts, 0)
		}
		counts[i]++
	}
	return counts
}
