package nats_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats-server/v2/server"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxd/outboxd/inbox"
	"github.com/outboxd/outboxd/migrations"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/nats"
	"github.com/outboxd/outboxd/providers/nats/natsschema"
	"github.com/outboxd/outboxd/sideeffects"
)

// Example_consumeOnce relays a domain event to JetStream from the
// application's commit, and applies it once on the consuming side: the
// consumer claims each message's idempotency key with the inbox package in
// the transaction that does its work, so a redelivery (JetStream's own,
// or outboxd's re-publish outside the duplicate window) changes nothing.
func Example_consumeOnce() {
	ctx := context.Background()
	// A NATS server with JetStream, here in the process; stream ORDERS
	// keeps message ids for 6 hours, longer than outboxd's retries.
	dir, _ := os.MkdirTemp("", "nats")
	defer os.RemoveAll(dir)
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoSigs: true})
	if err != nil {
		panic(err)
	}
	go srv.Start()
	defer srv.Shutdown()
	srv.ReadyForConnections(10 * time.Second)
	nc, err := natsgo.Connect(srv.ClientURL())
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}, Duplicates: 6 * time.Hour})
	if err != nil {
		panic(err)
	}

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
			outbox.EffectOf("nats.order_paid", natsschema.Publish{Subject: "orders.paid"}))
		return err
	})
	if err != nil {
		panic(err)
	}

	// outboxd: publishes it with the effect's key as Nats-Msg-Id.
	relay, err := nats.New(ctx, nats.Config{URL: srv.ClientURL(), Streams: []string{"ORDERS"}})
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

	// The consumer: each message applied once, in its own transaction.
	ib, err := inbox.New(pool, inbox.Config{Schema: schema})
	if err != nil {
		panic(err)
	}
	apply := func(msg jetstream.Msg) {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			isNew, err := ib.Claim(ctx, tx, "nats:ORDERS", msg.Headers().Get(natsschema.HeaderKey))
			if err != nil || !isNew {
				fmt.Println("already applied: skipped")
				return err
			}
			// The consumer's own writes go here, in tx.
			fmt.Printf("applied %s for %s: %s\n", msg.Headers().Get(natsschema.HeaderEventType), msg.Headers().Get(natsschema.HeaderAggregateID), msg.Data())
			return nil
		})
		if err != nil {
			panic(err)
		}
		_ = msg.Ack() // after the commit: a crash before it redelivers
	}
	cons, _ := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "ledger", AckPolicy: jetstream.AckExplicitPolicy})
	msg, err := cons.Next(jetstream.FetchMaxWait(30 * time.Second))
	if err != nil {
		panic(err)
	}
	apply(msg)
	apply(msg) // a redelivery of the same message
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
