package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/providers/endpoint"
	"github.com/outboxd/outboxd/providers/webhook"
)

// fanoutResult compares, at one number of endpoints, an event fanned out
// to its subscribers in the caller's transaction with the same event and
// as many webhook effects listed by hand.
type fanoutResult struct {
	Endpoints   int     `json:"endpoints"`
	Concurrency int     `json:"concurrency"`
	Subscribers float64 `json:"subscribers_tx_per_second"`
	ByHand      float64 `json:"by_hand_tx_per_second"`
	// EffectsPerSecond is the fan-out's effects written a second.
	EffectsPerSecond float64 `json:"effects_per_second"`
	// CostPerEffect is the fan-out's time per effect over the listed
	// effects' (1.1: 10% more per effect).
	CostPerEffect float64 `json:"cost_per_effect"`
}

// fanoutCost registers 1, 10 and 100 endpoints (each set on event types
// of its own, so the sets do not see each other) and times, in the
// default enqueue mode (jobs in the transaction), Enqueue(event,
// ToSubscribers()) against Enqueue(event, n webhook effects).
func (b *bench) fanoutCost(ctx context.Context) ([]fanoutResult, error) {
	if err := b.createOrders(ctx); err != nil {
		return nil, err
	}
	key, err := endpoint.ParseKey(endpoint.NewKey())
	if err != nil {
		return nil, err
	}
	reg, err := endpoint.NewRegistry(endpoint.RegistryConfig{Schema: b.schema, Key: key})
	if err != nil {
		return nil, err
	}
	ob, err := outbox.New(enqueueModes[0].config(b.schema))
	if err != nil {
		return nil, err
	}
	insertOrder := "INSERT INTO " + b.schema + ".bench_orders (customer, amount) VALUES ($1, $2)"
	var out []fanoutResult
	for _, n := range []int{1, 10, 100} {
		family := "fan" + strconv.Itoa(n)
		for i := range n {
			if _, _, err := reg.Create(ctx, b.pool, endpoint.Endpoint{URL: fmt.Sprintf("https://hooks%d.example.com/%s", i, family),
				EventTypes: []string{family + ".*"}}, endpoint.Change{Actor: "outboxbench"}); err != nil {
				return nil, err
			}
		}
		byHand := make([]outbox.Effect, n)
		for i := range byHand {
			byHand[i] = outbox.EffectOf(fmt.Sprintf("partner_%d", i), webhook.Payload{URL: fmt.Sprintf("https://hooks%d.example.com/%s", i, family),
				Body: json.RawMessage(`{"type": "` + family + `.paid"}`)})
		}
		tx := func(effects ...outbox.Effect) func(context.Context, pgx.Tx) error {
			return func(ctx context.Context, tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, insertOrder, "cus_42", 4200); err != nil {
					return err
				}
				s := strconv.FormatInt(b.seq.Add(1), 10)
				_, err := ob.Enqueue(ctx, tx, outbox.Event{ID: outbox.EventID("bench.fanout", s), AggregateType: "order", AggregateID: s,
					Type: family + ".paid", Payload: json.RawMessage(`{"amount": 4200, "currency": "eur"}`)}, effects...)
				return err
			}
		}
		for _, conc := range []int{1, 8} {
			sub, err := b.runTxs(ctx, fmt.Sprintf("Enqueue(event, ToSubscribers()) to %d endpoints", n), conc, tx(outbox.ToSubscribers()))
			if err != nil {
				return nil, err
			}
			hand, err := b.runTxs(ctx, fmt.Sprintf("Enqueue(event, %d effects listed)", n), conc, tx(byHand...))
			if err != nil {
				return nil, err
			}
			out = append(out, fanoutResult{Endpoints: n, Concurrency: conc, Subscribers: sub.TPS, ByHand: hand.TPS,
				EffectsPerSecond: sub.TPS * float64(n), CostPerEffect: hand.TPS / sub.TPS})
		}
	}
	_, err = b.pool.Exec(ctx, "TRUNCATE "+b.schema+".side_effects, "+b.schema+".outbox_events, "+b.schema+".river_job, "+b.schema+
		".bench_orders, "+b.schema+".outbox_intake, "+b.schema+".outboxd_endpoints CASCADE")
	return out, err
}
