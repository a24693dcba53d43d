//go:build chaos

package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/fakes"
	"github.com/outboxd/outboxd/internal/testdb"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/sendgrid"
	"github.com/outboxd/outboxd/providers/sendgrid/sendgridschema"
	"github.com/outboxd/outboxd/providers/stripe"
	"github.com/outboxd/outboxd/providers/stripe/stripeschema"
	"github.com/outboxd/outboxd/providers/webhook"
)

const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// world is a Postgres cluster of its own with outboxd's schema, recording
// fake providers, and the outboxd binary.
type world struct {
	pg     *cluster // the Postgres of the world's own
	db     *testdb.DB
	url    string // pg's URL, which outboxd is given
	bin    string
	recv   *fakes.Receiver
	stripe *fakes.FakeStripe
	sg     *fakes.FakeSendGrid
	// effects by idempotency key, with the marker each request must carry
	marker map[string]string
	ids    map[string]uuid.UUID
}

// outboxdBin is the outboxd binary every test of the suite runs, built once
// by TestMain.
var outboxdBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "outboxd-chaos-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	outboxdBin = filepath.Join(dir, "outboxd")
	build := exec.Command("go", "build", "-o", outboxdBin, "github.com/outboxd/outboxd/cmd/outboxd")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	code := 1
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build outboxd:", err)
	} else {
		code = m.Run()
	}
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// newWorld is a world on a Postgres cluster of the test's own
// (cluster_test.go), migrated into schema "outboxd": the suite's tests run
// side by side, each with up to three replicas and their pools, and none
// can take another's connections, or be stopped by another's restart.
func newWorld(t *testing.T) *world {
	t.Helper()
	pg := newCluster(t)
	recv, err := fakes.NewReceiver(secret)
	require.NoError(t, err)
	t.Cleanup(recv.Close)
	w := &world{pg: pg, db: pg.migrated(t), url: pg.url(), bin: outboxdBin, recv: recv, stripe: fakes.NewFakeStripe(),
		sg: fakes.NewFakeSendGrid(), marker: map[string]string{}, ids: map[string]uuid.UUID{}}
	t.Cleanup(w.stripe.Close)
	t.Cleanup(w.sg.Close)
	// Every provider takes a little while, so kills land mid-call.
	w.recv.Delay, w.stripe.Delay, w.sg.Delay = 10*time.Millisecond, 10*time.Millisecond, 10*time.Millisecond
	return w
}

// enqueue records n orders, each with a webhook, a Stripe refund and an
// email, each carrying a marker that identifies the order. Batches
// take turns between River jobs inserted in the transaction, jobs inserted
// by the dispatcher from the intake, and events that carry their effects
// until a dispatcher writes their rows, so kills land in every path.
func (w *world) enqueue(t *testing.T, n int) {
	t.Helper()
	ctx := context.Background()
	var obs []*outbox.Outbox
	for _, jobs := range []outbox.JobInsertion{outbox.JobsInTransaction, outbox.JobsByDispatcher, outbox.EffectsByDispatcher} {
		ob, err := outbox.New(outbox.Config{Schema: w.db.Schema, Jobs: jobs, Providers: []providers.Validator{
			webhook.Schema{AllowedNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}, stripe.Schema{}, sendgrid.Schema{},
		}})
		require.NoError(t, err)
		obs = append(obs, ob)
	}
	port := w.recv.URL[strings.LastIndex(w.recv.URL, ":")+1:]
	for batch := 0; batch < n; batch += 100 {
		err := pgx.BeginFunc(ctx, w.db.Pool, func(tx pgx.Tx) error {
			for i := batch; i < min(batch+100, n); i++ {
				order := fmt.Sprintf("o%05d", i)
				res, err := obs[(batch/100)%len(obs)].Enqueue(ctx, tx, outbox.Event{ID: outbox.EventID("chaos", order), Type: "order.paid"},
					outbox.EffectOf("webhook.order_paid", webhook.Payload{URL: "http://localhost:" + port + "/hook",
						Body: json.RawMessage(`{"order": "` + order + `"}`)}),
					outbox.EffectOf("stripe.refund", stripeschema.RefundCreate{PaymentIntent: "pi_" + order}),
					outbox.EffectOf("email.receipt", sendgridschema.Payload{From: sendgridschema.Address{Email: "shop@example.com"},
						To: []sendgridschema.Address{{Email: order + "@example.com"}}, Subject: "s", Text: "t"}))
				if err != nil {
					return err
				}
				w.remember(res, order)
			}
			return nil
		})
		require.NoError(t, err)
	}
}

// remember records the effects of res as order's: every request that
// carries one of their keys must name order (checkKeys).
func (w *world) remember(res *outbox.Result, order string) {
	for _, e := range res.Effects {
		w.marker[e.Key] = order
		w.ids[e.Key] = e.ID
	}
}

// startOnly runs outboxd as a process with args alone.
func (w *world) startOnly(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(w.bin, append([]string{"run",
		"--database-url", w.url, "--schema", w.db.Schema, "--http-addr", "", "--log-level", "error"}, args...)...)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	return cmd
}

// start runs outboxd as a process with short crash-recovery settings, and
// extra flags.
func (w *world) start(t *testing.T, extra ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(w.bin, append([]string{"run",
		"--database-url", w.url, "--schema", w.db.Schema, "--http-addr", "", "--log-level", "error",
		"--webhook-secret", secret, "--webhook-allow-cidrs", "127.0.0.0/8", "--webhook-timeout", "2s",
		// A live key: Stripe's published 100 requests a second binds, as
		// in production (a test key's 25/s made the Stripe refunds a 40 s
		// tail of every drill here, all of it waiting for the limit).
		"--stripe-api-key", "sk_live_chaos", "--stripe-api-base", w.stripe.URL, "--stripe-timeout", "2s",
		"--sendgrid-api-key", "SG.chaos", "--sendgrid-api-host", w.sg.URL, "--sendgrid-timeout", "2s",
		// Under SIGKILL an email can be in doubt; this suite proves keys, so
		// emails are re-sent (at_most_once is proven in sideeffects).
		"--in-doubt-policy", "email.receipt=at_least_once",
		"--job-timeout", "5s", "--rescue-after", "8s", "--retry-base-delay", "100ms", "--retry-max-delay", "2s",
		"--concurrency", "webhook=10,stripe=10,sendgrid=10", "--shutdown-timeout", "5s"}, extra...)...)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	return cmd
}

// waitAllConfirmed waits until every effect is confirmed: every row, and
// no event still carrying effects whose rows are not written yet.
func (w *world) waitAllConfirmed(t *testing.T, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		var left, carried int
		require.NoError(t, w.db.Pool.QueryRow(context.Background(),
			`SELECT (SELECT count(*) FROM `+w.db.Schema+`.side_effects WHERE state <> 'confirmed'),
				(SELECT count(*) FROM `+w.db.Schema+`.outbox_events WHERE effects IS NOT NULL)`).Scan(&left, &carried))
		if left == 0 && carried == 0 {
			return
		}
		require.True(t, time.Now().Before(deadline), "%d effects not confirmed and %d events still carrying effects after %s", left, carried, within)
		time.Sleep(200 * time.Millisecond)
	}
}

// checkKeys asserts what the providers saw: every request carried the key
// of the effect whose content it had, every effect was sent, and it reports
// how often keys were repeated (in-doubt re-fires).
func (w *world) checkKeys(t *testing.T) {
	t.Helper()
	type seen struct{ key, marker string }
	var reqs []seen
	for _, d := range w.recv.Deliveries() {
		var body struct{ Order string }
		require.NoError(t, json.Unmarshal(d.Body, &body))
		reqs = append(reqs, seen{d.ID, body.Order})
	}
	for _, r := range w.stripe.Requests() {
		reqs = append(reqs, seen{r.IdempotencyKey, strings.TrimPrefix(r.Form.Get("payment_intent"), "pi_")})
	}
	for _, r := range w.sg.Requests() {
		to := r.Body["personalizations"].([]any)[0].(map[string]any)["to"].([]any)[0].(map[string]any)["email"].(string)
		reqs = append(reqs, seen{r.Key, strings.TrimSuffix(to, "@example.com")})
	}
	perKey := map[string]int{}
	for _, r := range reqs {
		want, ok := w.marker[r.key]
		require.True(t, ok, "a request carried key %s, which is no effect's", r.key)
		require.Equal(t, want, r.marker, "a request for %s carried the key of %s", r.marker, want)
		perKey[r.key]++
	}
	repeated, extra := 0, 0
	for key := range w.marker {
		require.Positive(t, perKey[key], "effect %s was never sent", w.ids[key])
		if perKey[key] > 1 {
			repeated++
			extra += perKey[key] - 1
		}
	}
	t.Logf("%d requests for %d effects; %d effects sent more than once (%d repeats), always with their own key",
		len(reqs), len(w.marker), repeated, extra)
}

func TestChaosSIGKILL(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.enqueue(t, 1000)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	cmd := w.start(t)
	const kills = 10
	for i := range kills {
		time.Sleep(time.Duration(300+rng.IntN(1200)) * time.Millisecond)
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		_ = cmd.Wait()
		t.Logf("kill %d/%d", i+1, kills)
		cmd = w.start(t)
	}
	t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() })
	// Jobs orphaned by the last kill are rescued after --rescue-after plus
	// River's 30s rescuer interval.
	w.waitAllConfirmed(t, 3*time.Minute)
	w.checkKeys(t)
}

// TestChaosPostgresRestart restarts the Postgres outboxd works in, in the
// middle of dispatch (the world's own cluster: the tests beside it are on
// theirs).
func TestChaosPostgresRestart(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.enqueue(t, 500)
	cmd := w.start(t)
	t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() })
	time.Sleep(time.Second)
	w.pg.restart(t)
	t.Log("Postgres restarted")
	w.waitAllConfirmed(t, 3*time.Minute)
	w.checkKeys(t)
	require.NoError(t, cmd.Process.Signal(syscall.Signal(0)), "outboxd survived the restart and reconnected by itself")
}

// enqueueChains records keys chains of perKey webhook effects, each chain
// on its own ordering key, in transactions that each add one effect to
// every chain (so every transaction holds many keys, and each key is
// written by many transactions).
func (w *world) enqueueChains(t *testing.T, keys, perKey int) {
	t.Helper()
	ctx := context.Background()
	ob, err := outbox.New(outbox.Config{Schema: w.db.Schema, Jobs: outbox.JobsByDispatcher, Providers: []providers.Validator{
		webhook.Schema{AllowedNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}},
	}})
	require.NoError(t, err)
	port := w.recv.URL[strings.LastIndex(w.recv.URL, ":")+1:]
	for n := range perKey {
		require.NoError(t, pgx.BeginFunc(ctx, w.db.Pool, func(tx pgx.Tx) error {
			for k := range keys {
				step := fmt.Sprintf("chain%03d-%02d", k, n)
				e := outbox.EffectOf("webhook.step", webhook.Payload{URL: "http://localhost:" + port + "/chain",
					Body: json.RawMessage(`{"order": "` + step + `"}`)})
				e.OrderingKey = fmt.Sprintf("chain%03d", k)
				res, err := ob.Enqueue(ctx, tx, outbox.Event{ID: outbox.EventID("chaos-chain", step), Type: "chain.step"}, e)
				if err != nil {
					return err
				}
				w.remember(res, step)
			}
			return nil
		}))
	}
}

// checkOrder asserts that, for every chain, the receiver saw its steps in
// commit order: a step is never requested after a later step of its key
// was (a re-fire after a kill repeats a step before the next one starts).
func (w *world) checkOrder(t *testing.T) {
	t.Helper()
	last := map[string]string{}
	for _, d := range w.recv.Deliveries() {
		if d.Path != "/chain" {
			continue
		}
		var body struct{ Order string }
		require.NoError(t, json.Unmarshal(d.Body, &body))
		key := body.Order[:len("chain000")]
		require.GreaterOrEqual(t, body.Order, last[key], "chain %s: %s requested after %s", key, body.Order, last[key])
		last[key] = body.Order
	}
}

// killReplicas runs three outboxd replicas (with extra flags) and
// SIGKILLs one at random kills times, every wait to wait+spread, starting
// it again each time; the replicas left running are stopped when the test
// ends. seed varies the choices between tests.
func (w *world) killReplicas(t *testing.T, seed uint64, kills int, wait, spread time.Duration, extra ...string) {
	t.Helper()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), seed))
	var cmds [3]*exec.Cmd
	for i := range cmds {
		cmds[i] = w.start(t, extra...)
	}
	t.Cleanup(func() {
		for _, cmd := range cmds {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			_ = cmd.Wait()
		}
	})
	for i := range kills {
		time.Sleep(wait + time.Duration(rng.Int64N(int64(spread))))
		victim := rng.IntN(len(cmds))
		require.NoError(t, cmds[victim].Process.Signal(syscall.SIGKILL))
		_ = cmds[victim].Wait()
		t.Logf("kill %d/%d (replica %d)", i+1, kills, victim)
		cmds[victim] = w.start(t, extra...)
	}
}

// TestChaosOrdering: three outboxd replicas, SIGKILLed one at a time
// while they dispatch chains of ordered effects; every chain reaches the
// receiver in order, every effect is confirmed, each with its own key.
func TestChaosOrdering(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.enqueueChains(t, 100, 8)
	w.killReplicas(t, 2, 10, 200*time.Millisecond, 600*time.Millisecond)
	w.waitAllConfirmed(t, 4*time.Minute)
	w.checkKeys(t)
	w.checkOrder(t)
}

// TestChaosLimitHolds: three outboxd replicas drain a webhook backlog
// against a limit of 50 requests a second shared by all of them, while
// they are SIGKILLed one at a time; the receiver never gets more than the
// limit over any 10 s window (plus the bucket a killed replica may have
// taken with it, which slows the key rather than speeding it), and every
// effect is confirmed, each request with its own effect's key.
func TestChaosLimitHolds(t *testing.T) {
	t.Parallel()
	const rate, n = 50, 1500
	w := newWorld(t)
	ctx := context.Background()
	ob, err := outbox.New(outbox.Config{Jobs: outbox.JobsInTransaction, Schema: w.db.Schema, Providers: []providers.Validator{
		webhook.Schema{AllowedNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}},
	}})
	require.NoError(t, err)
	port := w.recv.URL[strings.LastIndex(w.recv.URL, ":")+1:]
	require.NoError(t, pgx.BeginFunc(ctx, w.db.Pool, func(tx pgx.Tx) error {
		for i := range n {
			order := fmt.Sprintf("l%05d", i)
			res, err := ob.Enqueue(ctx, tx, outbox.Event{ID: outbox.EventID("chaos-limit", order), Type: "order.paid"},
				outbox.EffectOf("webhook.order_paid", webhook.Payload{URL: "http://localhost:" + port + "/hook",
					Body: json.RawMessage(`{"order": "` + order + `"}`)}))
			if err != nil {
				return err
			}
			w.remember(res, order)
		}
		return nil
	}))
	limit := fmt.Sprintf("webhook:localhost:%s=%d", port, rate)
	w.killReplicas(t, 3, 10, 500*time.Millisecond, time.Second, "--limit", limit, "--concurrency", "webhook=100")
	w.waitAllConfirmed(t, 4*time.Minute)
	w.checkKeys(t)
	var at []time.Time
	for _, d := range w.recv.Deliveries() {
		at = append(at, d.At)
	}
	most := busiest(at, 10*time.Second)
	t.Logf("%d requests in %s; at most %d in any 10 s (limit %d)", len(at), at[len(at)-1].Sub(at[0]).Round(time.Second), most, 10*rate)
	t.Logf("requests in each second: %v", perWindow(at, at[0], time.Second))
	// The bucket holds a tenth of a second, and each replica may spend
	// the block it leased a little later (its requests' own latency): the
	// limit, within 5%, over any 10 s window.
	require.LessOrEqual(t, most, 10*rate*105/100, "the replicas together stayed within the limit")
}

// busiest sorts at and returns the most of its times within any window.
func busiest(at []time.Time, window time.Duration) int {
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	most, j := 0, 0
	for i := range at {
		for at[i].Sub(at[j]) >= window {
			j++
		}
		most = max(most, i-j+1)
	}
	return most
}
