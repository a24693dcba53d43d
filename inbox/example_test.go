package inbox_test

import (
	"context"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/inbox"
	"github.com/outboxd/outboxd/migrations"
)

// ExampleInbox_Claim deduplicates an incoming message in the transaction
// that does its work: the first delivery claims it and commits with the
// work, a redelivery finds it claimed and does nothing.
func ExampleInbox_Claim() {
	ctx := context.Background()
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
	ib, err := inbox.New(pool, inbox.Config{Schema: schema})
	if err != nil {
		panic(err)
	}
	for _, delivery := range []string{"first delivery", "redelivery"} {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			isNew, err := ib.Claim(ctx, tx, "partner-webhooks", "msg_42")
			if err != nil {
				return err
			}
			fmt.Printf("%s: new %t\n", delivery, isNew)
			// The message's work goes here, in tx, only when isNew.
			return nil
		})
		if err != nil {
			panic(err)
		}
	}
	// Output:
	// first delivery: new true
	// redelivery: new false
}

func databaseURL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}
