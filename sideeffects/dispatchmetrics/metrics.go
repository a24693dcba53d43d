// Package dispatchmetrics exposes what the dispatcher measures as Prometheus
// metrics: pass New's result as sideeffects.Config.Metrics, and register
// NewStateCollector for the effects table's gauges. It is a package of its
// own so that applications that only enqueue do not compile Prometheus.
package dispatchmetrics

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/sideeffects"
)

// Metrics are the dispatcher's Prometheus metrics. Labels are bounded:
// provider, kind (a developer-defined set) and outcome or state; never ids.
type Metrics struct {
	transitions  *prometheus.CounterVec
	callDuration *prometheus.HistogramVec
	inDoubt      *prometheus.CounterVec
	replays      *prometheus.CounterVec
	events       *prometheus.CounterVec
	deliveries   *prometheus.CounterVec
	drift        *prometheus.CounterVec
}

// New creates the dispatcher metrics and registers them with reg; a
// registration error (a metric registered twice) is returned, as
// outbox.Config.Registerer does.
func New(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outboxd_transitions_total",
			Help: "State transitions made by workers, by provider, kind and the state entered.",
		}, []string{"provider", "kind", "to"}),
		callDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "outboxd_provider_call_duration_seconds",
			Help:    "Duration of provider calls, by provider, kind and outcome (ok, retryable, permanent, in_doubt).",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"provider", "kind", "outcome"}),
		inDoubt: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outboxd_in_doubt_total",
			Help: "Provider calls whose outcome is unknown (timeout, reset after sending), by provider and kind.",
		}, []string{"provider", "kind"}),
		replays: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outboxd_provider_replays_total",
			Help: "Acknowledgements the provider served from its idempotency record (Stripe Idempotent-Replayed).",
		}, []string{"provider", "kind"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outboxd_provider_events_total",
			Help: "Provider events applied (after deduplication), by provider, the matched effect's kind (\"\" for none) and result: confirmed, drift, none.",
		}, []string{"provider", "kind", "result"}),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outboxd_deliveries_total",
			Help: "Mail delivery events (processed, deferred, delivered, bounce, dropped), by kind and status.",
		}, []string{"kind", "status"}),
		drift: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outboxd_drift_total",
			Help: "Disagreements between outboxd and a provider found in its events, by kind and reason (outboxctl drift lists them).",
		}, []string{"kind", "reason"}),
	}
	for _, c := range []prometheus.Collector{m.transitions, m.callDuration, m.inDoubt, m.replays, m.events, m.deliveries, m.drift} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("dispatcher metrics: %w", err)
		}
	}
	return m, nil
}

// Observe implements sideeffects.Observer: it counts transitions, provider
// calls and provider events, and ignores the rest.
func (m *Metrics) Observe(o outboxtype.Observation) {
	switch o := o.(type) {
	case outboxtype.Transitioned:
		m.transition(o.Effect, o.To)
	case outboxtype.ProviderCalled:
		m.providerCall(o.Effect, o.Duration, o.Err, o.Result)
	case outboxtype.ProviderEventApplied:
		m.providerEvent(o.Event, o.Result)
	}
}

func (m *Metrics) transition(e *sideeffects.EffectRow, to sideeffects.State) {
	m.transitions.WithLabelValues(e.Provider, e.Kind, string(to)).Inc()
}

func (m *Metrics) providerCall(e *sideeffects.EffectRow, d time.Duration, err error, res providers.Result) {
	outcome := "ok"
	if err != nil {
		class, _ := providers.Classify(err)
		outcome = class.String()
		if class == providers.ClassInDoubt {
			m.inDoubt.WithLabelValues(e.Provider, e.Kind).Inc()
		}
	} else if res.Replayed {
		m.replays.WithLabelValues(e.Provider, e.Kind).Inc()
	}
	m.callDuration.WithLabelValues(e.Provider, e.Kind, outcome).Observe(d.Seconds())
}

func (m *Metrics) providerEvent(ev providers.EventReport, res sideeffects.EventResult) {
	kind := ""
	if res.Effect != nil {
		kind = res.Effect.Kind
	}
	result := "none"
	switch {
	case res.Confirmed:
		result = "confirmed"
	case len(res.Drift) > 0:
		result = "drift"
	}
	m.events.WithLabelValues(ev.Provider, kind, result).Inc()
	if ev.Delivery != "" && res.Effect != nil {
		m.deliveries.WithLabelValues(kind, ev.Delivery).Inc()
	}
	for _, reason := range res.Drift {
		m.drift.WithLabelValues(kind, reason).Inc()
	}
}

// reader is what the collectors that read the database at scrape time
// share: the operator API over the schema, the scrape's time limit, and
// the series that says whether the read succeeded.
type reader struct {
	op      *sideeffects.Operator
	opErr   error
	up      *prometheus.Desc
	timeout time.Duration
}

func newReader(pool *pgxpool.Pool, schema string, up *prometheus.Desc) reader {
	op, err := sideeffects.NewOperator(pool, sideeffects.OperatorConfig{Schema: schema})
	return reader{op: op, opErr: err, up: up, timeout: 5 * time.Second}
}

// collect runs read within the scrape's time limit and reports up: 0 when
// the operator could not be built or read failed (what read sent before
// it failed stays sent), 1 otherwise.
func (r reader) collect(ch chan<- prometheus.Metric, read func(ctx context.Context) error) {
	ok := 0.0
	if r.opErr == nil {
		ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
		defer cancel()
		if read(ctx) == nil {
			ok = 1
		}
	}
	ch <- prometheus.MustNewConstMetric(r.up, prometheus.GaugeValue, ok)
}

// StateCollector reports the effects table itself at scrape time: how many
// effects are pending, fired and failed per kind, and how old the oldest of
// each is. Every replica reports the same database-wide values.
type StateCollector struct {
	reader
	count   *prometheus.Desc
	oldest  *prometheus.Desc
	blocked *prometheus.Desc
	waiting *prometheus.Desc
	oldestB *prometheus.Desc
	drift   *prometheus.Desc
}

// NewStateCollector builds a collector for the effects table in schema.
func NewStateCollector(pool *pgxpool.Pool, schema string) *StateCollector {
	return &StateCollector{
		reader: newReader(pool, schema, prometheus.NewDesc("outboxd_effects_scrape_ok",
			"1 if the effects table could be read for this scrape, 0 otherwise.", nil, nil)),
		count: prometheus.NewDesc("outboxd_effects",
			"Effects in a live or failed state, by state and kind.", []string{"state", "kind"}, nil),
		oldest: prometheus.NewDesc("outboxd_oldest_effect_age_seconds",
			"Age of the oldest effect in a state, by state and kind: since creation for pending and failed, since the last fire for fired.",
			[]string{"state", "kind"}, nil),
		blocked: prometheus.NewDesc("outboxd_blocked_ordering_keys",
			"Ordering keys with an effect waiting behind an earlier effect of the key that has not ended.", nil, nil),
		waiting: prometheus.NewDesc("outboxd_blocked_effects",
			"Effects waiting behind an earlier effect of their ordering key.", nil, nil),
		oldestB: prometheus.NewDesc("outboxd_oldest_blocked_effect_age_seconds",
			"Age of the oldest effect waiting behind an earlier effect of its ordering key (since created, or due).", nil, nil),
		drift: prometheus.NewDesc("outboxd_drift_unacknowledged",
			"Drift records no operator acknowledged (outboxctl drift ack): disagreements with a provider still to review.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *StateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.count
	ch <- c.oldest
	ch <- c.up
	ch <- c.blocked
	ch <- c.waiting
	ch <- c.oldestB
	ch <- c.drift
}

// Collect implements prometheus.Collector.
func (c *StateCollector) Collect(ch chan<- prometheus.Metric) {
	c.collect(ch, func(ctx context.Context) error {
		gauges, err := c.op.StateGauges(ctx)
		if err != nil {
			return err
		}
		for _, g := range gauges {
			ch <- prometheus.MustNewConstMetric(c.count, prometheus.GaugeValue, float64(g.Count), string(g.State), g.Kind)
			ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, g.OldestAge.Seconds(), string(g.State), g.Kind)
		}
		b, err := c.op.BlockedChains(ctx)
		if err != nil {
			return err
		}
		ch <- prometheus.MustNewConstMetric(c.blocked, prometheus.GaugeValue, float64(b.Keys))
		ch <- prometheus.MustNewConstMetric(c.waiting, prometheus.GaugeValue, float64(b.Effects))
		ch <- prometheus.MustNewConstMetric(c.oldestB, prometheus.GaugeValue, b.OldestAge.Seconds())
		drift, err := c.op.UnacknowledgedDrift(ctx)
		if err != nil {
			return err
		}
		ch <- prometheus.MustNewConstMetric(c.drift, prometheus.GaugeValue, float64(drift))
		return nil
	})
}

// DestinationCollector reports, at scrape time, what this process's
// per-destination gates hold back (the webhook provider's per-host cap and
// circuit breaker): requests in flight and waiting per destination, and
// whether its breaker is open. Only destinations the gate holds anything
// for are reported.
type DestinationCollector struct {
	reporters map[string]providers.DestinationReporter
	inFlight  *prometheus.Desc
	waiting   *prometheus.Desc
	open      *prometheus.Desc
}

// NewDestinationCollector collects from the providers that report their
// destinations (providers.DestinationReporter); others are skipped.
func NewDestinationCollector(ps ...providers.Provider) *DestinationCollector {
	c := &DestinationCollector{reporters: map[string]providers.DestinationReporter{},
		inFlight: prometheus.NewDesc("outboxd_destination_in_flight", "Requests in flight to a destination (this process).", []string{"provider", "host"}, nil),
		waiting:  prometheus.NewDesc("outboxd_destination_waiting", "Effects waiting for a slot of a destination at its cap (this process).", []string{"provider", "host"}, nil),
		open: prometheus.NewDesc("outboxd_destination_breaker_open",
			"1 while a destination's circuit breaker is open: it stopped answering and is left alone for a while (this process).", []string{"provider", "host"}, nil),
	}
	for _, p := range ps {
		if r, ok := p.(providers.DestinationReporter); ok {
			c.reporters[p.Name()] = r
		}
	}
	return c
}

// Describe implements prometheus.Collector.
func (c *DestinationCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.inFlight
	ch <- c.waiting
	ch <- c.open
}

// Collect implements prometheus.Collector.
func (c *DestinationCollector) Collect(ch chan<- prometheus.Metric) {
	for name, r := range c.reporters {
		for _, d := range r.Destinations() {
			open := 0.0
			if d.BreakerOpen {
				open = 1
			}
			ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(d.InFlight), name, d.Host)
			ch <- prometheus.MustNewConstMetric(c.waiting, prometheus.GaugeValue, float64(d.Waiting), name, d.Host)
			ch <- prometheus.MustNewConstMetric(c.open, prometheus.GaugeValue, open, name, d.Host)
		}
	}
}

// LimitCollector reports the rate limits at scrape time, as every replica
// shares them (the same values from each replica): each key's configured
// and current rate, the seconds left of a 429's pause, the 429s and the
// requests let through (counters: their rate is the achieved rate), and
// the effects waiting for it.
type LimitCollector struct {
	reader
	rate, current, paused, throttled, granted *prometheus.Desc
	waiting, oldestWait, windowAge            *prometheus.Desc
}

// NewLimitCollector builds a collector for the limits in schema.
func NewLimitCollector(pool *pgxpool.Pool, schema string) *LimitCollector {
	return NewSharedLimitCollector(pool, schema, nil)
}

// NewSharedLimitCollector is NewLimitCollector for limits kept in shared
// (sideeffects.SharedLimits; nil: with the effects); the waiting effects
// are schema's.
func NewSharedLimitCollector(pool *pgxpool.Pool, schema string, shared *sideeffects.SharedLimits) *LimitCollector {
	l := []string{"key"}
	op, err := sideeffects.NewOperator(pool, sideeffects.OperatorConfig{Schema: schema, SharedLimits: shared})
	return &LimitCollector{
		reader: reader{op: op, opErr: err, timeout: 5 * time.Second,
			up: prometheus.NewDesc("outboxd_limits_scrape_ok", "1 if the limits could be read for this scrape, 0 otherwise.", nil, nil)},
		rate:       prometheus.NewDesc("outboxd_limit_rate", "A limit key's configured rate, requests a second (keys with none are not reported).", l, nil),
		current:    prometheus.NewDesc("outboxd_limit_current_rate", "The rate a limit key may take now, lowered by 429s and climbing back (0: not limited).", l, nil),
		paused:     prometheus.NewDesc("outboxd_limit_paused_seconds", "Seconds left of the pause a 429 put on a limit key (0: not paused).", l, nil),
		throttled:  prometheus.NewDesc("outboxd_limit_throttled_total", "429s a limit key's provider answered, all replicas.", l, nil),
		granted:    prometheus.NewDesc("outboxd_limit_granted_total", "Requests a limit key let through, all replicas: its rate() is the achieved rate.", l, nil),
		waiting:    prometheus.NewDesc("outboxd_limit_waiting_effects", "Effects waiting for a limit key (a pause, or no token when due); waiting is not an attempt.", l, nil),
		oldestWait: prometheus.NewDesc("outboxd_limit_oldest_wait_seconds", "How long the effect waiting longest for a limit key has waited.", l, nil),
		windowAge: prometheus.NewDesc("outboxd_limit_waiting_key_window_age_seconds",
			"Age of the oldest key window among the effects waiting for a limit key (since the first request with its key; 0: none sent yet). Alert well before the provider's key window (Stripe: 24h): past it the effect fails for reconciliation.", l, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *LimitCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.rate, c.current, c.paused, c.throttled, c.granted, c.waiting, c.oldestWait, c.windowAge, c.up} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *LimitCollector) Collect(ch chan<- prometheus.Metric) {
	c.collect(ch, func(ctx context.Context) error {
		limits, err := c.op.Limits(ctx)
		if err != nil {
			return err
		}
		now := time.Now()
		for _, l := range limits {
			if l.Rate != nil {
				ch <- prometheus.MustNewConstMetric(c.rate, prometheus.GaugeValue, *l.Rate, l.Key)
			}
			paused := 0.0
			if l.PausedUntil != nil {
				paused = max(0, l.PausedUntil.Sub(now).Seconds())
			}
			wait := 0.0
			if l.WaitingSince != nil {
				wait = now.Sub(*l.WaitingSince).Seconds()
			}
			ch <- prometheus.MustNewConstMetric(c.current, prometheus.GaugeValue, l.CurrentRate, l.Key)
			ch <- prometheus.MustNewConstMetric(c.paused, prometheus.GaugeValue, paused, l.Key)
			ch <- prometheus.MustNewConstMetric(c.throttled, prometheus.CounterValue, float64(l.Throttles), l.Key)
			ch <- prometheus.MustNewConstMetric(c.granted, prometheus.CounterValue, float64(l.Granted), l.Key)
			ch <- prometheus.MustNewConstMetric(c.waiting, prometheus.GaugeValue, float64(l.WaitingEffects), l.Key)
			ch <- prometheus.MustNewConstMetric(c.oldestWait, prometheus.GaugeValue, wait, l.Key)
			age := 0.0
			if l.OldestKeyWindowFrom != nil && l.WaitingEffects > 0 {
				age = now.Sub(*l.OldestKeyWindowFrom).Seconds()
			}
			ch <- prometheus.MustNewConstMetric(c.windowAge, prometheus.GaugeValue, age, l.Key)
		}
		return nil
	})
}

// DefaultTenantSeries is how many tenants a TenantCollector reports one by
// one when it is given no number.
const DefaultTenantSeries = 20

// TenantCollector reports the tenants' queues (fair shares) at scrape
// time, as every replica shares them (the same values from each). By
// provider, over every tenant: how many tenants have due effects waiting
// for a place in their window, those effects, and the longest wait. One
// by one, for the tenants with the most effects waiting only (so that
// tenants cannot grow the series without bound): each one's waiting
// effects, longest wait and effects in flight. `outboxctl tenants` lists
// them all.
type TenantCollector struct {
	reader
	top                         int
	tenants, queued, oldest     *prometheus.Desc
	tQueued, tOldest, tInFlight *prometheus.Desc
}

// NewTenantCollector builds a collector for the tenants' queues in
// schema, reporting top tenants one by one (DefaultTenantSeries if 0).
func NewTenantCollector(pool *pgxpool.Pool, schema string, top int) *TenantCollector {
	p, pt := []string{"provider"}, []string{"provider", "tenant"}
	return &TenantCollector{top: cmp.Or(top, DefaultTenantSeries),
		reader:  newReader(pool, schema, prometheus.NewDesc("outboxd_tenants_scrape_ok", "1 if the tenants' queues could be read for this scrape, 0 otherwise.", nil, nil)),
		tenants: prometheus.NewDesc("outboxd_tenants_waiting", "Tenants with effects due and waiting for a place in their window, all tenants.", p, nil),
		queued:  prometheus.NewDesc("outboxd_tenants_queued_effects", "Effects due and waiting for a place in their tenant's window, all tenants; waiting is not an attempt.", p, nil),
		oldest:  prometheus.NewDesc("outboxd_tenants_oldest_wait_seconds", "How long the effect waiting longest for a place in its tenant's window has waited (since it was due), all tenants.", p, nil),
		tQueued: prometheus.NewDesc("outboxd_tenant_queued_effects", "A tenant's effects due and waiting for a place in its window (the tenants with the most).", pt, nil),
		tOldest: prometheus.NewDesc("outboxd_tenant_oldest_wait_seconds", "How long a tenant's effect waiting longest for a place in its window has waited (the tenants with the most waiting).", pt, nil),
		tInFlight: prometheus.NewDesc("outboxd_tenant_in_flight_effects",
			"A tenant's effects given a job and not ended: the part of its window in use (the tenants with the most waiting).", pt, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *TenantCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.tenants, c.queued, c.oldest, c.tQueued, c.tOldest, c.tInFlight, c.up} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *TenantCollector) Collect(ch chan<- prometheus.Metric) {
	c.collect(ch, func(ctx context.Context) error {
		totals, err := c.op.TenantTotals(ctx)
		if err != nil {
			return err
		}
		tenants, err := c.op.Tenants(ctx, c.top)
		if err != nil {
			return err
		}
		now := time.Now()
		since := func(t *time.Time) float64 {
			if t == nil {
				return 0
			}
			return max(0, now.Sub(*t).Seconds())
		}
		for _, t := range totals {
			ch <- prometheus.MustNewConstMetric(c.tenants, prometheus.GaugeValue, float64(t.Tenants), t.Provider)
			ch <- prometheus.MustNewConstMetric(c.queued, prometheus.GaugeValue, float64(t.Queued), t.Provider)
			ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, since(t.OldestQueued), t.Provider)
		}
		for _, t := range tenants {
			ch <- prometheus.MustNewConstMetric(c.tQueued, prometheus.GaugeValue, float64(t.Queued), t.Provider, t.Tenant)
			ch <- prometheus.MustNewConstMetric(c.tOldest, prometheus.GaugeValue, since(t.OldestQueued), t.Provider, t.Tenant)
			ch <- prometheus.MustNewConstMetric(c.tInFlight, prometheus.GaugeValue, float64(t.InFlight), t.Provider, t.Tenant)
		}
		return nil
	})
}
