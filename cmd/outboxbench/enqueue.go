package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/outbox"
)

type enqueueResult struct {
	Name        string        `json:"name"`
	Concurrency int           `json:"concurrency"`
	Txs         int           `json:"transactions"`
	TPS         float64       `json:"tx_per_second"`
	P50         time.Duration `json:"p50_ns"`
	P99         time.Duration `json:"p99_ns"`
	// CostRatio is the bare transaction's rate over this one's (1.3 means
	// enqueueing makes the transaction 30% more expensive); 0 for the bare
	// baseline itself.
	CostRatio float64 `json:"cost_ratio,omitempty"`
	// VsUntraced is this rate, with tracing on, over the same row's
	// without.
	VsUntraced float64 `json:"vs_untraced,omitempty"`
}

// enqueueCost compares a domain transaction inserting one row with the same
// transaction plus Enqueue of one event and three effects.
func (b *bench) enqueueCost(ctx context.Context) ([]enqueueResult, error) {
	if err := b.createOrders(ctx); err != nil {
		return nil, err
	}
	bare := b.bareTx()
	order := b.orderTx
	var out []enqueueResult
	for _, conc := range []int{1, 8} {
		base, err := b.runTxs(ctx, "bare domain tx", conc, bare)
		if err != nil {
			return nil, err
		}
		out = append(out, base)
		var inTx enqueueResult
		for _, mode := range enqueueModes {
			ob, err := outbox.New(mode.config(b.schema))
			if err != nil {
				return nil, err
			}
			r, err := b.runTxs(ctx, "domain tx + Enqueue(1+3), "+mode.name, conc, order(ob))
			if err != nil {
				return nil, err
			}
			r.CostRatio = base.TPS / r.TPS
			out = append(out, r)
			if mode.jobs == outbox.JobsInTransaction {
				inTx = r
			}
		}
		r, err := b.tracedEnqueue(ctx, conc)
		if err != nil {
			return nil, err
		}
		r.CostRatio, r.VsUntraced = base.TPS/r.TPS, r.TPS/inTx.TPS
		out = append(out, r)
		for _, carry := range []bool{false, true} {
			name := "domain tx + outboxd_enqueue(1+3) from SQL (jobs by dispatcher)"
			if carry {
				name = "domain tx + outboxd_enqueue(1+3) from SQL, carry => true (effects by dispatcher)"
			}
			r, err = b.runTxs(ctx, name, conc, b.sqlOrderTx(carry))
			if err != nil {
				return nil, err
			}
			r.CostRatio = base.TPS / r.TPS
			out = append(out, r)
		}
		if b.wm != nil {
			if err := b.vacuum(ctx); err != nil {
				return nil, err
			}
			r, err := b.wm.publish(ctx, conc, b.s.EnqueueDuration)
			if err != nil {
				return nil, err
			}
			r.CostRatio = base.TPS / r.TPS
			out = append(out, r)
		}
	}
	_, err := b.pool.Exec(ctx, "TRUNCATE "+b.schema+".side_effects, "+b.schema+".outbox_events, "+b.schema+".river_job, "+b.schema+".bench_orders, "+
		b.schema+".outbox_intake, "+b.schema+".outbox_event_intake CASCADE")
	return out, err
}

// tracedEnqueue is the jobs-in-transaction row with tracing on: each
// transaction runs inside a request span, Enqueue starts its span and
// stores the traceparent with the event.
func (b *bench) tracedEnqueue(ctx context.Context, conc int) (enqueueResult, error) {
	t := newBenchTracing()
	defer func() { _ = t.tp.Shutdown(context.Background()) }()
	cfg := enqueueModes[0].config(b.schema)
	cfg.Tracer = t.tracer
	ob, err := outbox.New(cfg)
	if err != nil {
		return enqueueResult{}, err
	}
	order := b.orderTx(ob)
	return b.runTxs(ctx, "domain tx + Enqueue(1+3), jobs in tx, traced (OpenTelemetry SDK, every trace sampled)", conc,
		func(ctx context.Context, tx pgx.Tx) error {
			ctx, end := t.request(ctx)
			defer end()
			return order(ctx, tx)
		})
}

// sqlOrderTx is orderTx as an application in another language writes
// it: the same event and effects through the SQL function, carried by the
// event if carry.
func (b *bench) sqlOrderTx(carry bool) func(context.Context, pgx.Tx) error {
	insertOrder := "INSERT INTO " + b.schema + ".bench_orders (customer, amount) VALUES ($1, $2)"
	enqueue := "SELECT count(*) FROM " + b.schema + ".outboxd_enqueue($1::jsonb, $2::jsonb, carry => " + strconv.FormatBool(carry) + ")"
	return func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, insertOrder, "cus_42", 4200); err != nil {
			return err
		}
		n := strconv.FormatInt(b.seq.Add(1), 10)
		event := `{"id": "` + outbox.EventID("bench.order_paid", n).String() + `", "aggregate_type": "order", "aggregate_id": "` + n +
			`", "type": "order.paid", "payload": {"amount": 4200, "currency": "eur"}}`
		effects := `[{"kind": "webhook.order_paid", "provider": "webhook", "payload": {"url": "https://hooks.example.com/orders", "body": {"order": "` + n + `"}}},
			{"kind": "stripe.capture", "provider": "stripe", "payload": {"operation": "payment_intent.capture", "params": {"id": "pi_` + n + `"}}},
			{"kind": "email.receipt", "provider": "sendgrid", "payload": {"from": {"email": "shop@example.com"}, "to": [{"email": "a@example.com"}], "subject": "Receipt", "text": "Thanks"}}]`
		var effs int
		return tx.QueryRow(ctx, enqueue, event, effects).Scan(&effs)
	}
}

// createOrders creates the table of the application's domain rows.
func (b *bench) createOrders(ctx context.Context) error {
	_, err := b.pool.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+b.schema+".bench_orders (id bigserial PRIMARY KEY, customer text NOT NULL, amount int NOT NULL, created_at timestamptz NOT NULL DEFAULT now())")
	return err
}

// bareTx is the application's transaction without outboxd: one domain row.
func (b *bench) bareTx() func(context.Context, pgx.Tx) error {
	insertOrder := "INSERT INTO " + b.schema + ".bench_orders (customer, amount) VALUES ($1, $2)"
	return func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, insertOrder, "cus_42", 4200)
		return err
	}
}

// orderTx pays an order in the application's transaction: the domain row,
// then one event with three effects through ob.
func (b *bench) orderTx(ob *outbox.Outbox) func(context.Context, pgx.Tx) error {
	insertOrder := "INSERT INTO " + b.schema + ".bench_orders (customer, amount) VALUES ($1, $2)"
	return func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, insertOrder, "cus_42", 4200); err != nil {
			return err
		}
		n := strconv.FormatInt(b.seq.Add(1), 10)
		_, err := ob.Enqueue(ctx, tx, outbox.Event{
			ID: outbox.EventID("bench.order_paid", n), AggregateType: "order", AggregateID: n, Type: "order.paid",
			Payload: json.RawMessage(`{"amount": 4200, "currency": "eur"}`),
		},
			outbox.Effect{Kind: "webhook.order_paid", Provider: "webhook", Payload: json.RawMessage(`{"url": "https://hooks.example.com/orders", "body": {"order": "` + n + `"}}`)},
			outbox.Effect{Kind: "stripe.capture", Provider: "stripe", Payload: json.RawMessage(`{"operation": "payment_intent.capture", "params": {"id": "pi_` + n + `"}}`)},
			outbox.Effect{Kind: "email.receipt", Provider: "sendgrid", Payload: json.RawMessage(`{"from": {"email": "shop@example.com"}, "to": [{"email": "a@example.com"}], "subject": "Receipt", "text": "Thanks"}`)},
		)
		return err
	}
}

// runTxs runs fn in transactions from conc goroutines for the configured
// duration and reports rate and latency percentiles.
func (b *bench) runTxs(ctx context.Context, name string, conc int, fn func(context.Context, pgx.Tx) error) (enqueueResult, error) {
	if err := b.vacuum(ctx); err != nil {
		return enqueueResult{}, err
	}
	return b.runLoop(ctx, name, conc, func(ctx context.Context) error {
		return pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error { return fn(ctx, tx) })
	})
}

// runLoop runs fn from conc goroutines for the configured duration and
// reports rate and latency percentiles.
func (b *bench) runLoop(ctx context.Context, name string, conc int, fn func(context.Context) error) (enqueueResult, error) {
	deadline := time.Now().Add(b.s.EnqueueDuration)
	var mu sync.Mutex
	var lat []time.Duration
	var firstErr error
	var count atomic.Int64
	done := make(chan struct{})
	go progress(fmt.Sprintf("%s x%d", name, conc), int(b.s.EnqueueDuration/time.Second),
		func() int { return int(time.Since(deadline.Add(-b.s.EnqueueDuration)) / time.Second) }, done)
	var wg sync.WaitGroup
	start := time.Now()
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for time.Now().Before(deadline) && ctx.Err() == nil {
				t0 := time.Now()
				if err := fn(ctx); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
				mine = append(mine, time.Since(t0))
				count.Add(1)
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(done)
	if firstErr != nil {
		return enqueueResult{}, firstErr
	}
	slices.Sort(lat)
	return enqueueResult{
		Name: name, Concurrency: conc, Txs: len(lat), TPS: float64(len(lat)) / elapsed.Seconds(),
		P50: percentile(lat, 0.50), P99: percentile(lat, 0.99),
	}, nil
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted)-1) * p)
	return sorted[i]
}
