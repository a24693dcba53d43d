package kafka_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/inbox"
	"github.com/outboxd/outboxd/migrations"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/kafka"
	"github.com/outboxd/outboxd/providers/kafka/kafkaschema"
	"github.com/outboxd/outboxd/sideeffects"
)

// Example_consumeOnce relays a domain event to Kafka from the
// application's commit, and applies it once on the consuming side. Kafka
// does not deduplicate a record produced again after an attempt in doubt,
// so the consumer does: it claims each record's outboxd-idempotency-key
// with the inbox package in the transaction that does its work, and a
// second copy changes nothing.
func Example_consumeOnce() {
	ctx := context.Background()
	// A Kafka cluster, here in the process (franz-go's kfake).
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "orders"))
	if err != nil {
		panic(err)
	}
	defer cluster.Close()
	brokers := cluster.ListenAddrs()

	pool, err := pgxpool.New(ctx, databaseURL())
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	schema, drop, err := migrations.Temporary(ctx, pool, "outboxd_example")
	if err != nil {
		panic(err)
	}
	defer drop()

	// The application: the event and its relay commit with its own writes.
	ob, _ := outbox.New(outbox.Config{Schema: schema})
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := ob.Enqueue(ctx, tx, outbox.Event{ID: outbox.EventID("orders", "o_42", "paid"), Type: "order.paid",
			AggregateType: "order", AggregateID: "o_42", Payload: []byte(`{"order": "o_42", "amount": 500}`)},
			outbox.EffectOf("kafka.order_paid", kafkaschema.Record{Topic: "orders"}))
		return err
	})
	if err != nil {
		panic(err)
	}

	// outboxd: produces it, keyed by the aggregate id.
	relay, err := kafka.New(ctx, kafka.Config{Brokers: brokers})
	if err != nil {
		panic(err)
	}
	defer relay.Close()
	d, err := sideeffects.NewDispatcher(pool, sideeffects.Config{Schema: schema, Providers: []providers.Provider{relay}})
	if err != nil {
		panic(err)
	}
	if err := d.Start(ctx); err != nil {
		panic(err)
	}
	defer d.Stop(ctx)

	// The consumer: each record applied once, in its own transaction.
	ib, err := inbox.New(pool, inbox.Config{Schema: schema})
	if err != nil {
		panic(err)
	}
	apply := func(r *kgo.Record) {
		var key, eventType string
		for _, h := range r.Headers {
			switch h.Key {
			case kafkaschema.HeaderKey:
				key = string(h.Value)
			case kafkaschema.HeaderEventType:
				eventType = string(h.Value)
			}
		}
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			isNew, err := ib.Claim(ctx, tx, "kafka:orders", key)
			if err != nil || !isNew {
				fmt.Println("already applied: skipped")
				return err
			}
			// The consumer's own writes go here, in tx.
			fmt.Printf("applied %s for %s: %s\n", eventType, r.Key, r.Value)
			return nil
		})
		if err != nil {
			panic(err)
		}
		// Commit the offset after the transaction: a crash before it
		// delivers the record again, and the inbox skips it.
	}
	consumer, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics("orders"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		panic(err)
	}
	defer consumer.Close()
	pollCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var rec *kgo.Record
	for rec == nil && pollCtx.Err() == nil {
		if recs := consumer.PollFetches(pollCtx).Records(); len(recs) > 0 {
			rec = recs[0]
		}
	}
	apply(rec)
	apply(rec) // the same record again: a redelivery, or a second copy
	// Output:
	// applied order.paid for o_42: {"order": "o_42", "amount": 500}
	// already applied: skipped
}

func databaseURL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}
