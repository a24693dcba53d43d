package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/internal/cli"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/stripe"
	"github.com/outboxd/outboxd/sideeffects"
)

// The noisy-tenant row of the limits phase: tenant A has a backlog of
// refunds (committed before outboxd starts) against the Stripe-like server
// (100/s), and tenant B commits 5 refunds a second while A drains. B's
// commit -> call is measured from its commit to the server's first request
// with its key. Once with tenants (outboxd's default window), once without
// (the same effects, no tenant: River's order, oldest first).

type noisyResult struct {
	Name    string `json:"name"`
	Tenants bool   `json:"tenants"`
	Backlog int    `json:"backlog"`
	// BRate is B's effects a second, for Seconds.
	BRate     float64 `json:"b_rate"`
	Seconds   float64 `json:"seconds"`
	BEnqueued int     `json:"b_enqueued"`
	// BServed counts B's effects called within Seconds plus 5 s.
	BServed int           `json:"b_served"`
	P50     time.Duration `json:"p50"`
	P99     time.Duration `json:"p99"`
	Max     time.Duration `json:"max"`
	// AAccepted is A's requests the server accepted a second meanwhile.
	AAccepted float64 `json:"a_accepted_per_s"`
	Limit     float64 `json:"limit"`
}

const noisyBRate = 5

func (b *bench) noisyTenants(ctx context.Context) ([]noisyResult, error) {
	var out []noisyResult
	for _, tenants := range []bool{true, false} {
		d := b.s.NoisyDuration
		if !tenants {
			// Without tenants B is served after A's backlog: a shorter
			// run says so as well.
			d = min(d, 30*time.Second)
		}
		r, err := b.noisyRun(ctx, tenants, d)
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, nil
}

// seedTenant writes n refunds of tenant (none: "") committed before outboxd
// starts: with a tenant they join its queue (the trigger), without one
// they get River jobs as seedEffects gives them.
func (b *bench) seedTenant(ctx context.Context, n int, tenant, payload string) error {
	if tenant == "" {
		return b.seedEffects(ctx, n, stripe.Name, payload)
	}
	_, err := b.pool.Exec(ctx, `
WITH ev AS (
	INSERT INTO `+b.schema+`.outbox_events (id, event_type, payload)
	SELECT gen_random_uuid(), 'bench', '{}' FROM generate_series(1, $1)
	RETURNING id)
INSERT INTO `+b.schema+`.side_effects (id, source_id, kind, provider, payload, tenant, waiting_for, waiting_since)
SELECT `+b.schema+`.outboxd_effect_id(id, 'bench.effect'), id, 'bench.effect', $2, $3::jsonb, $4, 'turn:' || $4, now() FROM ev`, n, stripe.Name, payload, tenant)
	if err != nil {
		return err
	}
	return b.vacuum(ctx)
}

func (b *bench) noisyRun(ctx context.Context, tenants bool, d time.Duration) (noisyResult, error) {
	r := noisyResult{Tenants: tenants, Backlog: b.s.NoisyBacklog, BRate: noisyBRate, Limit: limitsStripeRate, Name: "without tenants"}
	tenantA, tenantB := "", ""
	if tenants {
		tenantA, tenantB, r.Name = "tenant-a", "tenant-b", "with tenants (window 32)"
	}
	st, err := stripeLike()
	if err != nil {
		return r, err
	}
	defer st.close()
	refund := `{"operation": "refund.create", "params": {"payment_intent": "pi_bench", "amount": 500}}`
	if err := b.seedTenant(ctx, b.s.NoisyBacklog, tenantA, refund); err != nil {
		return r, err
	}
	pool, err := cli.Connect(ctx, b.s.DatabaseURL, replicaConns)
	if err != nil {
		return r, err
	}
	defer pool.Close()
	sp, err := stripe.New(stripe.Config{APIKey: limitsStripeKey, APIBase: st.url})
	if err != nil {
		return r, err
	}
	disp, err := sideeffects.NewDispatcher(pool, sideeffects.Config{
		Schema: b.schema, Providers: []providers.Provider{sp}, Concurrency: map[string]int{stripe.Name: 100},
		FetchCooldown: b.s.FetchCooldown, FetchPollInterval: b.s.FetchPollInterval, Logger: quiet,
	})
	if err != nil {
		return r, err
	}
	// A job per effect, as in every earlier round of these figures.
	ob, err := outbox.New(outbox.Config{Schema: b.schema, Jobs: outbox.JobsInTransaction})
	if err != nil {
		return r, err
	}
	if err := disp.Start(ctx); err != nil {
		return r, err
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = disp.Stop(sctx)
		}
	}
	defer stop()
	fmt.Printf("  noisy tenant, %s: A's backlog %d, B %d/s for %s\n", r.Name, b.s.NoisyBacklog, noisyBRate, d)
	// B commits at its rate while A drains.
	committed := map[string]time.Time{}
	start := time.Now()
	tick := time.NewTicker(time.Second / noisyBRate)
	for time.Since(start) < d {
		select {
		case <-ctx.Done():
			tick.Stop()
			return r, ctx.Err()
		case <-tick.C:
		}
		var key string
		err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			res, err := ob.Enqueue(ctx, tx, outbox.Event{ID: uuid.New(), Type: "refund.requested", Tenant: tenantB},
				outbox.Effect{Kind: "stripe.refund", Provider: stripe.Name, Payload: json.RawMessage(refund)})
			if err == nil {
				key = res.Effects[0].Key
			}
			return err
		})
		if err != nil {
			tick.Stop()
			return r, err
		}
		committed[key] = time.Now()
	}
	tick.Stop()
	elapsed := time.Since(start)
	// B's last effects get up to five seconds to be called.
	for wait := time.Now().Add(5 * time.Second); time.Now().Before(wait); time.Sleep(50 * time.Millisecond) {
		if st.calledAll(committed) {
			break
		}
	}
	stop()

	st.mu.Lock()
	first := map[string]time.Time{}
	aAccepted := 0
	for _, q := range st.requests {
		if _, ok := committed[q.key]; ok {
			if _, seen := first[q.key]; !seen {
				first[q.key] = q.at
			}
			continue
		}
		if q.accepted && q.at.Sub(start) <= elapsed {
			aAccepted++
		}
	}
	st.mu.Unlock()
	var lat []time.Duration
	for key, at := range committed {
		if f, ok := first[key]; ok {
			lat = append(lat, f.Sub(at))
		}
	}
	slices.Sort(lat)
	r.Seconds, r.BEnqueued, r.BServed = elapsed.Seconds(), len(committed), len(lat)
	r.AAccepted = float64(aAccepted) / elapsed.Seconds()
	if len(lat) > 0 {
		r.P50, r.P99, r.Max = lat[len(lat)/2], lat[min(len(lat)-1, len(lat)*99/100)], lat[len(lat)-1]
	}
	fmt.Printf("  noisy tenant, %s: B %d of %d called, p50 %s p99 %s max %s; A %.0f/s accepted\n", r.Name, r.BServed, r.BEnqueued,
		r.P50.Round(time.Millisecond), r.P99.Round(time.Millisecond), r.Max.Round(time.Millisecond), r.AAccepted)
	if _, err := b.pool.Exec(ctx, "TRUNCATE "+b.schema+".outboxd_limits"); err != nil {
		return r, err
	}
	return r, b.clear(ctx)
}

// calledAll reports whether the server saw a request for each key.
func (s *limitedServer) calledAll(keys map[string]time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := 0
	for _, q := range s.requests {
		if _, ok := keys[q.key]; ok {
			seen++
		}
	}
	return seen >= len(keys)
}
