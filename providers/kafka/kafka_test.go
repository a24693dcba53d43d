package kafka_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/internal/testbrokers"
	"github.com/outboxd/outboxd/internal/testdb"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/kafka"
	"github.com/outboxd/outboxd/providers/kafka/kafkaschema"
	"github.com/outboxd/outboxd/sideeffects"
)

// startKafka runs an in-process Kafka cluster (franz-go's kfake) with
// topic orders in three partitions.
func startKafka(t *testing.T) []string {
	t.Helper()
	c, brokers, err := testbrokers.StartKafka(3)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return brokers
}

func newProvider(t *testing.T, brokers []string, opts ...kgo.Opt) *kafka.Provider {
	t.Helper()
	p, err := kafka.New(context.Background(), kafka.Config{Brokers: brokers, Timeout: 5 * time.Second, Options: opts})
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

func request(key, payload string) providers.Request {
	return providers.Request{
		EffectID: "0190c3a0-7b1e-8c3d-9f00-0000000000e1", Kind: "kafka.order_paid", Key: key, Attempt: 1,
		Payload: json.RawMessage(payload), EventID: "0190c3a0-7b1e-7c3d-9f00-000000000001",
		Event: &providers.SourceEvent{ID: "0190c3a0-7b1e-7c3d-9f00-000000000001", Type: "order.paid", AggregateType: "order", AggregateID: "o_42", Payload: json.RawMessage(`{"order":"o_42","amount":500}`)},
	}
}

// consume reads every record of topic from the start.
func consume(t *testing.T, brokers []string, topic string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "only %d of %d records arrived", len(out), n)
		out = append(out, fs.Records()...)
	}
	return out
}

func header(r *kgo.Record, k string) string {
	for _, h := range r.Headers {
		if h.Key == k {
			return string(h.Value)
		}
	}
	return ""
}

func TestARecordCarriesItsKeyEventAndAggregate(t *testing.T) {
	t.Parallel()
	brokers := startKafka(t)
	p := newProvider(t, brokers)
	require.Zero(t, p.Guarantees().KeyWindow, "Kafka does not deduplicate across producer sessions")
	require.Equal(t, providers.AtLeastOnce, p.Guarantees().InDoubt)

	key := strings.Repeat("ab", 32)
	res, err := p.Send(context.Background(), request(key, `{"topic":"orders","headers":{"tenant":"acme"}}`))
	require.NoError(t, err)
	require.Regexp(t, `^orders/[0-2]/0$`, res.Ref)
	// The same effect again (an attempt in doubt): a second record with
	// the same key header, in the same partition.
	again, err := p.Send(context.Background(), request(key, `{"topic":"orders","headers":{"tenant":"acme"}}`))
	require.NoError(t, err)
	require.Equal(t, strings.TrimSuffix(res.Ref, "/0")+"/1", again.Ref, "one aggregate, one partition")
	_, err = p.Send(context.Background(), request(strings.Repeat("cd", 32), `{"topic":"orders","key":"k_1","value":[1,2]}`))
	require.NoError(t, err)

	recs := consume(t, brokers, "orders", 3)
	byKey := map[string][]*kgo.Record{}
	for _, r := range recs {
		byKey[string(r.Key)] = append(byKey[string(r.Key)], r)
	}
	require.Len(t, byKey["o_42"], 2, "the aggregate id is the default record key")
	for _, r := range byKey["o_42"] {
		require.JSONEq(t, `{"order":"o_42","amount":500}`, string(r.Value), "the event's payload is the default value")
		require.Equal(t, key, header(r, kafkaschema.HeaderKey))
		require.Equal(t, "0190c3a0-7b1e-7c3d-9f00-000000000001", header(r, kafkaschema.HeaderEventID))
		require.Equal(t, "order.paid", header(r, kafkaschema.HeaderEventType))
		require.Equal(t, "o_42", header(r, kafkaschema.HeaderAggregateID))
		require.Equal(t, "kafka.order_paid", header(r, kafkaschema.HeaderKind))
		require.Equal(t, "acme", header(r, "tenant"))
	}
	require.Len(t, byKey["k_1"], 1)
	require.JSONEq(t, `[1,2]`, string(byKey["k_1"][0].Value))
}

func TestAMissingTopicIsRetriedAndATooLargeRecordRefused(t *testing.T) {
	t.Parallel()
	brokers := startKafka(t)
	p := newProvider(t, brokers, kgo.ProducerBatchMaxBytes(2000), kgo.UnknownTopicRetries(1))

	_, err := p.Send(context.Background(), request(strings.Repeat("ab", 32), `{"topic":"invoices"}`))
	class, _ := providers.Classify(err)
	require.Equal(t, providers.ClassRetryable, class, "nothing was written: %v", err)
	require.ErrorContains(t, err, "no such topic")

	big := `{"topic":"orders","value":"` + strings.Repeat("x", 5000) + `"}`
	_, err = p.Send(context.Background(), request(strings.Repeat("cd", 32), big))
	require.True(t, providers.IsRefused(err), "over the size limit: %v", err)
	prof := kafka.Schema{}.Profile()
	require.True(t, prof.RefusedWithoutActing(err.Error()), "an operator's edit may follow a refusal: %v", err)
}

func TestNewNamesWhatIsMissing(t *testing.T) {
	t.Parallel()
	_, err := kafka.New(context.Background(), kafka.Config{})
	require.ErrorContains(t, err, "brokers are required")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err = kafka.New(ctx, kafka.Config{Brokers: []string{"127.0.0.1:1"}})
	require.ErrorContains(t, err, "reach the brokers 127.0.0.1:1")
}

func TestThePayloadNamesTheFieldAtFault(t *testing.T) {
	t.Parallel()
	for payload, want := range map[string]string{
		`{}`:                       "payload.topic: required",
		`{"topic":"a b"}`:          "letters, digits",
		`{"topic":".."}`:           "not a topic name",
		`{"topic":"orders","x":1}`: "unknown field",
		`{"topic":"o","headers":{"Outboxd-Kind":"k"}}`: "payload.headers.Outboxd-Kind",
	} {
		err := kafkaschema.Schema{}.ValidatePayload("kafka.x", json.RawMessage(payload))
		require.ErrorContains(t, err, want, payload)
	}
	require.NoError(t, kafkaschema.Schema{}.ValidatePayload("kafka.x", json.RawMessage(`{"topic":"orders","key":"k","value":{"a":1}}`)))
}

// TestAnAggregatesEventsReachItsPartitionInCommitOrder: events of one
// aggregate, enqueued in one order with the aggregate as ordering key and
// dispatched by many workers at once, are produced one after the other:
// a consumer of the partition reads them in the order they committed.
// (Without the ordering key, concurrent workers produce them out of
// order.)
func TestAnAggregatesEventsReachItsPartitionInCommitOrder(t *testing.T) {
	t.Parallel()
	brokers := startKafka(t)
	db := testdb.New(t)
	ctx := context.Background()
	ob, err := outbox.New(outbox.Config{Jobs: outbox.JobsInTransaction, Schema: db.Schema})
	require.NoError(t, err)
	const n = 30
	for i := range n {
		err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			_, err := ob.Enqueue(ctx, tx, outbox.Event{ID: outbox.EventID("order-steps", "o_42", strconv.Itoa(i)), Type: "order.step",
				AggregateType: "order", AggregateID: "o_42", OrderingKey: "order:o_42", Payload: []byte(fmt.Sprintf(`{"step": %d}`, i))},
				outbox.EffectOf("kafka.order_step", kafkaschema.Record{Topic: "orders"}))
			return err
		})
		require.NoError(t, err)
	}
	p := newProvider(t, brokers)
	d, err := sideeffects.NewDispatcher(db.Pool, sideeffects.Config{Schema: db.Schema, Providers: []providers.Provider{p}, Concurrency: map[string]int{kafka.Name: 20}})
	require.NoError(t, err)
	require.NoError(t, d.Start(ctx))
	defer d.Stop(ctx)

	recs := consume(t, brokers, "orders", n)
	require.Len(t, recs, n, "no copies without a crash")
	for i, r := range recs {
		require.Equal(t, "o_42", string(r.Key))
		require.Equal(t, recs[0].Partition, r.Partition, "one aggregate, one partition")
		require.JSONEq(t, fmt.Sprintf(`{"step": %d}`, i), string(r.Value), "record %d is out of commit order", i)
	}
}

// TestAClusterOutageSpendsNoAttempts: while no Kafka broker can be
// reached, nothing is produced (a produce would wait out its timeout, its
// outcome unknown): the cluster's limit key waits, as after a 429, and
// when the cluster is back the effect is produced once, its first attempt
// counted alone.
func TestAClusterOutageSpendsNoAttempts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	start := func() *kfake.Cluster {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port), kfake.SeedTopics(1, "orders"))
		require.NoError(t, err)
		return c
	}
	cluster := start()
	brokers := cluster.ListenAddrs()
	// A short timeout: a produce made before the client notices the
	// cluster is gone waits for no answer that long.
	p, err := kafka.New(ctx, kafka.Config{Brokers: brokers, Timeout: time.Second})
	require.NoError(t, err)
	t.Cleanup(p.Close)
	require.Equal(t, "kafka:"+brokers[0], p.Limit(nil).Key)

	cluster.Close()
	require.Eventually(t, func() bool {
		_, err := p.Send(ctx, request(strings.Repeat("ab", 32), `{"topic":"orders"}`))
		return providers.IsUnreachable(err)
	}, 20*time.Second, 10*time.Millisecond, "with no broker to reach, nothing is produced and it says the cluster is out of reach")

	db := testdb.New(t)
	ob, err := outbox.New(outbox.Config{Jobs: outbox.JobsInTransaction, Schema: db.Schema})
	require.NoError(t, err)
	var res *outbox.Result
	err = pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		res, err = ob.Enqueue(ctx, tx, outbox.Event{ID: outbox.EventID("outage", "o_1"), Type: "order.paid", AggregateID: "o_1", Payload: []byte(`{"order": "o_1"}`)},
			outbox.EffectOf("kafka.order_paid", kafkaschema.Record{Topic: "orders"}))
		return err
	})
	require.NoError(t, err)
	id := res.Effects[0].ID
	d, err := sideeffects.NewDispatcher(db.Pool, sideeffects.Config{Schema: db.Schema, Providers: []providers.Provider{p},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	require.NoError(t, d.Start(ctx))
	defer d.Stop(ctx)
	op, err := sideeffects.NewOperator(db.Pool, sideeffects.OperatorConfig{Schema: db.Schema})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		e, err := op.Get(ctx, id)
		return err == nil && e.WaitingFor != nil && *e.WaitingFor == p.Limit(nil).Key
	}, 20*time.Second, 20*time.Millisecond, "the effect waits for the cluster's key")

	restarted := time.Now()
	cluster = start()
	defer cluster.Close()
	require.Eventually(t, func() bool {
		e, err := op.Get(ctx, id)
		return err == nil && e.State == sideeffects.StateConfirmed
	}, 30*time.Second, 20*time.Millisecond, "produced once the cluster is back")
	e, err := op.Get(ctx, id)
	require.NoError(t, err)
	require.NotNil(t, e.ProviderRef)
	require.True(t, strings.HasPrefix(*e.ProviderRef, "orders/0/"), *e.ProviderRef)
	// No attempt while the cluster was down: the attempts counted are
	// those after it came back (one, unless the first produce of the
	// reconnecting client outlasted its timeout on a loaded machine).
	var during int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM `+db.Schema+`.side_effect_attempts
		WHERE effect_id = $1 AND started_at < $2 AND outcome <> 'throttled'`, id, restarted).Scan(&during))
	require.Zero(t, during, "the outage spent no attempt")
}

// TestAProduceWithNoBrokerToDialIsNotInDoubt: a produce that begins with
// no connection open, before the client has failed to dial (so without the
// ping that guards a cluster known to be down), and opens none, wrote
// nothing anywhere: it is out of reach (the key waits, no attempt spent),
// not in doubt.
func TestAProduceWithNoBrokerToDialIsNotInDoubt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cluster, brokers, err := testbrokers.StartKafka(1)
	require.NoError(t, err)
	// Idle connections are closed after a second, so that the client
	// holds none when the cluster goes away.
	p, err := kafka.New(ctx, kafka.Config{Brokers: brokers, Timeout: time.Second, Options: []kgo.Opt{kgo.ConnIdleTimeout(time.Second)}})
	require.NoError(t, err)
	t.Cleanup(p.Close)
	_, err = p.Send(ctx, request(strings.Repeat("cd", 32), `{"topic":"orders"}`))
	require.NoError(t, err)

	cluster.Close()
	require.Eventually(t, func() bool {
		open, _ := kafka.Connections(p)
		return open == 0
	}, 10*time.Second, 10*time.Millisecond, "the client saw its connections close")
	kafka.ForgetDialFailure(p)
	_, ever := kafka.Connections(p)
	_, err = p.Send(ctx, request(strings.Repeat("ab", 32), `{"topic":"orders"}`))
	require.Error(t, err)
	_, now := kafka.Connections(p)
	require.Equal(t, ever, now, "no connection opened during the produce")
	require.True(t, providers.IsUnreachable(err), "%v", err)
	class, _ := providers.Classify(err)
	require.Equal(t, providers.ClassRetryable, class, "%v", err)
}
