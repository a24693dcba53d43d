// Package outboxtrace traces outboxd with OpenTelemetry: give its Tracer
// to outbox.Config.Tracer (Enqueue), sideeffects.Config.Tracer (dispatch
// and provider calls) and idempotency.Config.Tracer, and InboxTrace of it
// to inbox.Config.Trace,
// and the enqueuing request, its Enqueue, the dispatch of each effect and
// each provider call form one trace. The span context of Enqueue is stored
// with the event (its W3C traceparent), so a dispatch in another process,
// a retry an hour later or a re-fire after a crash continues that trace.
//
// What spans carry, exactly: the enqueue span the event's type, the number
// of effects and the result; the dispatch and provider-call spans the
// effect's id, kind, provider, attempt, total attempts, the key's first 12
// characters (which outboxctl and the web view take), the outcome class,
// the provider's reference and whether the provider replayed; the
// idempotency spans the route, method and outcome; the inbox span the
// source, message id and whether it was a duplicate. A failed span's
// status is the error's class and, for a provider's HTTP answer, its
// status line (providers.Summary), never the answer's body. Never a
// payload, a secret, a whole idempotency key, nor the event id that with
// the kind would give the key.
//
// The package uses OpenTelemetry's API only; the application (or
// outboxd run, from the OTEL_* environment variables) sets up the SDK
// and the exporter.
package outboxtrace

import (
	"context"
	"log/slog"

	"github.com/riverqueue/river/rivertype"
	"github.com/riverqueue/rivercontrib/otelriver"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/providers"
)

// instrumentation is the tracer's name.
const instrumentation = "github.com/outboxd/outboxd"

// Tracer implements outboxtype.Tracer with an OpenTelemetry tracer.
type Tracer struct {
	tracer trace.Tracer
}

var _ outboxtype.Tracer = (*Tracer)(nil)

// New returns a Tracer that starts spans with tp; nil uses the global
// TracerProvider (otel.GetTracerProvider), looked up at each span so one
// set later is used.
func New(tp trace.TracerProvider) *Tracer {
	if tp == nil {
		return &Tracer{}
	}
	return &Tracer{tracer: tp.Tracer(instrumentation)}
}

// RiverMiddleware is River's own OpenTelemetry middleware (otelriver) for
// the dispatcher's River client (sideeffects.Config.RiverMiddleware): a
// span per job worked and River's metrics. outboxd's dispatch span links
// to River's job span and continues the enqueuing request's trace.
func RiverMiddleware(tp trace.TracerProvider) rivertype.Middleware {
	return otelriver.NewMiddleware(&otelriver.MiddlewareConfig{TracerProvider: tp})
}

var traceContext = propagation.TraceContext{}

// Start implements outboxtype.Tracer.
func (t *Tracer) Start(ctx context.Context, s outboxtype.SpanStart) (context.Context, outboxtype.Span) {
	opts := make([]trace.SpanStartOption, 0, 3)
	opts = append(opts, trace.WithSpanKind(kindOf(s.Kind)))
	if len(s.Attrs) > 0 {
		opts = append(opts, trace.WithAttributes(attrs(s.Attrs)...))
	}
	if s.Parent != "" {
		if parent := trace.SpanContextFromContext(traceContext.Extract(context.Background(),
			propagation.MapCarrier{"traceparent": s.Parent})); parent.IsValid() {
			if cur := trace.SpanContextFromContext(ctx); cur.IsValid() {
				opts = append(opts, trace.WithLinks(trace.Link{SpanContext: cur}))
			}
			ctx = trace.ContextWithRemoteSpanContext(ctx, parent)
		}
	}
	tr := t.tracer
	if tr == nil {
		tr = otel.GetTracerProvider().Tracer(instrumentation)
	}
	ctx, sp := tr.Start(ctx, s.Name, opts...)
	return ctx, span{sp}
}

func kindOf(k outboxtype.SpanKind) trace.SpanKind {
	switch k {
	case outboxtype.SpanClient:
		return trace.SpanKindClient
	case outboxtype.SpanConsumer:
		return trace.SpanKindConsumer
	case outboxtype.SpanServer:
		return trace.SpanKindServer
	default:
		return trace.SpanKindInternal
	}
}

func attrs(in []outboxtype.Attr) []attribute.KeyValue {
	out := make([]attribute.KeyValue, 0, len(in))
	for _, a := range in {
		switch v := a.Value.(type) {
		case string:
			out = append(out, attribute.String(a.Key, v))
		case bool:
			out = append(out, attribute.Bool(a.Key, v))
		case int:
			out = append(out, attribute.Int(a.Key, v))
		case int64:
			out = append(out, attribute.Int64(a.Key, v))
		case int32:
			out = append(out, attribute.Int(a.Key, int(v)))
		default:
			out = append(out, attribute.String(a.Key, slog.AnyValue(v).String()))
		}
	}
	return out
}

type span struct{ trace.Span }

func (s span) Traceparent() string {
	if !s.SpanContext().IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	traceContext.Inject(trace.ContextWithSpanContext(context.Background(), s.SpanContext()), c)
	return c["traceparent"]
}

func (s span) LogAttrs() []any { return logAttrs(s.SpanContext()) }

func logAttrs(sc trace.SpanContext) []any {
	if !sc.IsValid() {
		return nil
	}
	return []any{"trace_id", sc.TraceID().String(), "span_id", sc.SpanID().String()}
}

func (s span) SetAttrs(a ...outboxtype.Attr) { s.SetAttributes(attrs(a)...) }

func (s span) End(err error) {
	if err != nil {
		// The class and status only (providers.Summary): never a
		// receiver's body, nor anything key-like.
		summary := providers.Summary(err)
		s.AddEvent("exception", trace.WithAttributes(attribute.String("exception.message", summary)))
		s.SetStatus(codes.Error, summary)
	}
	s.Span.End()
}

// InboxTrace is inbox.Config.Trace for t: each claim is a span
// ("inbox.claim") with the source, the message id and whether it was a
// duplicate, in the trace of the context the claim is given.
func InboxTrace(t outboxtype.Tracer) func(ctx context.Context, source, messageID string) (context.Context, func(duplicate bool, err error)) {
	return func(ctx context.Context, source, messageID string) (context.Context, func(bool, error)) {
		ctx, span := t.Start(ctx, outboxtype.SpanStart{Name: "inbox.claim", Attrs: []outboxtype.Attr{
			{Key: "inbox.source", Value: source}, {Key: "inbox.message_id", Value: messageID}}})
		return ctx, func(duplicate bool, err error) {
			span.SetAttrs(outboxtype.Attr{Key: "inbox.duplicate", Value: duplicate})
			span.End(err)
		}
	}
}

// LogHandler wraps h so that records logged with a context that carries
// a span (slog's *Context methods) carry its trace_id and span_id.
func LogHandler(h slog.Handler) slog.Handler { return logHandler{h} }

type logHandler struct{ slog.Handler }

func (h logHandler) Handle(ctx context.Context, r slog.Record) error {
	if a := logAttrs(trace.SpanContextFromContext(ctx)); a != nil {
		r = r.Clone()
		r.Add(a...)
	}
	return h.Handler.Handle(ctx, r)
}

func (h logHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return logHandler{h.Handler.WithAttrs(as)}
}

func (h logHandler) WithGroup(name string) slog.Handler {
	return logHandler{h.Handler.WithGroup(name)}
}
