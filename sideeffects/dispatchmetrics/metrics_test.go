package dispatchmetrics_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/sideeffects"
	"github.com/outboxd/outboxd/sideeffects/dispatchmetrics"
)

// Provider events are counted by result, mail deliveries by status, and
// drift by reason, with the matched effect's kind.
func TestProviderEventsDeliveriesAndDriftAreCounted(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := dispatchmetrics.New(reg)
	require.NoError(t, err)
	mail := &sideeffects.EffectRow{Kind: "email.receipt", Provider: "sendgrid"}
	m.Observe(outboxtype.ProviderEventApplied{Event: providers.EventReport{Provider: "sendgrid", Delivery: "bounce"}, Result: sideeffects.EventResult{Effect: mail}})
	m.Observe(outboxtype.ProviderEventApplied{Event: providers.EventReport{Provider: "sendgrid", Delivery: "processed"}, Result: sideeffects.EventResult{Effect: mail, Confirmed: true}})
	m.Observe(outboxtype.ProviderEventApplied{Event: providers.EventReport{Provider: "stripe"}, Result: sideeffects.EventResult{Drift: []string{"unknown_key"}}})

	require.InDelta(t, 1, testutil.ToFloat64(counter(t, reg, "outboxd_provider_events_total", "result", "confirmed")), 0)
	require.InDelta(t, 1, testutil.ToFloat64(counter(t, reg, "outboxd_provider_events_total", "result", "drift")), 0)
	require.InDelta(t, 1, testutil.ToFloat64(counter(t, reg, "outboxd_deliveries_total", "status", "bounce")), 0)
	require.InDelta(t, 1, testutil.ToFloat64(counter(t, reg, "outboxd_drift_total", "reason", "unknown_key")), 0)
}

// counter sums the series of name whose label has value.
func counter(t *testing.T, reg *prometheus.Registry, name, label, value string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "sum"})
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, mt := range mf.GetMetric() {
			for _, l := range mt.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					g.Add(mt.GetCounter().GetValue())
				}
			}
		}
	}
	return g
}
