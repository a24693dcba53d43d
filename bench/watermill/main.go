// Command watermill runs the Watermill SQL outbox the way its documentation
// sets it up (watermill-sql's PostgreSQL publisher inside the application's
// transaction, wrapped by the forwarder component; the forwarder moving the
// messages on), so that outboxbench can compare outboxd with it in the same
// run. It lives in a module of its own so outboxd's go.mod never gains
// Watermill.
//
//	watermill -database-url URL -schema S -mode publish -concurrency 8 -duration 3s
//	watermill -database-url URL -schema S -mode forward -messages 50000
//	watermill -database-url URL -schema S -mode forward -messages 50000 -to nats=nats://127.0.0.1:4222
//	watermill -database-url URL -schema S -mode forward -messages 50000 -to kafka=127.0.0.1:9092
//
// It prints one JSON object on stdout: for publish, the order transactions
// per second and their p50/p99; for forward, the messages forwarded per
// second. The schema must exist and hold outboxbench's bench_orders table.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	wmkafka "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// forwarderTopic is the SQL topic the forwarder reads; outTopic the topic
// the order's messages are meant for.
const (
	forwarderTopic = "outboxd_bench_forwarder"
	outTopic       = "orders"
)

// Result is what one run prints.
type Result struct {
	Mode        string  `json:"mode"`
	Concurrency int     `json:"concurrency,omitempty"`
	Count       int     `json:"count"`
	Seconds     float64 `json:"seconds"`
	PerSecond   float64 `json:"per_second"`
	P50         int64   `json:"p50_ns,omitempty"`
	P99         int64   `json:"p99_ns,omitempty"`
}

func main() {
	var (
		url, schema, mode, to string
		conc, messages        int
		duration              time.Duration
	)
	flag.StringVar(&url, "database-url", "", "Postgres URL")
	flag.StringVar(&schema, "schema", "", "schema holding bench_orders; Watermill's tables are created there")
	flag.StringVar(&mode, "mode", "publish", "publish (order transactions) or forward (burn-down)")
	flag.IntVar(&conc, "concurrency", 1, "publish: concurrent transactions")
	flag.DurationVar(&duration, "duration", 3*time.Second, "publish: how long to run")
	flag.IntVar(&messages, "messages", 50000, "forward: messages to burn down")
	flag.StringVar(&to, "to", "count", "forward: where to: count (a publisher that only counts), nats=URL (JetStream, stream capturing subject orders) or kafka=brokers (topic orders)")
	flag.Parse()
	if url == "" || schema == "" {
		fail(errors.New("-database-url and -schema are required"))
	}
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		fail(err)
	}
	cfg.MaxConns = int32(max(conc, 4)) + 2
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		fail(err)
	}
	defer pool.Close()
	var res Result
	switch mode {
	case "publish":
		res, err = publish(ctx, pool, schema, conc, duration)
	case "forward":
		var out destination
		if out, err = destinationOf(to, int64(messages)); err == nil {
			res, err = forward(ctx, pool, schema, messages, out)
			_ = out.Close()
		}
	default:
		err = fmt.Errorf("-mode %q: want publish or forward", mode)
	}
	if err != nil {
		fail(err)
	}
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "watermill:", err)
	os.Exit(1)
}

// schemaAdapter keeps Watermill's tables in the bench schema.
// The forwarder's subscriber settings, tuned for throughput.
const (
	forwardBatch = 100
	forwardPoll  = 10 * time.Millisecond
)

func schemaAdapter(schema string) wsql.DefaultPostgreSQLSchema {
	return wsql.DefaultPostgreSQLSchema{
		GenerateMessagesTableName: func(topic string) string {
			return pgx.Identifier{schema, "watermill_" + topic}.Sanitize()
		},
	}
}

func offsetsAdapter(schema string) wsql.DefaultPostgreSQLOffsetsAdapter {
	return wsql.DefaultPostgreSQLOffsetsAdapter{
		GenerateMessagesOffsetsTableName: func(topic string) string {
			return pgx.Identifier{schema, "watermill_offsets_" + topic}.Sanitize()
		},
	}
}

// initialize creates the messages table once, outside the timed runs
// (publishing in a transaction must not create tables).
func initialize(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	pub, err := wsql.NewPublisher(wsql.BeginnerFromPgx(pool), wsql.PublisherConfig{
		SchemaAdapter: schemaAdapter(schema), AutoInitializeSchema: true,
	}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	msg := message.NewMessage(watermill.NewUUID(), []byte(`{}`))
	if err := pub.Publish(forwarderTopic, msg); err != nil {
		return err
	}
	_, err = pool.Exec(ctx, "TRUNCATE "+pgx.Identifier{schema, "watermill_" + forwarderTopic}.Sanitize())
	return err
}

// orderMessages are the same three messages outboxd's bench enqueues as
// effects: a webhook body, a capture, a receipt.
func orderMessages(n string) []*message.Message {
	return []*message.Message{
		message.NewMessage(watermill.NewUUID(), []byte(`{"url": "https://hooks.example.com/orders", "body": {"order": "`+n+`"}}`)),
		message.NewMessage(watermill.NewUUID(), []byte(`{"operation": "payment_intent.capture", "params": {"id": "pi_`+n+`"}}`)),
		message.NewMessage(watermill.NewUUID(), []byte(`{"from": {"email": "shop@example.com"}, "to": [{"email": "a@example.com"}], "subject": "Receipt", "text": "Thanks"}`)),
	}
}

// publish runs order transactions: the domain row, then the three messages
// through the forwarder's publisher over a SQL publisher on the transaction.
func publish(ctx context.Context, pool *pgxpool.Pool, schema string, conc int, d time.Duration) (Result, error) {
	if err := initialize(ctx, pool, schema); err != nil {
		return Result{}, fmt.Errorf("create Watermill's table: %w", err)
	}
	insertOrder := "INSERT INTO " + pgx.Identifier{schema, "bench_orders"}.Sanitize() + " (customer, amount) VALUES ($1, $2)"
	adapter := schemaAdapter(schema)
	var seq atomic.Int64
	order := func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, insertOrder, "cus_42", 4200); err != nil {
			return err
		}
		pub, err := wsql.NewPublisher(wsql.TxFromPgx(tx), wsql.PublisherConfig{SchemaAdapter: adapter}, watermill.NopLogger{})
		if err != nil {
			return err
		}
		return forwarder.NewPublisher(pub, forwarder.PublisherConfig{ForwarderTopic: forwarderTopic}).
			Publish(outTopic, orderMessages(strconv.FormatInt(seq.Add(1), 10))...)
	}
	deadline := time.Now().Add(d)
	var (
		mu       sync.Mutex
		lat      []time.Duration
		firstErr error
		wg       sync.WaitGroup
	)
	start := time.Now()
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for time.Now().Before(deadline) {
				t0 := time.Now()
				if err := pgx.BeginFunc(ctx, pool, order); err != nil {
					mu.Lock()
					firstErr = cmpOr(firstErr, err)
					mu.Unlock()
					return
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return Result{}, firstErr
	}
	slices.Sort(lat)
	return Result{
		Mode: "publish", Concurrency: conc, Count: len(lat), Seconds: elapsed.Seconds(),
		PerSecond: float64(len(lat)) / elapsed.Seconds(),
		P50:       int64(percentile(lat, 0.50)), P99: int64(percentile(lat, 0.99)),
	}, nil
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(float64(len(sorted)-1)*p)]
}

// counter is the forwarder's destination: a publisher that only counts, the
// counterpart of outboxbench's no-op provider.
type counter struct {
	n    atomic.Int64
	want int64
	done chan struct{}
}

func (c *counter) Publish(_ string, msgs ...*message.Message) error {
	if c.n.Add(int64(len(msgs))) == c.want {
		close(c.done)
	}
	return nil
}

func (c *counter) Close() error { return nil }

func (c *counter) Done() <-chan struct{} { return c.done }

func (c *counter) Count() int64 { return c.n.Load() }

// destination is where the forwarder moves the messages, counting them.
type destination interface {
	message.Publisher
	Done() <-chan struct{}
	Count() int64
}

// counted publishes through pub, then counts.
type counted struct {
	pub message.Publisher
	counter
}

func (c *counted) Publish(topic string, msgs ...*message.Message) error {
	if err := c.pub.Publish(topic, msgs...); err != nil {
		return err
	}
	return c.counter.Publish(topic, msgs...)
}

func (c *counted) Close() error { return c.pub.Close() }

// destinationOf reads -to: Watermill's own publishers for NATS JetStream
// (watermill-nats, synchronous publish with the message's UUID as
// Nats-Msg-Id) and Kafka (watermill-kafka's synchronous sarama producer,
// acks from all in-sync replicas).
func destinationOf(to string, want int64) (destination, error) {
	kind, addr, _ := strings.Cut(to, "=")
	switch kind {
	case "count":
		return &counter{want: want, done: make(chan struct{})}, nil
	case "nats":
		pub, err := wmnats.NewPublisher(wmnats.PublisherConfig{URL: addr, Marshaler: &wmnats.NATSMarshaler{},
			JetStream: wmnats.JetStreamConfig{TrackMsgId: true}}, watermill.NopLogger{})
		if err != nil {
			return nil, err
		}
		return &counted{pub: pub, counter: counter{want: want, done: make(chan struct{})}}, nil
	case "kafka":
		cfg := wmkafka.DefaultSaramaSyncPublisherConfig()
		cfg.Version = sarama.V2_8_0_0
		cfg.Producer.RequiredAcks = sarama.WaitForAll
		pub, err := wmkafka.NewPublisher(wmkafka.PublisherConfig{Brokers: strings.Split(addr, ","), Marshaler: wmkafka.DefaultMarshaler{},
			OverwriteSaramaConfig: cfg}, watermill.NopLogger{})
		if err != nil {
			return nil, err
		}
		return &counted{pub: pub, counter: counter{want: want, done: make(chan struct{})}}, nil
	}
	return nil, fmt.Errorf("-to %q: want count, nats=URL or kafka=brokers", to)
}

// forward writes n messages as the publisher does, then times the
// forwarder moving them all to a publisher that only counts.
func forward(ctx context.Context, pool *pgxpool.Pool, schema string, n int, out destination) (Result, error) {
	if err := initialize(ctx, pool, schema); err != nil {
		return Result{}, fmt.Errorf("create Watermill's table: %w", err)
	}
	db := wsql.BeginnerFromPgx(pool)
	pub, err := wsql.NewPublisher(db, wsql.PublisherConfig{SchemaAdapter: schemaAdapter(schema)}, watermill.NopLogger{})
	if err != nil {
		return Result{}, err
	}
	fwdPub := forwarder.NewPublisher(pub, forwarder.PublisherConfig{ForwarderTopic: forwarderTopic})
	const batch = 1000
	for i := 0; i < n; i += batch {
		msgs := make([]*message.Message, 0, batch)
		for j := i; j < min(i+batch, n); j++ {
			msgs = append(msgs, orderMessages(strconv.Itoa(j))[j%3])
		}
		if err := fwdPub.Publish(outTopic, msgs...); err != nil {
			return Result{}, fmt.Errorf("write messages: %w", err)
		}
	}
	if _, err := pool.Exec(ctx, "VACUUM ANALYZE "+pgx.Identifier{schema, "watermill_" + forwarderTopic}.Sanitize()); err != nil {
		return Result{}, err
	}
	// Tuned for throughput as watermill-sql's docs allow: a batch of 100
	// messages a query (the default is 10) and a 10 ms poll when the
	// table is empty (the default is 1 s).
	tuned := schemaAdapter(schema)
	tuned.SubscribeBatchSize = forwardBatch
	sub, err := wsql.NewSubscriber(db, wsql.SubscriberConfig{
		SchemaAdapter: tuned, OffsetsAdapter: offsetsAdapter(schema), InitializeSchema: true,
		PollInterval: forwardPoll,
	}, watermill.NopLogger{})
	if err != nil {
		return Result{}, err
	}
	fwd, err := forwarder.NewForwarder(sub, out, watermill.NopLogger{}, forwarder.Config{ForwarderTopic: forwarderTopic})
	if err != nil {
		return Result{}, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	start := time.Now()
	go func() { errc <- fwd.Run(runCtx) }()
	select {
	case <-out.Done():
	case err := <-errc:
		return Result{}, fmt.Errorf("forwarder stopped after %d of %d: %v", out.Count(), n, err)
	case <-time.After(10 * time.Minute):
		return Result{}, fmt.Errorf("forwarder moved %d of %d in 10 minutes", out.Count(), n)
	}
	elapsed := time.Since(start)
	_ = fwd.Close()
	return Result{Mode: "forward", Count: n, Seconds: elapsed.Seconds(), PerSecond: float64(n) / elapsed.Seconds()}, nil
}
