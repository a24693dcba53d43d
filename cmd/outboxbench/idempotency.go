package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/outbox/idempotency"
)

// idempotencyCost compares a handler that writes one row and enqueues one
// effect in its own transaction with the same handler behind the
// Idempotency-Key middleware (transactional mode), each request with a new
// key. Requests are served in-process (ServeHTTP), so the ratio is the
// middleware's cost, not the network's.
func (b *bench) idempotencyCost(ctx context.Context) ([]enqueueResult, error) {
	if _, err := b.pool.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+b.schema+".bench_orders (id bigserial PRIMARY KEY, customer text NOT NULL, amount int NOT NULL, created_at timestamptz NOT NULL DEFAULT now())"); err != nil {
		return nil, err
	}
	// A job per effect, as in every earlier round of these figures.
	ob, err := outbox.New(outbox.Config{Schema: b.schema, Jobs: outbox.JobsInTransaction})
	if err != nil {
		return nil, err
	}
	mw, err := idempotency.New(b.pool, idempotency.Config{Schema: b.schema, Unscoped: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return nil, err
	}
	insertOrder := "INSERT INTO " + b.schema + ".bench_orders (customer, amount) VALUES ($1, $2) RETURNING id"
	handle := func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) error {
		var in struct {
			Amount int `json:"amount"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			return err
		}
		var id int64
		if err := tx.QueryRow(r.Context(), insertOrder, "cus_42", in.Amount).Scan(&id); err != nil {
			return err
		}
		n := strconv.FormatInt(id, 10)
		if _, err := ob.Enqueue(r.Context(), tx, outbox.Event{ID: outbox.EventID("bench.order_created", n), AggregateType: "order", AggregateID: n, Type: "order.created"},
			outbox.Effect{Kind: "webhook.order_created", Provider: "webhook", Payload: json.RawMessage(`{"url": "https://hooks.example.com/orders", "body": {"order": "` + n + `"}}`)}); err != nil {
			return err
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id": %s, "amount": %d}`, n, in.Amount)
		return nil
	}
	plain := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := pgx.BeginFunc(r.Context(), b.pool, func(tx pgx.Tx) error { return handle(w, r, tx) }); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})
	guarded := mw.Transactional(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, _ := idempotency.Tx(r.Context())
		if err := handle(w, r, tx); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	}))
	var seq atomic.Int64
	serve := func(h http.Handler) func(context.Context) error {
		return func(ctx context.Context) error {
			req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/orders", strings.NewReader(`{"amount": 4200}`))
			req.Header.Set("Idempotency-Key", "bench-"+strconv.FormatInt(seq.Add(1), 10))
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusCreated {
				return fmt.Errorf("HTTP %d: %s", rec.Code, rec.Body)
			}
			return nil
		}
	}
	var out []enqueueResult
	for _, conc := range []int{1, 8} {
		base, err := b.runLoop(ctx, "handler: 1 row + Enqueue(1+1), no middleware", conc, serve(plain))
		if err != nil {
			return nil, err
		}
		with, err := b.runLoop(ctx, "the same behind Idempotency-Key (new key each)", conc, serve(guarded))
		if err != nil {
			return nil, err
		}
		with.CostRatio = base.TPS / with.TPS
		out = append(out, base, with)
	}
	_, err = b.pool.Exec(ctx, "TRUNCATE "+b.schema+".side_effects, "+b.schema+".outbox_events, "+b.schema+".river_job, "+b.schema+".bench_orders, "+b.schema+".idempotency_keys CASCADE")
	return out, err
}
