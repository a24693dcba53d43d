package outboxmetrics_test

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/outbox/outboxmetrics"
	"github.com/outboxd/outboxd/outboxtype"
)

// ExampleNew counts Enqueue calls by result: set the Metrics as
// outbox.Config.Observer and scrape the registry.
func ExampleNew() {
	reg := prometheus.NewRegistry()
	m, err := outboxmetrics.New(reg)
	if err != nil {
		panic(err)
	}
	_ = outbox.Config{Schema: "outboxd", Observer: m}
	// What Enqueue tells it: one new event, then a replay of it.
	m.Observe(outboxtype.Enqueued{Result: outbox.ResultNew})
	m.Observe(outboxtype.Enqueued{Result: outbox.ResultDuplicate})
	families, _ := reg.Gather()
	for _, f := range families {
		for _, metric := range f.GetMetric() {
			fmt.Println(f.GetName(), metric.GetLabel()[0].GetValue(), metric.GetCounter().GetValue())
		}
	}
	// Output:
	// outboxd_enqueue_total duplicate 1
	// outboxd_enqueue_total new 1
}
