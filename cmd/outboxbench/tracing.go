package main

import (
	"context"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxd/outboxd/outbox/outboxtrace"
)

// benchTracing is what the traced rows trace with: OpenTelemetry's SDK,
// every trace sampled (the dearest case), spans batched to an exporter
// that drops them, so the rows measure outboxd's spans and the SDK, not
// a collector.
type benchTracing struct {
	tp     *sdktrace.TracerProvider
	tracer *outboxtrace.Tracer
}

func newBenchTracing() *benchTracing {
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	return &benchTracing{tp: tp, tracer: outboxtrace.New(tp)}
}

// request returns ctx inside a span standing for the application's
// request, as an instrumented HTTP handler would give Enqueue, and its end.
func (t *benchTracing) request(ctx context.Context) (context.Context, func()) {
	ctx, span := t.tp.Tracer("bench").Start(ctx, "POST /orders", trace.WithSpanKind(trace.SpanKindServer))
	return ctx, func() { span.End() }
}
