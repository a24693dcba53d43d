//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/inbox"
	"github.com/outboxd/outboxd/internal/testbrokers"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/providers/kafka/kafkaschema"
	"github.com/outboxd/outboxd/providers/nats/natsschema"
)

// TestChaosBrokers SIGKILLs outboxd again and again while it relays 1,000
// events to NATS JetStream and to Kafka (both real servers, in this
// process): every event reaches both; JetStream holds each exactly once
// (a re-publish after a kill carries the same Nats-Msg-Id and is dropped
// by the server); Kafka, which cannot deduplicate across producer
// sessions, may hold copies, and a consumer applying each record with the
// inbox package applies every event exactly once.
func TestChaosBrokers(t *testing.T) {
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
				for _, e := range res.Effects {
					w.marker[e.Key] = order
					w.ids[e.Key] = e.ID
				}
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
