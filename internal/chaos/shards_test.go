//go:build chaos

package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/stripe"
	"github.com/outboxd/outboxd/providers/stripe/stripeschema"
	"github.com/outboxd/outboxd/providers/webhook"
)

// shardOf is one shard of the fleet test: its name, URL, schema and pool.
type shardOf struct {
	name, url, schema string
	pool              *pgxpool.Pool
	keys              []string
}

// TestChaosShards: three shards, each on a Postgres of its own, each with a backlog of webhooks and Stripe
// refunds, drained by two outboxd replicas that each serve all three,
// against one limit per provider for the whole fleet: a Stripe that
// refuses (429 rate_limit) beyond 100 requests a second and a receiver
// that refuses (429, Retry-After: 1) beyond 50; replicas are SIGKILLed,
// and the third shard's Postgres is stopped for 30 s mid-drain. The
// others keep dispatching while it is down, every effect of every shard is
// sent with its own key, each provider gets no more than its rate over
// any 10 s window (its refused requests counted) and refuses at most 1%,
// and the stopped shard drains once it is back.
func TestChaosShards(t *testing.T) {
	t.Parallel()
	const rate, perShard, stripePerShard = 50, 400, 600
	w := newWorld(t)
	w.stripe.Limit(stripeRate)
	w.recv.Limit(rate, "1")
	ctx := context.Background()
	// us-1 and ap-1 each on a Postgres of its own.
	own := func(name string) (*cluster, *pgxpool.Pool) {
		c := newCluster(t)
		out, err := exec.Command(w.bin, "migrate", "--database-url", c.url(), "--schema", "outboxd").CombinedOutput()
		require.NoError(t, err, "migrate shard %s: %s", name, out)
		pool, err := pgxpool.New(ctx, c.url())
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		return c, pool
	}
	us, usPool := own("us-1")
	priv, privPool := own("ap-1")
	shards := []*shardOf{
		{name: "eu-1", url: w.url, schema: w.db.Schema, pool: w.db.Pool},
		{name: "us-1", url: us.url(), schema: "outboxd", pool: usPool},
		{name: "ap-1", url: priv.url(), schema: "outboxd", pool: privPool},
	}
	port := w.recv.URL[strings.LastIndex(w.recv.URL, ":")+1:]
	for _, s := range shards {
		ob, err := outbox.New(outbox.Config{Jobs: outbox.JobsByDispatcher, Schema: s.schema, Providers: []providers.Validator{
			webhook.Schema{AllowedNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}, stripe.Schema{},
		}})
		require.NoError(t, err)
		require.NoError(t, pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			for i := range max(perShard, stripePerShard) {
				order := fmt.Sprintf("%s-%05d", s.name, i)
				// What each request carries that names its order (a Stripe
				// id has no dashes).
				var effects []outbox.Effect
				var markers []string
				if i < perShard {
					effects = append(effects, outbox.EffectOf("webhook.order_paid", webhook.Payload{URL: "http://localhost:" + port + "/hook",
						Body: json.RawMessage(`{"order": "` + order + `"}`)}))
					markers = append(markers, order)
				}
				if i < stripePerShard {
					pi := strings.ReplaceAll(order, "-", "")
					effects = append(effects, outbox.EffectOf("stripe.refund", stripeschema.RefundCreate{PaymentIntent: "pi_" + pi}))
					markers = append(markers, pi)
				}
				res, err := ob.Enqueue(ctx, tx, outbox.Event{ID: outbox.EventID("chaos-shards", order), Type: "order.paid"}, effects...)
				if err != nil {
					return err
				}
				for j, e := range res.Effects {
					w.marker[e.Key] = markers[j]
					w.ids[e.Key] = e.ID
					s.keys = append(s.keys, e.Key)
				}
			}
			return nil
		}))
	}

	args := []string{"run", "--http-addr", "", "--log-level", "error",
		"--webhook-secret", secret, "--webhook-allow-cidrs", "127.0.0.0/8", "--webhook-timeout", "2s",
		"--job-timeout", "5s", "--rescue-after", "8s", "--retry-base-delay", "100ms", "--retry-max-delay", "2s",
		"--stripe-api-key", "sk_test_chaos", "--stripe-api-base", w.stripe.URL, "--stripe-timeout", "2s",
		"--concurrency", "webhook=100,stripe=20", "--shutdown-timeout", "5s",
		// A small pool per shard: a replica serving many shards holds
		// a pool on each.
		"--db-max-conns", "5",
		"--limit", fmt.Sprintf("webhook:localhost:%s=%d", port, rate), "--limit", fmt.Sprintf("stripe=%d", stripeRate)}
	var schemas []string
	for _, s := range shards {
		args = append(args, "--shard-database", s.name+"="+s.url)
		schemas = append(schemas, s.name+"="+s.schema)
	}
	args = append(args, "--shard-schema", strings.Join(schemas, ","))
	start := func() *exec.Cmd {
		cmd := exec.Command(w.bin, args...)
		cmd.Stderr = os.Stderr
		require.NoError(t, cmd.Start())
		return cmd
	}
	cmds := []*exec.Cmd{start(), start()}
	t.Cleanup(func() {
		for _, cmd := range cmds {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			_ = cmd.Wait()
		}
	})
	kill := func(i int) {
		require.NoError(t, cmds[i].Process.Signal(syscall.SIGKILL))
		_ = cmds[i].Wait()
		cmds[i] = start()
		t.Logf("killed replica %d", i)
	}

	time.Sleep(3 * time.Second)
	firstKill := time.Now()
	kill(0)
	time.Sleep(2 * time.Second)
	priv.stop(t)
	down := time.Now()
	t.Log("shard ap-1's Postgres stopped")
	time.Sleep(5 * time.Second)
	kill(1)
	time.Sleep(25 * time.Second)
	up := time.Now()
	priv.start(t)
	t.Log("shard ap-1's Postgres started again")
	time.Sleep(2 * time.Second)
	kill(0)

	// Every shard drains: the one that was down once it is back.
	deadline := time.Now().Add(4 * time.Minute)
	for _, s := range shards {
		for {
			var left int
			err := s.pool.QueryRow(ctx, `SELECT count(*) FROM `+s.schema+`.side_effects WHERE state <> 'confirmed'`).Scan(&left)
			if err == nil && left == 0 {
				break
			}
			require.True(t, time.Now().Before(deadline), "shard %s: %d effects not confirmed (%v)", s.name, left, err)
			time.Sleep(200 * time.Millisecond)
		}
	}
	w.checkKeys(t)

	// The other shards kept dispatching while ap-1 was down.
	byShard := map[string]int{}
	var at []time.Time
	for _, d := range w.recv.Deliveries() {
		at = append(at, d.At)
		// A call in flight when the database stopped may still arrive
		// (its effect was fired before): the window starts 3 s later.
		if d.At.After(down.Add(3*time.Second)) && d.At.Before(up) {
			var body struct{ Order string }
			require.NoError(t, json.Unmarshal(d.Body, &body))
			name, _, _ := strings.Cut(body.Order, "-0")
			byShard[name]++
		}
	}
	t.Logf("delivered while ap-1 was down (%s): %v", up.Sub(down).Round(time.Second), byShard)
	perShard10s := map[string][]time.Time{}
	for _, d := range w.recv.Deliveries() {
		var body struct{ Order string }
		require.NoError(t, json.Unmarshal(d.Body, &body))
		name, _, _ := strings.Cut(body.Order, "-0")
		perShard10s["webhook "+name] = append(perShard10s["webhook "+name], d.At)
	}
	for _, r := range w.stripe.Requests() {
		name := strings.TrimPrefix(r.Form.Get("payment_intent"), "pi_")[:4]
		perShard10s["stripe "+name[:2]+"-"+name[2:]] = append(perShard10s["stripe "+name[:2]+"-"+name[2:]], r.At)
	}
	for _, k := range slices.Sorted(maps.Keys(perShard10s)) {
		t.Logf("%s per 10 s from the first kill: %v", k, perWindow(perShard10s[k], firstKill, 10*time.Second))
	}
	require.Positive(t, byShard["eu-1"]+byShard["us-1"], "the shards that were up kept dispatching")
	require.Zero(t, byShard["ap-1"], "nothing of ap-1 could go out while its database was down")

	// One limit per provider for the whole fleet.
	var stripeAt []time.Time
	var stripeRefused, webhookRefused int
	for _, r := range w.stripe.Requests() {
		stripeAt = append(stripeAt, r.At)
		if r.Status == 429 {
			stripeRefused++
		}
	}
	for _, d := range w.recv.Deliveries() {
		if d.Status == 429 {
			webhookRefused++
		}
	}
	for _, p := range []struct {
		name          string
		at            []time.Time
		refused, rate int
	}{{"webhook", at, webhookRefused, rate}, {"stripe", stripeAt, stripeRefused, stripeRate}} {
		most := busiest(p.at, 10*time.Second)
		t.Logf("%s: %d requests in %s, %d refused 429 (%.2f%%); at most %d in any 10 s (limit %d/s for all shards)", p.name, len(p.at),
			p.at[len(p.at)-1].Sub(p.at[0]).Round(time.Second), p.refused, 100*float64(p.refused)/float64(len(p.at)), most, p.rate)
		require.LessOrEqual(t, most, 10*p.rate*105/100, "%s: the shards together stayed within the limit", p.name)
		require.LessOrEqual(t, p.refused*100, len(p.at), "%s: at most 1%% of requests refused 429", p.name)
	}
	var attempts, effects float64
	for _, s := range shards {
		var a, n float64
		require.NoError(t, s.pool.QueryRow(ctx, `SELECT sum(total_attempts)::float8, count(*)::float8 FROM `+s.schema+`.side_effects`).Scan(&a, &n))
		attempts, effects = attempts+a, effects+n
	}
	t.Logf("requests per effect: %.3f (a SIGKILL mid-call re-sends with the same key)", attempts/effects)
}
