package idempotency_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/migrations"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/outbox/idempotency"
)

// POST /orders with an Idempotency-Key: the first call writes the order
// and enqueues its webhook in the request's transaction, the retry gets the
// same response back, and the same key with another body gets 422.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, exampleDatabaseURL())
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	schema, drop, err := migrations.Temporary(ctx, pool, "outboxd_example")
	if err != nil {
		log.Fatal(err)
	}
	defer drop()
	if _, err := pool.Exec(ctx, "CREATE TABLE "+schema+".orders (id text PRIMARY KEY, amount int NOT NULL)"); err != nil {
		log.Fatal(err)
	}

	ob, err := outbox.New(outbox.Config{Schema: schema})
	if err != nil {
		log.Fatal(err)
	}
	keys, err := idempotency.New(pool, idempotency.Config{
		Schema: schema,
		// Keys of two API clients never collide.
		Scope: func(r *http.Request) string { return r.Header.Get("X-Api-Client") },
	})
	if err != nil {
		log.Fatal(err)
	}

	createOrder := func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			ID     string `json:"id"`
			Amount int    `json:"amount"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			http.Error(w, `{"error": "invalid JSON"}`, http.StatusBadRequest)
			return
		}
		// The request's transaction: the order, its event and effects, and
		// the stored response commit together.
		tx, _ := idempotency.Tx(r.Context())
		if _, err := tx.Exec(r.Context(), "INSERT INTO "+schema+".orders VALUES ($1, $2)", in.ID, in.Amount); err != nil {
			http.Error(w, "could not store the order", http.StatusInternalServerError) // rolls back, nothing stored
			return
		}
		_, err := ob.Enqueue(r.Context(), tx, outbox.Event{
			ID: outbox.EventID("order.created", in.ID), AggregateType: "order", AggregateID: in.ID, Type: "order.created",
		}, outbox.Effect{Kind: "webhook.order_created", Provider: "webhook",
			Payload: json.RawMessage(`{"url": "https://hooks.example.com/orders", "body": {"order": "` + in.ID + `"}}`)})
		if err != nil {
			http.Error(w, "could not enqueue", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id": %q, "amount": %d}`, in.ID, in.Amount)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /orders", keys.Transactional(http.HandlerFunc(createOrder)))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	post := func(body string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/orders", strings.NewReader(body))
		req.Header.Set("Idempotency-Key", "3f1c2a8e-order-1001")
		req.Header.Set("X-Api-Client", "shop-frontend")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		fmt.Printf("%d replayed=%q %s\n", resp.StatusCode, resp.Header.Get(idempotency.ReplayedHeader), strings.TrimSpace(string(b)))
	}
	post(`{"id": "ord_1001", "amount": 4200}`)
	post(`{"id": "ord_1001", "amount": 4200}`) // the client's retry after a timeout
	post(`{"id": "ord_1001", "amount": 9900}`) // the same key for another request

	var orders, effects int
	if err := pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM "+schema+".orders), (SELECT count(*) FROM "+schema+".side_effects)").Scan(&orders, &effects); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d order, %d effect\n", orders, effects)
	// Output:
	// 201 replayed="" {"id": "ord_1001", "amount": 4200}
	// 201 replayed="true" {"id": "ord_1001", "amount": 4200}
	// 422 replayed="" {"error":{"code":"idempotency_key_reused","message":"this Idempotency-Key was already used for a different request (see differs): use a new key for a new operation","differs":["body"]}}
	// 1 order, 1 effect
}

func exampleDatabaseURL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}
