package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/testdb"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/sideeffects"
)

// ledger records, across replicas, which effects are being fired right now
// and how often each key was sent.
type ledger struct {
	mu        sync.Mutex
	inFlight  map[string]bool
	sends     map[string]int
	overlaps  int
	byReplica map[int]int
}

// countingProvider is an in-process provider that does nothing but record
// into the shared ledger, as replica n.
type countingProvider struct {
	n      int
	ledger *ledger
}

func (p *countingProvider) Name() string                                  { return "noop" }
func (p *countingProvider) ValidatePayload(string, json.RawMessage) error { return nil }
func (p *countingProvider) Guarantees() providers.Guarantees {
	return providers.Guarantees{InDoubt: providers.AtLeastOnce}
}

func (p *countingProvider) Send(_ context.Context, req providers.Request) (providers.Result, error) {
	l := p.ledger
	l.mu.Lock()
	if l.inFlight[req.EffectID] {
		l.overlaps++
	}
	l.inFlight[req.EffectID] = true
	l.sends[req.Key]++
	l.byReplica[p.n]++
	l.mu.Unlock()
	time.Sleep(time.Millisecond) // a provider takes a moment; overlaps would show
	l.mu.Lock()
	delete(l.inFlight, req.EffectID)
	l.mu.Unlock()
	return providers.Result{}, nil
}

func TestReplicasShareWorkAndFireEachEffectOnce(t *testing.T) {
	t.Parallel()
	const effects = 2000
	db := testdb.New(t)
	ctx := context.Background()
	l := &ledger{inFlight: map[string]bool{}, sends: map[string]int{}, byReplica: map[int]int{}}
	ob, err := outbox.New(outbox.Config{Jobs: outbox.JobsInTransaction, Schema: db.Schema, Providers: []providers.Validator{&countingProvider{}}})
	require.NoError(t, err)

	keys := map[string]uuid.UUID{}
	for batch := 0; batch < effects/100; batch++ {
		err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			for i := 0; i < 100; i++ {
				res, err := ob.Enqueue(ctx, tx, outbox.Event{ID: uuid.New(), Type: "bench"},
					outbox.Effect{Kind: "noop.effect", Provider: "noop", Payload: json.RawMessage(`{}`)})
				if err != nil {
					return err
				}
				keys[res.Effects[0].Key] = res.Effects[0].ID
			}
			return nil
		})
		require.NoError(t, err)
	}

	for n := 1; n <= 3; n++ {
		d, err := newDispatcher(db.Pool, sideeffects.Config{
			Schema:            db.Schema,
			Providers:         []providers.Provider{&countingProvider{n: n, ledger: l}},
			Concurrency:       map[string]int{"noop": 10},
			FetchCooldown:     10 * time.Millisecond,
			FetchPollInterval: 50 * time.Millisecond,
			Logger:            slog.New(slog.NewTextHandler(io.Discard, nil)),
			TestOnly:          true,
		})
		require.NoError(t, err)
		require.NoError(t, d.Start(ctx))
		t.Cleanup(func() {
			stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = d.Stop(stopCtx)
		})
	}

	deadline := time.Now().Add(2 * time.Minute)
	for {
		var confirmed int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM `+db.Schema+`.side_effects WHERE state = 'confirmed'`).Scan(&confirmed))
		if confirmed == effects {
			break
		}
		require.True(t, time.Now().Before(deadline), "%d of %d confirmed after 2 minutes", confirmed, effects)
		time.Sleep(100 * time.Millisecond)
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	require.Zero(t, l.overlaps, "no effect was fired by two workers at the same time")
	require.Len(t, l.sends, effects, "every effect's key was sent")
	for key, n := range l.sends {
		require.Equal(t, 1, n, "effect %s fired %d times", keys[key], n)
	}
	total := 0
	for n := 1; n <= 3; n++ {
		require.Positive(t, l.byReplica[n], "replica %d did no work", n)
		total += l.byReplica[n]
	}
	require.Equal(t, effects, total)
	t.Logf("work per replica: %s", fmt.Sprint(l.byReplica))
}
