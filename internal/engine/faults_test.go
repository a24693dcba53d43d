package engine_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/engine"
	"github.com/outboxd/outboxd/internal/store"
	"github.com/outboxd/outboxd/internal/testdb"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/webhook"
	"github.com/outboxd/outboxd/sideeffects"
)

// faultyReceiver answers like a bad day in production: timeouts, resets,
// slow answers, 5xx storms and 429s with Retry-After, chosen by a seeded
// generator. It records the webhook-id of every request it read.
type faultyReceiver struct {
	mu        sync.Mutex
	rng       *rand.Rand
	seen      map[string]int
	throttled map[string]int
}

func (f *faultyReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	f.mu.Lock()
	f.seen[r.Header.Get("webhook-id")]++
	roll := f.rng.IntN(100)
	f.mu.Unlock()
	switch {
	case roll < 15: // hang past the client's timeout: in doubt
		<-r.Context().Done()
	case roll < 25: // reset the connection after reading the request: in doubt
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close()
				return
			}
		}
		w.WriteHeader(http.StatusBadGateway)
	case roll < 40: // 5xx storm
		w.WriteHeader(http.StatusServiceUnavailable)
	case roll < 50: // throttled: pauses the whole destination (LimitPause)
		f.mu.Lock()
		f.throttled[r.Header.Get("webhook-id")]++
		f.mu.Unlock()
		w.WriteHeader(http.StatusTooManyRequests)
	case roll < 60: // slow but within the timeout
		time.Sleep(100 * time.Millisecond)
		w.WriteHeader(http.StatusNoContent)
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

func TestProviderFaultsEndConfirmedOrFailedWithReason(t *testing.T) {
	t.Parallel()
	const n = 200
	db := testdb.New(t)
	ctx := context.Background()
	recv := &faultyReceiver{rng: rand.New(rand.NewPCG(42, 7)), seen: map[string]int{}, throttled: map[string]int{}}
	srv := httptest.NewServer(recv)
	t.Cleanup(srv.Close)
	loop := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	p, err := webhook.New(webhook.Config{Secret: secret, AllowedNetworks: loop, Timeout: 300 * time.Millisecond})
	require.NoError(t, err)
	ob, err := outbox.New(outbox.Config{Jobs: outbox.JobsInTransaction, Schema: db.Schema, Providers: []providers.Validator{webhook.Schema{AllowedNetworks: loop}}})
	require.NoError(t, err)
	keys := map[uuid.UUID]string{}
	err = pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		for range n {
			res, err := ob.Enqueue(ctx, tx, outbox.Event{ID: uuid.New(), Type: "t"}, outbox.EffectOf("webhook.x", webhook.Payload{URL: srv.URL, Body: json.RawMessage(`{}`)}))
			if err != nil {
				return err
			}
			keys[res.Effects[0].ID] = res.Effects[0].Key
		}
		return nil
	})
	require.NoError(t, err)

	policy := outboxtype.RetryPolicy{MaxAttempts: 8, BaseDelay: 20 * time.Millisecond, MaxDelay: 200 * time.Millisecond}
	d, err := newDispatcher(db.Pool, sideeffects.Config{
		Schema: db.Schema, Providers: []providers.Provider{p}, Concurrency: map[string]int{"webhook": 20},
		Retry: policy, FetchCooldown: 10 * time.Millisecond, FetchPollInterval: 50 * time.Millisecond,
		// Every 429 pauses the one destination and lowers its rate;
		// short pauses and a configured rate to climb back to keep the
		// test's time in the scale of its retry schedule.
		LimitPause: 20 * time.Millisecond,
		Limits:     map[string]float64{"webhook:" + strings.TrimPrefix(srv.URL, "http://"): 1000},
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)), TestOnly: true,
	})
	require.NoError(t, err)
	require.NoError(t, d.Start(ctx))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = d.Stop(stopCtx)
	})

	// The documented schedule bounds how long this can take: at most 8
	// attempts, each at most the 300ms timeout plus a 200ms delay, and
	// 429s that pause the destination (not counted as attempts): about
	// 10 s here alone. The bound is a liveness check, not a timing: three
	// minutes leaves room for `go test -race ./...` on a loaded 2-core
	// box, where it once ran out at one.
	deadline := time.Now().Add(3 * time.Minute)
	for {
		var live int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM `+db.Schema+`.side_effects WHERE state IN ('pending', 'fired')`).Scan(&live))
		if live == 0 {
			break
		}
		if !time.Now().Before(deadline) {
			// What is left, and the limit, for the failure's log.
			rows, _ := db.Pool.Query(ctx, `SELECT e.state || ' att=' || e.attempts || ' tot=' || e.total_attempts || ' wait=' || coalesce(e.waiting_for,'-') || ' next=' || coalesce(e.next_attempt_at::text,'-') || ' err=' || coalesce(e.last_error,'-') || ' job=' || coalesce((SELECT string_agg(j.state::text || ' ' || j.scheduled_at::text || ' ' || coalesce(j.errors::text,''), ';') FROM `+db.Schema+`.river_job j WHERE j.args->>'effect_id' = e.id::text), 'none') FROM `+db.Schema+`.side_effects e WHERE state IN ('pending','fired')`)
			for rows.Next() {
				var x string
				_ = rows.Scan(&x)
				t.Log(x, " now=", time.Now())
			}
			rows.Close()
			lr, _ := store.NewStore(db.Schema).Limits(ctx, db.Pool)
			for _, r := range lr {
				t.Logf("limit %+v eff=%v rate=%v cur=%v", *r, engine.EffectiveRate(r), rateOrNone(r.Rate), rateOrNone(r.CurrentRate))
			}
			t.Logf("local %+v", d.Limits())
		}
		require.True(t, time.Now().Before(deadline), "%d effects still live after three minutes", live)
		time.Sleep(50 * time.Millisecond)
	}
	st := store.NewStore(db.Schema)
	counts := map[outboxtype.State]int{}
	for id, key := range keys {
		e, err := st.Get(ctx, db.Pool, id)
		require.NoError(t, err)
		counts[e.State]++
		switch e.State {
		case outboxtype.StateConfirmed:
			require.LessOrEqual(t, e.Attempts, policy.MaxAttempts)
		case outboxtype.StateFailed:
			require.Contains(t, deref(e.LastError), "retries exhausted after 8 attempts", "a failure says why")
		default:
			t.Fatalf("effect %s ended %s", id, e.State)
		}
		recv.mu.Lock()
		sent, throttled := recv.seen[key], recv.throttled[key]
		recv.mu.Unlock()
		require.Positive(t, sent, "effect %s was never sent", id)
		// Go's HTTP client re-sends a request carrying an Idempotency-Key
		// once by itself when a reused connection dies before the answer;
		// the re-send has the same key, so an attempt is at most two sends.
		// A 429 is not an attempt.
		require.LessOrEqual(t, sent-throttled, 2*policy.MaxAttempts, "effect %s sent more often than its attempts allow", id)
	}
	recv.mu.Lock()
	defer recv.mu.Unlock()
	for key := range recv.seen {
		found := false
		for _, k := range keys {
			found = found || k == key
		}
		require.True(t, found, "a request carried key %s, which is no effect's", key)
	}
	t.Logf("outcomes: %v; requests: %d for %d effects", counts, sumValues(recv.seen), n)
	require.Greater(t, counts[outboxtype.StateConfirmed], n*9/10, "with 40%% good answers nearly all effects get through")
}

func sumValues(m map[string]int) int {
	total := 0
	for _, v := range m {
		total += v
	}
	return total
}

// rateOrNone is a limit's rate for a log line, -1 when it has none.
func rateOrNone(f *float64) float64 {
	if f == nil {
		return -1
	}
	return *f
}
