// Package outboxmetrics counts Enqueue results as the Prometheus counter
// outboxd_enqueue_total{result}: pass New's result as
// outbox.Config.Observer. It is a package of its own so that applications
// without Prometheus do not compile it.
package outboxmetrics

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outboxd/outboxd/outbox"
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

// Enqueued implements outbox.Observer.
func (m *Metrics) Enqueued(result string) { m.calls.WithLabelValues(result).Inc() }
