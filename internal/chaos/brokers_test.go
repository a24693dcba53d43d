//go:build chaos

package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/inbox"
	"github.com/outboxd/outboxd/internal/testbrokers"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/kafka/kafkaschema"
	"github.com/outboxd/outboxd/providers/nats/natsschema"
	"github.com/outboxd/outboxd/providers/webhook"
)

// TestChaosBrokers SIGKILLs outboxd again and again while it relays 1,000
// events to NATS JetStream and to Kafka (both real servers, in this
// process): every event reaches both; JetStream holds each exactly once
// (a re-publish after a kill carries the same Nats-Msg-Id and is dropped
// by the server); Kafka, which cannot deduplicate across producer
// sessions, may hold copies, and a consumer applying each record with the
// inbox package applies every event exactly once.
func TestChaosBrokers(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := context.Background()

	broker, err := testbrokers.StartJetStream(ctx, time.Hour)
	require.NoError(t, err)
	t.Cleanup(broker.Close)
	stream := broker.Stream
	cluster, brokers, err := testbrokers.StartKafka(3)
	require.NoError(t, err)
	t.Cleanup(cluster.Close)

	const n = 1000
	ob, err := outbox.New(outbox.Config{Jobs: outbox.JobsInTransaction, Schema: w.db.Schema})
	require.NoError(t, err)
	for batch := 0; batch < n; batch += 100 {
		err := pgx.BeginFunc(ctx, w.db.Pool, func(tx pgx.Tx) error {
			for i := batch; i < batch+100; i++ {
				order := fmt.Sprintf("o%05d", i)
				res, err := ob.Enqueue(ctx, tx, outbox.Event{ID: outbox.EventID("chaos-brokers", order), Type: "order.paid",
					AggregateType: "order", AggregateID: order, Payload: []byte(`{"order": "` + order + `"}`)},
					outbox.EffectOf("nats.order_paid", natsschema.Publish{Subject: "orders.paid"}),
					outbox.EffectOf("kafka.order_paid", kafkaschema.Record{Topic: "orders"}))
				if err != nil {
					return err
				}
				w.remember(res, order)
			}
			return nil
		})
		require.NoError(t, err)
	}

	start := func() func() {
		cmd := w.startOnly(t, "--nats-url", broker.URL, "--nats-streams", "ORDERS", "--kafka-brokers", strings.Join(brokers, ","),
			"--job-timeout", "5s", "--rescue-after", "8s", "--retry-base-delay", "100ms", "--retry-max-delay", "2s",
			"--nats-timeout", "2s", "--kafka-timeout", "2s", "--concurrency", "nats=10,kafka=10", "--shutdown-timeout", "5s")
		return func() { _ = cmd.Process.Signal(syscall.SIGKILL); _ = cmd.Wait() }
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 2))
	kill := start()
	const kills = 10
	for i := range kills {
		time.Sleep(time.Duration(200+rng.IntN(600)) * time.Millisecond)
		kill()
		t.Logf("kill %d/%d", i+1, kills)
		kill = start()
	}
	t.Cleanup(kill)
	w.waitAllConfirmed(t, 3*time.Minute)

	// JetStream: every event once, under its own effect's key.
	info, err := stream.Info(ctx)
	require.NoError(t, err)
	require.EqualValues(t, n, info.State.Msgs, "JetStream dropped every re-publish by its Nats-Msg-Id")
	seen := map[string]bool{}
	for seq := uint64(1); seq <= info.State.LastSeq; seq++ {
		msg, err := stream.GetMsg(ctx, seq)
		require.NoError(t, err)
		key := msg.Header.Get(natsschema.HeaderMsgID)
		order, ok := w.marker[key]
		require.True(t, ok, "message %d carries key %s, which is no effect's", seq, key)
		require.JSONEq(t, `{"order": "`+order+`"}`, string(msg.Data), "message %d carries another effect's key", seq)
		seen[key] = true
	}
	require.Len(t, seen, n)

	// Kafka: every event at least once; the inbox applies each once.
	consumer, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics("orders"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer consumer.Close()
	ib, err := inbox.New(w.db.Pool, inbox.Config{Schema: w.db.Schema})
	require.NoError(t, err)
	var records, applied int
	pollCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for applied < n {
		fs := consumer.PollFetches(pollCtx)
		require.NoError(t, pollCtx.Err(), "%d of %d events applied from %d records", applied, n, records)
		for _, r := range fs.Records() {
			records++
			var key string
			for _, h := range r.Headers {
				if h.Key == kafkaschema.HeaderKey {
					key = string(h.Value)
				}
			}
			order, ok := w.marker[key]
			require.True(t, ok, "a record carries key %q, which is no effect's", key)
			require.Equal(t, order, string(r.Key), "the record key is the event's aggregate id")
			require.JSONEq(t, `{"order": "`+order+`"}`, string(r.Value))
			err := pgx.BeginFunc(ctx, w.db.Pool, func(tx pgx.Tx) error {
				isNew, err := ib.Claim(ctx, tx, "kafka:orders", key)
				if isNew {
					applied++
				}
				return err
			})
			require.NoError(t, err)
		}
	}
	var replayed, fires int
	require.NoError(t, w.db.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE replayed), coalesce(sum(total_attempts), 0) FROM `+w.db.Schema+`.side_effects WHERE provider = 'nats'`).Scan(&replayed, &fires))
	t.Logf("JetStream: %d messages for %d events from %d publishes, %d answered as duplicates; Kafka: %d records for %d events, %d copies skipped by the inbox",
		info.State.Msgs, n, fires, replayed, records, applied, records-applied)
}

// TestChaosNATSOutage stops nats-server for 20 s in the middle of a relay
// of 3,000 events, with outboxd's default retry settings, and starts it
// again (see outage); JetStream holds each event once.
func TestChaosNATSOutage(t *testing.T) { natsOutage(t, false) }

// TestChaosNATSOutageWithKills does the same with outboxd SIGKILLed a
// second before the broker goes down and a second after it is back.
func TestChaosNATSOutageWithKills(t *testing.T) { natsOutage(t, true) }

// apartFromNATS keeps TestChaosWebhookThrottled from running beside the
// NATS outages (which share it for reading, so run beside each other):
// beside it their relays failed their bound, with dispatch batches held
// running for 35 s and their effects pending after the broker was back
// (seen three times, the last with every test on a Postgres of its own,
// so not through the database). The suspect, every publish reading the
// streams again while the reads failed, is mended in providers/nats (one
// read at a time); they stay apart until that has held over more runs.
var apartFromNATS sync.RWMutex

func natsOutage(t *testing.T, kills bool) {
	t.Parallel()
	apartFromNATS.RLock()
	defer apartFromNATS.RUnlock()
	w := newWorld(t)
	ctx := context.Background()
	// A duplicate window that covers outboxd's default retry schedule.
	broker, err := testbrokers.StartJetStream(ctx, 6*time.Hour)
	require.NoError(t, err)
	t.Cleanup(broker.Close)
	n := outage(t, w, "nats", outbox.EffectOf("nats.order_paid", natsschema.Publish{Subject: "orders.paid"}),
		[]string{"--nats-url", broker.URL, "--nats-streams", testbrokers.Stream, "--nats-timeout", "2s"},
		20*time.Second, broker.Down, func() { require.NoError(t, broker.Up()) }, kills)
	info, err := broker.Stream.Info(ctx)
	require.NoError(t, err)
	require.EqualValues(t, n, info.State.Msgs, "each event is in the stream once")
}

// TestChaosKafkaOutage does the same to a Kafka broker that restarts on
// the same port with the state it kept.
func TestChaosKafkaOutage(t *testing.T) { kafkaOutage(t, false) }

// TestChaosKafkaOutageWithKills: the same, outboxd SIGKILLed around it.
func TestChaosKafkaOutageWithKills(t *testing.T) { kafkaOutage(t, true) }

func kafkaOutage(t *testing.T, kills bool) {
	t.Parallel()
	w := newWorld(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	// The broker keeps its state on disk and comes back with it (its
	// topic's id, its offsets), as a Kafka broker that restarts does.
	dir := t.TempDir()
	startCluster := func() *kfake.Cluster {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port), kfake.SeedTopics(3, "orders"), kfake.DataDir(dir))
		require.NoError(t, err)
		return c
	}
	cluster := startCluster()
	t.Cleanup(func() { cluster.Close() })
	outage(t, w, "kafka", outbox.EffectOf("kafka.order_paid", kafkaschema.Record{Topic: "orders"}),
		[]string{"--kafka-brokers", cluster.ListenAddrs()[0], "--kafka-timeout", "2s"},
		20*time.Second, cluster.Close, func() { cluster = startCluster() }, kills)
}

// TestChaosWebhookThrottled: a receiver that answers every request 429
// with Retry-After: 1 for 30 s in the middle of a relay of 3,000 webhooks
// (see outage): its 429s are not attempts, and what waited goes out as
// soon as it accepts again, at the rate it took before. It never runs
// beside the NATS outages (apartFromNATS).
func TestChaosWebhookThrottled(t *testing.T) {
	t.Parallel()
	apartFromNATS.Lock()
	defer apartFromNATS.Unlock()
	w := newWorld(t)
	port := w.recv.URL[strings.LastIndex(w.recv.URL, ":")+1:]
	outage(t, w, "webhook", outbox.EffectOf("webhook.order_paid", webhook.Payload{URL: "http://localhost:" + port + "/hook",
		Body: json.RawMessage(`{"order": "paid"}`)}),
		[]string{"--webhook-secret", secret, "--webhook-allow-cidrs", "127.0.0.0/8", "--webhook-timeout", "2s"},
		30*time.Second, func() { w.recv.Throttle("1") }, w.recv.Unthrottle, false,
		webhook.Schema{AllowedNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	var throttled int
	for _, d := range w.recv.Deliveries() {
		if d.Status == 429 {
			throttled++
		}
	}
	t.Logf("%d requests answered 429 over the 30 s", throttled)
}

// outage relays 3,000 events, each with effect, through an outboxd run
// with flags and the provider's concurrency at 10, and, once a third are
// confirmed, takes the broker down for downFor and brings it back
// (validators, when given, check the effects as the application would): every
// effect is confirmed within the time the backlog needs at the rate seen
// before the outage plus 10 s, no attempt is made while the broker is down
// (a refused connection waits, it is not an attempt), and only the calls in
// flight when it went down may be in doubt. With kills, outboxd is
// SIGKILLed and started again a second before the broker goes down and a
// second after it is back (with --rescue-after 4s, what the killed
// process was working is handed back within 5 s and retried a second
// later, inside the bound). It returns how many events it relayed.
func outage(t *testing.T, w *world, provider string, effect outbox.Effect, flags []string, downFor time.Duration, down, up func(),
	kills bool, validators ...providers.Validator) int {
	ctx := context.Background()
	const n, concurrency = 3000, 10
	ob, err := outbox.New(outbox.Config{Schema: w.db.Schema, Providers: validators})
	require.NoError(t, err)
	for batch := 0; batch < n; batch += 500 {
		require.NoError(t, pgx.BeginFunc(ctx, w.db.Pool, func(tx pgx.Tx) error {
			for i := batch; i < batch+500; i++ {
				order := fmt.Sprintf("o%05d", i)
				if _, err := ob.Enqueue(ctx, tx, outbox.Event{ID: outbox.EventID("chaos-outage", order), Type: "order.paid",
					AggregateType: "order", AggregateID: order, Payload: []byte(`{"order": "` + order + `"}`)}, effect); err != nil {
					return err
				}
			}
			return nil
		}))
	}
	confirmed := func() int {
		var c int
		require.NoError(t, w.db.Pool.QueryRow(ctx, `SELECT count(*) FROM `+w.db.Schema+`.side_effects WHERE state = 'confirmed'`).Scan(&c))
		return c
	}
	start := time.Now()
	args := append(flags, "--concurrency", fmt.Sprintf("%s=%d", provider, concurrency), "--shutdown-timeout", "5s")
	if kills {
		args = append(args, "--job-timeout", "3s", "--rescue-after", "4s")
	}
	cmd := w.startOnly(t, args...)
	t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGKILL); _ = cmd.Wait() })
	kill := func() {
		if !kills {
			return
		}
		time.Sleep(time.Second)
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		_ = cmd.Wait()
		cmd = w.startOnly(t, args...)
		t.Log("outboxd SIGKILLed and started again")
	}
	for confirmed() < n/3 {
		require.True(t, time.Since(start) < 2*time.Minute, "only %d of %d sent in 2 minutes", confirmed(), n)
		time.Sleep(10 * time.Millisecond)
	}
	before := confirmed()
	rate := float64(before) / time.Since(start).Seconds()
	kill()
	down()
	wentDown := time.Now()
	time.Sleep(downFor)
	up()
	cameUp := time.Now()
	t.Logf("down at %d of %d sent (%.0f/s before); up after %s", before, n, rate, cameUp.Sub(wentDown).Round(time.Second))
	kill()

	left := n - confirmed()
	within := time.Duration(float64(left)/rate*float64(time.Second)) + 10*time.Second
	first := false
	for confirmed() < n {
		if !first && confirmed() > n-left {
			first = true
			t.Logf("first sent %s after the provider came back", time.Since(cameUp).Round(100*time.Millisecond))
		}
		if time.Since(cameUp) > within {
			logWaiting(t, w)
		}
		require.True(t, time.Since(cameUp) < within, "%d of %d effects not sent %s after the provider came back (backlog %d at %.0f/s)",
			n-confirmed(), n, within, left, rate)
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("all %d sent %s after the provider came back (allowed %s)", n, time.Since(cameUp).Round(100*time.Millisecond), within.Round(time.Second))
	var during, inDoubt int
	require.NoError(t, w.db.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE started_at > $1 AND started_at < $2 AND outcome <> 'throttled'),
		count(*) FILTER (WHERE outcome = 'in_doubt') FROM `+w.db.Schema+`.side_effect_attempts`,
		wentDown.Add(3*time.Second), cameUp).Scan(&during, &inDoubt))
	require.Zero(t, during, "attempts made while the broker was down")
	require.LessOrEqual(t, inDoubt, concurrency, "only calls in flight when the broker went down can be in doubt")
	t.Logf("%d attempts recorded in doubt", inDoubt)
	return n
}

// logWaiting logs what the effects not yet confirmed wait for: their
// state, limit key and River job, grouped.
func logWaiting(t *testing.T, w *world) {
	rows, err := w.db.Pool.Query(context.Background(), `SELECT e.state, coalesce(e.waiting_for, ''), e.in_doubt,
		coalesce(j.state::text, 'no job'), count(*),
		coalesce(extract(epoch FROM min(j.scheduled_at) - now())::int, 0), coalesce(extract(epoch FROM max(j.scheduled_at) - now())::int, 0),
		min(left(coalesce(e.last_error, ''), 120))
		FROM `+w.db.Schema+`.side_effects e
		LEFT JOIN `+w.db.Schema+`.river_job j ON j.state NOT IN ('completed', 'cancelled', 'discarded')
			AND (j.args->>'effect_id' = e.id::text OR j.args->'effect_ids' ? e.id::text)
		WHERE e.state <> 'confirmed' GROUP BY 1, 2, 3, 4 ORDER BY 5 DESC`)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var state, waiting, job, lastErr string
		var inDoubt bool
		var count, minIn, maxIn int
		require.NoError(t, rows.Scan(&state, &waiting, &inDoubt, &job, &count, &minIn, &maxIn, &lastErr))
		t.Logf("%d %s (waiting for %q, in doubt %v), job %s due in %d..%ds: %s", count, state, waiting, inDoubt, job, minIn, maxIn, lastErr)
	}
	var limits string
	require.NoError(t, w.db.Pool.QueryRow(context.Background(), `SELECT coalesce(jsonb_agg(to_jsonb(l))::text, '') FROM `+w.db.Schema+`.outboxd_limits l`).Scan(&limits))
	t.Logf("limits: %s", limits)
}
