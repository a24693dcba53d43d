package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/internal/cli"
	"github.com/outboxd/outboxd/migrations"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/stripe"
	"github.com/outboxd/outboxd/providers/webhook"
	"github.com/outboxd/outboxd/sideeffects"
)

// The limits phase: a backlog committed before outboxd starts meets
// providers that throttle. A Stripe-like server allows 100 requests a
// second (a token bucket; 429 rate_limit without Retry-After, as Stripe
// answers) and a webhook receiver 50 a second (429 with Retry-After: 1),
// each bucket holding a fifth of a second: stricter than either provider
// is known to be. outboxd runs with its defaults for Stripe (the account's
// published 100/s) and, for the receiver, with --limit set to what the
// partner allows, then with no limit set (it learns from 429s).
const (
	limitsStripeRate  = 100
	limitsWebhookRate = 50
	// Each server's bucket holds this many seconds of its rate.
	limitsServerBurst = 0.2
	// The servers' answer time: Stripe's calls take tens of milliseconds.
	limitsStripeLatency  = 50 * time.Millisecond
	limitsWebhookLatency = 20 * time.Millisecond
	limitsStripeKey      = "sk_live_outboxdbench0000a1b2"
)

type limitsResult struct {
	Name     string `json:"name"`
	Replicas int    `json:"replicas"`
	// Shards, when set, is how many shards one process served.
	Shards   int    `json:"shards,omitempty"`
	Provider string `json:"provider"`
	// Limit is the server's; Configured what outboxd was given.
	Limit      float64 `json:"limit"`
	Configured string  `json:"configured"`
	Effects    int     `json:"effects"`
	Requests   int64   `json:"requests"`
	Throttled  int64   `json:"throttled"`
	// ThrottledShare is 429s over requests.
	ThrottledShare float64 `json:"throttled_share"`
	// AttemptsMean and AttemptsMax are side_effects.attempts of the
	// confirmed effects (429s are not attempts); RequestsMax the most
	// requests one effect took, 429s included.
	AttemptsMean float64 `json:"attempts_mean"`
	AttemptsMax  int     `json:"attempts_max"`
	RequestsMax  int     `json:"requests_max"`
	Failed       int     `json:"failed"`
	// ExecutedTwice counts keys the server accepted more than once.
	ExecutedTwice int     `json:"executed_twice"`
	Seconds       float64 `json:"seconds"`
	IdealSeconds  float64 `json:"ideal_seconds"`
	VsIdeal       float64 `json:"drain_vs_ideal"`
	// Achieved is effects per second over the limit; Max10s the most
	// accepted in any 10 s window over the limit's 10 s; MaxOffered1s
	// the most requests (429s too) in any second over the limit.
	Achieved     float64 `json:"achieved_share"`
	Max10s       float64 `json:"max_10s_share"`
	MaxOffered1s float64 `json:"max_offered_1s"`
	// Accepted and Refused are the server's answers in each second of
	// the drain: where the rate went.
	Accepted []int `json:"accepted_per_second"`
	Refused  []int `json:"refused_per_second"`
}

// limitedServer is a provider's side: a token bucket, and every request
// it saw.
type limitedServer struct {
	rate, burst float64
	latency     time.Duration
	keyHeader   string
	throttle    func(w http.ResponseWriter)
	accept      func(w http.ResponseWriter, n int64)

	mu       sync.Mutex
	tokens   float64
	last     time.Time
	requests []served
	accepted map[string]int
	n        atomic.Int64

	srv *http.Server
	url string
}

type served struct {
	at       time.Time
	key      string
	accepted bool
}

func (s *limitedServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	time.Sleep(s.latency)
	key := r.Header.Get(s.keyHeader)
	now := time.Now()
	s.mu.Lock()
	if !s.last.IsZero() {
		s.tokens = min(s.rate*s.burst, s.tokens+s.rate*now.Sub(s.last).Seconds())
	}
	s.last = now
	ok := s.tokens >= 1
	if ok {
		s.tokens--
		s.accepted[key]++
	}
	s.requests = append(s.requests, served{at: now, key: key, accepted: ok})
	s.mu.Unlock()
	if !ok {
		s.throttle(w)
		return
	}
	s.accept(w, s.n.Add(1))
}

func startLimited(s *limitedServer) (*limitedServer, error) {
	s.tokens, s.accepted = s.rate*s.burst, map[string]int{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 5 * time.Second}
	s.url = "http://" + ln.Addr().String()
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

func stripeLike() (*limitedServer, error) {
	return startLimited(&limitedServer{rate: limitsStripeRate, burst: limitsServerBurst, latency: limitsStripeLatency, keyHeader: "Idempotency-Key",
		throttle: func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte(`{"error": {"type": "invalid_request_error", "code": "rate_limit", "message": "Too many requests hit the API too quickly."}}`))
		},
		accept: func(w http.ResponseWriter, n int64) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = fmt.Fprintf(w, `{"id": "re_bench%d", "object": "refund", "status": "succeeded", "amount": 500, "currency": "eur"}`, n)
		}})
}

func receiverLike() (*limitedServer, error) {
	return startLimited(&limitedServer{rate: limitsWebhookRate, burst: limitsServerBurst, latency: limitsWebhookLatency, keyHeader: "webhook-id",
		throttle: func(w http.ResponseWriter) {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
		},
		accept: func(w http.ResponseWriter, _ int64) { w.WriteHeader(http.StatusNoContent) }})
}

// report sums up what the server saw for n effects drained in elapsed.
func (s *limitedServer) report(r *limitsResult, elapsed time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r.Requests = int64(len(s.requests))
	perKey := map[string]int{}
	var times []time.Time
	for _, q := range s.requests {
		perKey[q.key]++
		if !q.accepted {
			r.Throttled++
		}
		times = append(times, q.at)
	}
	for _, n := range perKey {
		r.RequestsMax = max(r.RequestsMax, n)
	}
	for _, n := range s.accepted {
		if n > 1 {
			r.ExecutedTwice++
		}
	}
	if r.Requests > 0 {
		r.ThrottledShare = float64(r.Throttled) / float64(r.Requests)
	}
	r.Seconds = elapsed.Seconds()
	r.IdealSeconds = float64(r.Effects) / r.Limit
	r.VsIdeal = r.Seconds / r.IdealSeconds
	r.Achieved = float64(r.Effects) / r.Seconds / r.Limit
	// Windows start at each request: the most in any 1 s (offered) and
	// any 10 s (accepted) window.
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	var acceptedAt []time.Time
	for _, q := range s.requests {
		if q.accepted {
			acceptedAt = append(acceptedAt, q.at)
		}
	}
	slices.SortFunc(acceptedAt, func(a, b time.Time) int { return a.Compare(b) })
	r.MaxOffered1s = float64(mostIn(times, time.Second)) / r.Limit
	if len(times) > 0 {
		t0 := times[0]
		for _, q := range s.requests {
			sec := int(q.at.Sub(t0) / time.Second)
			for len(r.Accepted) <= sec {
				r.Accepted, r.Refused = append(r.Accepted, 0), append(r.Refused, 0)
			}
			if q.accepted {
				r.Accepted[sec]++
			} else {
				r.Refused[sec]++
			}
		}
	}
	if len(acceptedAt) > 0 && acceptedAt[len(acceptedAt)-1].Sub(acceptedAt[0]) >= 10*time.Second {
		r.Max10s = float64(mostIn(acceptedAt, 10*time.Second)) / (r.Limit * 10)
	}
}

// mostIn is the most of sorted times in any window of length w.
func mostIn(times []time.Time, w time.Duration) int {
	best, j := 0, 0
	for i := range times {
		for times[i].Sub(times[j]) >= w {
			j++
		}
		best = max(best, i-j+1)
	}
	return best
}

func (s *limitedServer) close() { _ = s.srv.Close() }

// limits runs the phase: 1 and 3 replicas with the receiver's limit set,
// 3 replicas with none set, 3 shards served by one process with the
// receiver's limit set, and the cost of limits that do not bind.
func (b *bench) limits(ctx context.Context) ([]limitsResult, error) {
	var out []limitsResult
	for i, run := range []struct {
		replicas int
		webhook  bool // --limit set for the receiver
		shards   bool // one dispatcher for each of replicas shards
	}{{1, true, false}, {3, true, false}, {3, false, false}, {3, true, true}} {
		if b.s.LimitsRuns != "" && !strings.Contains(b.s.LimitsRuns, strconv.Itoa(i+1)) {
			continue
		}
		rs, err := b.limitsRun(ctx, run.replicas, run.webhook, run.shards)
		if err != nil {
			return out, err
		}
		out = append(out, rs...)
	}
	return out, nil
}

// limitsRun drains the backlog with k replicas of one database or, with
// shards, k dispatchers in one process, one for each of k shards (the
// bench's schema and k-1 of their own), each holding a k-th of the
// backlog, sharing the providers and the limits kept in the first shard,
// as outboxd run --shard-database serves them.
func (b *bench) limitsRun(ctx context.Context, k int, webhookLimit, shards bool) ([]limitsResult, error) {
	ns, nw := b.s.LimitsEffects, b.s.LimitsEffects/2
	schemas := slices.Repeat([]string{b.schema}, k)
	if shards {
		for i := 1; i < k; i++ {
			schema, drop, err := migrations.Temporary(ctx, b.pool, "outboxd_bench_shard")
			if err != nil {
				return nil, err
			}
			defer drop()
			schemas[i] = schema
		}
	}
	st, err := stripeLike()
	if err != nil {
		return nil, err
	}
	defer st.close()
	rc, err := receiverLike()
	if err != nil {
		return nil, err
	}
	defer rc.close()
	body, _ := json.Marshal(webhook.Payload{URL: rc.url + "/hook", Body: json.RawMessage(`{"type": "order.paid"}`)})
	home := b.schema
	homes := slices.Compact(slices.Clone(schemas))
	for i, schema := range homes {
		b.schema = schema
		// Each shard's part; the first takes what does not divide.
		ps, pw := ns/len(homes), nw/len(homes)
		if i == 0 {
			ps, pw = ns-ps*(len(homes)-1), nw-pw*(len(homes)-1)
		}
		err := b.seedEffects(ctx, ps, stripe.Name, `{"operation": "refund.create", "params": {"payment_intent": "pi_bench", "amount": 500}}`)
		if err == nil {
			err = b.seedEffects(ctx, pw, webhook.Name, string(body))
		}
		if err != nil {
			b.schema = home
			return nil, err
		}
	}
	b.schema = home
	hookKey := "webhook:" + rc.url[len("http://"):]
	configured := "none (429s only)"
	limits := map[string]float64{}
	if webhookLimit {
		limits[hookKey] = limitsWebhookRate
		configured = fmt.Sprintf("%d/s (--limit)", limitsWebhookRate)
	}
	var pools []*pgxpool.Pool
	var started []*sideeffects.Dispatcher
	stopAll := func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, d := range started {
			_ = d.Stop(stopCtx)
		}
		for _, p := range pools {
			p.Close()
		}
		started, pools = nil, nil
	}
	defer stopAll()
	ds := make([]*sideeffects.Dispatcher, k)
	var sp, wp providers.Provider
	var shared *sideeffects.SharedLimits
	for i := range ds {
		pool, err := cli.Connect(ctx, b.s.DatabaseURL, replicaConns)
		if err != nil {
			return nil, err
		}
		pools = append(pools, pool)
		// Replicas are processes of their own; a process serving shards
		// has one of each provider.
		if sp == nil || !shards {
			if sp, err = stripe.New(stripe.Config{APIKey: limitsStripeKey, APIBase: st.url}); err != nil {
				return nil, err
			}
			if wp, err = webhook.New(webhook.Config{Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
				AllowedNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}); err != nil {
				return nil, err
			}
		}
		if shards && shared == nil {
			shared = &sideeffects.SharedLimits{Pool: pool, Schema: schemas[0]}
		}
		// outboxd run's defaults: 100 Stripe workers, 400 webhook workers.
		if ds[i], err = sideeffects.NewDispatcher(pool, sideeffects.Config{
			Schema: schemas[i], Providers: []providers.Provider{sp, wp}, SharedLimits: shared,
			Concurrency:   map[string]int{stripe.Name: 100, webhook.Name: sideeffects.DefaultConcurrency},
			Limits:        limits,
			FetchCooldown: b.s.FetchCooldown, FetchPollInterval: b.s.FetchPollInterval, Logger: quiet,
			SweepInterval: b.s.SweepInterval,
		}); err != nil {
			return nil, err
		}
	}
	who := fmt.Sprintf("%d replica(s)", k)
	if shards {
		who = fmt.Sprintf("%d shards, one process", k)
	}
	name := who + ", limits"
	done := make(chan struct{})
	go progress(name, ns+nw, func() int { return int(st.n.Load() + rc.n.Load()) }, done)
	start := time.Now()
	var stripeDone, hookDone atomic.Int64
	for _, d := range ds {
		if err := d.Start(ctx); err != nil {
			close(done)
			return nil, err
		}
		started = append(started, d)
	}
	// Each provider's drain ends when its last effect is confirmed.
	deadline := time.Now().Add(10 * time.Minute)
	for stripeDone.Load() == 0 || hookDone.Load() == 0 {
		var sl, wl int
		for _, schema := range homes {
			var l1, l2 int
			if err := b.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE provider = 'stripe'), count(*) FILTER (WHERE provider = 'webhook')
				FROM `+schema+`.side_effects WHERE phase = 'live'`).Scan(&l1, &l2); err != nil {
				close(done)
				return nil, err
			}
			sl, wl = sl+l1, wl+l2
		}
		now := int64(time.Since(start))
		if sl == 0 {
			stripeDone.CompareAndSwap(0, now)
		}
		if wl == 0 {
			hookDone.CompareAndSwap(0, now)
		}
		if time.Now().After(deadline) {
			close(done)
			return nil, fmt.Errorf("%d stripe and %d webhook effects left after 10 minutes", sl, wl)
		}
		select {
		case <-ctx.Done():
			close(done)
			return nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
			// Not faster: the count reads every live effect, and at
			// 20 ms it cost the database 86 s of a 255 s drain
			// (pg_stat_statements), slowing what it measured.
		}
	}
	close(done)
	var out []limitsResult
	for _, p := range []struct {
		provider   string
		srv        *limitedServer
		n          int
		rate       float64
		configured string
		elapsed    time.Duration
	}{
		{stripe.Name, st, ns, limitsStripeRate, fmt.Sprintf("%d/s (Stripe's published, by default)", stripe.LiveRate), time.Duration(stripeDone.Load())},
		{webhook.Name, rc, nw, limitsWebhookRate, configured, time.Duration(hookDone.Load())},
	} {
		r := limitsResult{Name: who + ", " + p.provider, Replicas: k, Provider: p.provider,
			Limit: p.rate, Configured: p.configured, Effects: p.n}
		if shards {
			r.Replicas, r.Shards = 1, k
		}
		var union []string
		for _, schema := range homes {
			union = append(union, `SELECT attempts, state FROM `+schema+`.side_effects WHERE provider = $1`)
		}
		if err := b.pool.QueryRow(ctx, `SELECT coalesce(avg(attempts), 0), coalesce(max(attempts), 0), count(*) FILTER (WHERE state = 'failed')
			FROM (`+strings.Join(union, " UNION ALL ")+`) e`, p.provider).Scan(&r.AttemptsMean, &r.AttemptsMax, &r.Failed); err != nil {
			return nil, err
		}
		p.srv.report(&r, p.elapsed)
		out = append(out, r)
		fmt.Printf("  %s: %.2fx ideal, %.1f%% 429s, attempts %.2f (max %d), %d failed, %d executed twice\n",
			r.Name, r.VsIdeal, 100*r.ThrottledShare, r.AttemptsMean, r.AttemptsMax, r.Failed, r.ExecutedTwice)
	}
	// Stopped before the tables are emptied: TRUNCATE waits for the
	// running dispatchers' locks.
	stopAll()
	if _, err := b.pool.Exec(ctx, "TRUNCATE "+b.schema+".outboxd_limits"); err != nil {
		return nil, err
	}
	return out, b.clear(ctx)
}

// limitedNoop is the no-op provider with an account limit far above what
// it is offered: the limiter's whole cost, and no waiting.
type limitedNoop struct{ *noopProvider }

func (limitedNoop) Limit(json.RawMessage) providers.Limit {
	return providers.Limit{Key: "noop:account", Rate: 1_000_000}
}

// limitCost is no-op dispatch with a limit that does not bind against
// none, measured in alternating pairs.
type limitCost struct {
	N         int     `json:"n"`
	Off       float64 `json:"off_per_second"`
	On        float64 `json:"on_per_second"`
	OnVsOff   float64 `json:"on_vs_off"`
	Granted   int64   `json:"granted"`
	LeasesPer float64 `json:"effects_per_lease,omitempty"`
}

func (b *bench) limitsOverhead(ctx context.Context) ([]limitCost, error) {
	n := b.s.Effects / 2
	var out []limitCost
	for range 2 {
		off := &noopProvider{}
		r0, err := b.burnDown(ctx, "outboxd, no-op, no limit", n, off, `{}`, func() int { return int(off.calls.Load()) })
		if err != nil {
			return out, err
		}
		on := &noopProvider{}
		r1, err := b.burnDown(ctx, "outboxd, no-op, a limit of 1,000,000/s", n, limitedNoop{on}, `{}`, func() int { return int(on.calls.Load()) })
		if err != nil {
			return out, err
		}
		c := limitCost{N: n, Off: r0.PerSecond, On: r1.PerSecond, OnVsOff: r1.PerSecond / r0.PerSecond}
		if err := b.pool.QueryRow(ctx, "SELECT coalesce(sum(granted), 0) FROM "+b.schema+".outboxd_limits").Scan(&c.Granted); err != nil {
			return out, err
		}
		if _, err := b.pool.Exec(ctx, "TRUNCATE "+b.schema+".outboxd_limits"); err != nil {
			return out, err
		}
		out = append(out, c)
		fmt.Printf("  limit not binding: %.0f/s against %.0f/s without: %.2fx\n", c.On, c.Off, c.OnVsOff)
	}
	return out, nil
}
