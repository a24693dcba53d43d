// Package outboxmetrics counts Enqueue results as the Prometheus counter
// outboxd_enqueue_total{result} (pass New's result as
// outbox.Config.Observer) and the Idempotency-Key middleware's outcomes as
// outboxd_idempotency_requests_total{outcome} (NewIdempotency, for
// idempotency.Config.Observer). It is a package of its own so that applications
// without Prometheus do not compile it.
package outboxmetrics

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/outbox/idempotency"
	"github.com/outboxd/outboxd/outboxtype"
)

// Metrics implements outbox.Observer.
type Metrics struct {
	calls *prometheus.CounterVec
}

var _ outbox.Observer = (*Metrics)(nil)

// New creates the counter and registers it with reg; a registration error
// (registered twice) is returned.
func New(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{calls: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outboxd_enqueue_total",
		Help: "Enqueue calls by result: new (wrote to the caller's transaction, committed or not), duplicate (replay, nothing written), conflict, invalid.",
	}, []string{"result"})}
	if err := reg.Register(m.calls); err != nil {
		return nil, fmt.Errorf("outboxmetrics: %w", err)
	}
	return m, nil
}

// Observe implements outbox.Observer: it counts outboxtype.Enqueued.
func (m *Metrics) Observe(o outboxtype.Observation) {
	if e, ok := o.(outboxtype.Enqueued); ok {
		m.calls.WithLabelValues(e.Result).Inc()
	}
}

// Idempotency counts the Idempotency-Key middleware's outcomes as
// outboxd_idempotency_requests_total{outcome}: pass NewIdempotency's result
// as idempotency.Config.Observer.
type Idempotency struct {
	requests *prometheus.CounterVec
}

var _ idempotency.Observer = (*Idempotency)(nil)

// NewIdempotency creates the counter, with every outcome at zero, and
// registers it with reg.
func NewIdempotency(reg prometheus.Registerer) (*Idempotency, error) {
	m := &Idempotency{requests: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outboxd_idempotency_requests_total",
		Help: "Requests carrying an idempotency key by outcome: executed, replayed, in_flight (409), fingerprint_mismatch (422), invalid (4xx), rolled_back (5xx, panic or failed commit: nothing stored).",
	}, []string{"outcome"})}
	for _, o := range []idempotency.Outcome{idempotency.Executed, idempotency.Replayed, idempotency.InFlight,
		idempotency.FingerprintMismatch, idempotency.Invalid, idempotency.RolledBack} {
		m.requests.WithLabelValues(string(o))
	}
	if err := reg.Register(m.requests); err != nil {
		return nil, fmt.Errorf("outboxmetrics: %w", err)
	}
	return m, nil
}

// Observe implements idempotency.Observer: it counts outboxtype.KeyRequest.
func (m *Idempotency) Observe(o outboxtype.Observation) {
	if r, ok := o.(outboxtype.KeyRequest); ok {
		m.requests.WithLabelValues(r.Outcome).Inc()
	}
}
