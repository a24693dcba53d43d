package outbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/migrations"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/providers/stripe/stripeschema"
	"github.com/outboxd/outboxd/providers/webhook"
)

// Example records an order payment and the webhook it implies in one
// transaction: both commit together, or neither does.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, databaseURL())
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	// A schema of its own for the example; an application runs
	// migrations.Up (or outboxd migrate) on its real schema once.
	schema, drop, err := migrations.Temporary(ctx, pool, "outboxd_example")
	if err != nil {
		log.Fatal(err)
	}
	defer drop()
	if _, err := pool.Exec(ctx, "CREATE TABLE "+schema+".orders (id text PRIMARY KEY, paid boolean)"); err != nil {
		log.Fatal(err)
	}

	ob, err := outbox.New(outbox.Config{Schema: schema})
	if err != nil {
		log.Fatal(err)
	}

	// The application's own transaction.
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO "+schema+".orders VALUES ('ord_42', true)"); err != nil {
			return err
		}
		res, err := ob.Enqueue(ctx, tx, outbox.Event{
			// The same command always derives the same id, so a retry replays.
			ID:            outbox.EventID("order.paid", "ord_42"),
			AggregateType: "order",
			AggregateID:   "ord_42",
			Type:          "order.paid",
			Payload:       json.RawMessage(`{"amount": 4200, "currency": "eur"}`),
		},
			// Effects are built from the providers' typed values (raw JSON
			// in outbox.Effect stays for custom providers).
			outbox.EffectOf("webhook.order_paid", webhook.Payload{
				URL:  "https://hooks.example.com/orders",
				Body: json.RawMessage(`{"type": "order.paid", "order": "ord_42"}`),
			}),
			outbox.EffectOf("stripe.capture", stripeschema.PaymentIntentCapture{ID: "pi_3NqXj2LkdIwHu7ix1x0Fz9p2"}),
		)
		if err != nil {
			return err
		}
		for _, e := range res.Effects {
			fmt.Printf("effect %s: key %s…\n", e.Kind, e.Key[:12])
		}
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}

	var n int
	var state string
	if err := pool.QueryRow(ctx, "SELECT count(*), min(state) FROM "+schema+".side_effects").Scan(&n, &state); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("committed with the order; %d effects, %s\n", n, state)
	// Output:
	// effect webhook.order_paid: key 4bccfbccfcac…
	// effect stripe.capture: key 7e04157861c2…
	// committed with the order; 2 effects, pending
}

// databaseURL is the example's Postgres: TEST_DATABASE_URL, or the local
// one a newcomer has.
func databaseURL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}
