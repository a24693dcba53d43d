package outboxtype

import "context"

// Tracer is told where outboxd's work begins and ends, as spans: an
// Enqueue call, the dispatch of an effect, each provider call, and the
// steps of the Idempotency-Key middleware and the inbox. Package
// outbox/outboxtrace implements it with OpenTelemetry; outboxd itself
// imports no tracing library, so an application that does not trace pays
// nothing for it. Calls come from many goroutines at once.
type Tracer interface {
	// Start starts a span as s describes, as a child of the span in ctx,
	// or, when s.Parent is set, of that remote span (then linked to the
	// span in ctx). It returns ctx carrying the new span.
	Start(ctx context.Context, s SpanStart) (context.Context, Span)
}

// SpanKind says what a span stands for, as OpenTelemetry's kinds do.
type SpanKind int

// The kinds of span outboxd starts.
const (
	SpanInternal SpanKind = iota
	// SpanClient is a call to another service (a provider).
	SpanClient
	// SpanConsumer is work on a message taken from a queue (a dispatch).
	SpanConsumer
	// SpanServer is an incoming request.
	SpanServer
)

// SpanStart describes a span to start.
type SpanStart struct {
	// Name is the span's name, for example "outboxd.dispatch".
	Name string
	Kind SpanKind
	// Parent, when set, is the W3C traceparent of the span to continue:
	// the one stored with an effect's event.
	Parent string
	// Attrs are the span's attributes: string, bool, int or int64 values.
	Attrs []Attr
}

// Attr is one span attribute.
type Attr struct {
	Key   string
	Value any
}

// Span is a started span.
type Span interface {
	// Traceparent is the span's W3C traceparent ("" when it records
	// nothing and carries no trace), to store with an event.
	Traceparent() string
	// LogAttrs are slog attributes that tie a log line to the span
	// (trace_id and span_id), or none.
	LogAttrs() []any
	// SetAttrs adds attributes.
	SetAttrs(attrs ...Attr)
	// End ends the span; a non-nil err marks it failed.
	End(err error)
}

// StartSpan starts a span with t, or returns ctx and a span that does
// nothing when t is nil.
func StartSpan(ctx context.Context, t Tracer, s SpanStart) (context.Context, Span) {
	if t == nil {
		return ctx, noSpan{}
	}
	return t.Start(ctx, s)
}

type noSpan struct{}

func (noSpan) Traceparent() string { return "" }
func (noSpan) LogAttrs() []any     { return nil }
func (noSpan) SetAttrs(...Attr)    {}
func (noSpan) End(error)           {}
