package inbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"net/netip"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/inbox"
	"github.com/outboxd/outboxd/migrations"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/webhook"
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

// ExampleInbox_Handler is a receiver of outboxd's webhooks: it verifies
// each delivery's Standard Webhooks signature, applies each webhook-id
// once in its own transaction, and answers 200 to a redelivery without
// applying it again. The receiver here still holds the secret outboxd is
// rotating away from: during the rotation outboxd signs with both, so the
// delivery verifies.
func ExampleInbox_Handler() {
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

	const oldSecret, newSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_dGhlIG5ldyBzaWduaW5nIHNlY3JldCAxMjM0NQ=="
	// The receiver: outboxd re-sends a delivery for as long as the
	// webhook key window (24h by default), so ids are kept longer.
	ib, err := inbox.New(pool, inbox.Config{Schema: schema})
	if err != nil {
		panic(err)
	}
	verifier, err := inbox.StandardWebhooks(oldSecret, 24*time.Hour)
	if err != nil {
		panic(err)
	}
	h, err := ib.Handler("outboxd", verifier, func(ctx context.Context, tx pgx.Tx, m inbox.Message) error {
		fmt.Printf("applied %s %s\n", m.Type, m.Body)
		return nil // the receiver's own writes go here, in tx
	})
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	// outboxd's webhook provider, mid-rotation, sends one effect twice
	// (an attempt in doubt is re-sent with the same webhook-id).
	sender, err := webhook.New(webhook.Config{Secret: newSecret, PreviousSecrets: []string{oldSecret},
		AllowedNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	if err != nil {
		panic(err)
	}
	payload, _ := webhook.Payload{URL: srv.URL, Body: json.RawMessage(`{"type": "order.paid", "order": "o_42"}`)}.EffectPayload()
	for attempt := 1; attempt <= 2; attempt++ {
		_, err := sender.Send(ctx, providers.Request{EffectID: "0190c3a0-7b1e-8c3d-9f00-0000000000e1", Kind: "webhook.order_paid",
			Key: "5c96150ae10100a82a508e4697e4efc7b3bbe1afbb9a526cf0b924bd0c44657e", Payload: payload, Attempt: attempt})
		fmt.Printf("attempt %d: error %v\n", attempt, err)
	}
	// Output:
	// applied order.paid {"type":"order.paid","order":"o_42"}
	// attempt 1: error <nil>
	// attempt 2: error <nil>
}
