package sideeffects_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/migrations"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/webhook"
	"github.com/outboxd/outboxd/sideeffects"
	"github.com/outboxd/outboxd/sideeffects/oncall"
)

// smsProvider is an application's own provider: it validates its payload
// (so Enqueue rejects bad ones before writing), declares its guarantees,
// and classifies every failure.
type smsProvider struct {
	send func(ctx context.Context, to, text, key string) (string, error)
}

type smsPayload struct {
	To   string `json:"to"`
	Text string `json:"text"`
}

func (smsProvider) Name() string { return "sms" }

func (smsProvider) ValidatePayload(_ string, raw json.RawMessage) error {
	var p smsPayload
	if err := providers.DecodeStrict(raw, &p); err != nil {
		return err
	}
	if p.To == "" || p.Text == "" {
		return errors.New("to and text are required")
	}
	return nil
}

// Guarantees: the SMS gateway deduplicates on the key for a day.
func (smsProvider) Guarantees() providers.Guarantees {
	return providers.Guarantees{KeyWindow: 24 * time.Hour, KeyWindowMargin: time.Hour, InDoubt: providers.AtLeastOnce}
}

func (s smsProvider) Send(ctx context.Context, req providers.Request) (providers.Result, error) {
	var p smsPayload
	if err := providers.DecodeStrict(req.Payload, &p); err != nil {
		return providers.Result{}, providers.Permanent(err)
	}
	id, err := s.send(ctx, p.To, p.Text, req.Key)
	if err != nil {
		// Without proof that the gateway did nothing, the outcome is
		// unknown: re-sent with the same key under at_least_once.
		return providers.Result{}, providers.InDoubt(err)
	}
	return providers.Result{Ref: id}, nil
}

// Example_customProvider enqueues an effect for an application's own
// provider and runs the dispatcher in process until interrupted.
func Example_customProvider() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if _, err := migrations.Up(ctx, pool, "outboxd"); err != nil {
		log.Fatal(err)
	}
	sms := smsProvider{send: func(_ context.Context, to, text, key string) (string, error) {
		fmt.Println("sms to", to, "with key", key)
		return "sms_1", nil
	}}

	// Enqueue side: the application's transaction.
	ob, err := outbox.New(outbox.Config{Schema: "outboxd", Providers: []providers.Validator{sms}})
	if err != nil {
		log.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := ob.Enqueue(ctx, tx, outbox.Event{ID: outbox.EventID("signup", "user_7"), Type: "user.signed_up"},
		outbox.Effect{Kind: "sms.welcome", Provider: "sms", Payload: json.RawMessage(`{"to": "+15550100", "text": "Welcome!"}`)}); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}

	// Dispatch side, in the same process.
	wh, err := webhook.New(webhook.Config{Secret: os.Getenv("OUTBOXD_WEBHOOK_SECRET")})
	if err != nil {
		log.Fatal(err)
	}
	d, err := sideeffects.NewDispatcher(pool, sideeffects.Config{Schema: "outboxd", Providers: []providers.Provider{sms, wh}})
	if err != nil {
		log.Fatal(err)
	}
	if err := d.Start(ctx); err != nil {
		log.Fatal(err)
	}
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.Stop(stopCtx); err != nil {
		log.Fatal(err)
	}
}

// Example_operator retries a failed effect the way outboxctl retry does:
// same rules, same audit trail, after listing what is stuck with the same
// diagnosis as outboxctl stuck.
func Example_operator() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	op, err := sideeffects.NewOperator(pool, sideeffects.OperatorConfig{
		Schema:     "outboxd",
		Guarantees: map[string]providers.Guarantees{webhook.Name: webhook.Config{}.Guarantees()},
	})
	if err != nil {
		log.Fatal(err)
	}
	stuck, err := op.Stuck(ctx, 5*time.Minute, 100)
	if err != nil {
		log.Fatal(err)
	}
	for _, s := range stuck {
		fmt.Printf("%s %s %s: %s\n", s.ID, s.Kind, s.State, oncall.Diagnosis(s, time.Now(), sideeffects.DefaultRescueAfter+time.Minute, 0))
	}
	id := uuid.MustParse("0190c3a0-7b1e-7c3d-9f00-000000000001")
	changes, err := op.Retry(ctx, []uuid.UUID{id}, sideeffects.ActionOpts{Actor: "oncall@example.com", Reason: "receiver fixed"})
	if err != nil {
		log.Fatal(err)
	}
	for _, ch := range changes {
		if !ch.Applied {
			fmt.Println("not retried:", ch.Skipped)
			continue
		}
		fmt.Println(ch.From, "->", ch.To, ch.Warning)
	}
}
