package dispatchmetrics_test

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/sideeffects"
	"github.com/outboxd/outboxd/sideeffects/dispatchmetrics"
)

// ExampleNew measures a dispatcher: set the Metrics as
// sideeffects.Config.Metrics and scrape the registry (outboxd run serves
// it on /metrics).
func ExampleNew() {
	reg := prometheus.NewRegistry()
	m, err := dispatchmetrics.New(reg)
	if err != nil {
		panic(err)
	}
	_ = sideeffects.Config{Schema: "outboxd", Metrics: m}
	// What a worker tells it when an effect is confirmed.
	m.Observe(outboxtype.Transitioned{Effect: &sideeffects.EffectRow{Kind: "webhook.order_paid", Provider: "webhook"}, To: sideeffects.StateConfirmed})
	families, _ := reg.Gather()
	for _, f := range families {
		fmt.Println(f.GetName(), len(f.GetMetric()))
	}
	// Output:
	// outboxd_transitions_total 1
}
