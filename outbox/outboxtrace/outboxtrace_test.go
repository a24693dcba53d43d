package outboxtrace_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxd/outboxd/internal/engine"
	"github.com/outboxd/outboxd/internal/fakes"
	"github.com/outboxd/outboxd/internal/testdb"
	"github.com/outboxd/outboxd/internal/testdispatch"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/outbox/outboxtrace"
	"github.com/outboxd/outboxd/providers/webhook"
)

const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}

// process is one traced process: its own TracerProvider and in-memory
// exporter, as a separate outboxd would have.
type process struct {
	exp *tracetest.InMemoryExporter
	tp  *sdktrace.TracerProvider
}

func newProcess(t *testing.T) process {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return process{exp: exp, tp: tp}
}

func named(spans tracetest.SpanStubs, name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

func attr(s tracetest.SpanStub, key string) attribute.Value {
	for _, a := range s.Attributes {
		if string(a.Key) == key {
			return a.Value
		}
	}
	return attribute.Value{}
}

// syncBuffer is a log destination safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestOneTraceFromRequestToProviderCall: the request that enqueues, its
// Enqueue, the dispatch of the effect and the provider call are one
// trace; an outboxd killed mid-call and the next one that re-fires the
// effect after it both add to that trace (the trace context is read from
// the event's row, not from memory); spans name the effect without its
// payload or whole key; the dispatch's log lines carry the trace id.
func TestOneTraceFromRequestToProviderCall(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	recv, err := fakes.NewReceiver(secret)
	require.NoError(t, err)
	t.Cleanup(recv.Close)
	inFlight := make(chan struct{})
	recv.Respond("/orders", func(w http.ResponseWriter, r *http.Request) int {
		close(inFlight)
		<-r.Context().Done() // the first outboxd dies before an answer
		return 0
	})

	app, first, second := newProcess(t), newProcess(t), newProcess(t)
	ob, err := outbox.New(outbox.Config{Schema: db.Schema, WebhookAllowedNetworks: loopback, Tracer: outboxtrace.New(app.tp)})
	require.NoError(t, err)

	// The request.
	reqCtx, request := app.tp.Tracer("shop").Start(ctx, "POST /orders", trace.WithSpanKind(trace.SpanKindServer))
	var res *outbox.Result
	require.NoError(t, pgx.BeginFunc(reqCtx, db.Pool, func(tx pgx.Tx) error {
		res, err = ob.Enqueue(reqCtx, tx, outbox.Event{ID: uuid.New(), Type: "order.paid"},
			outbox.EffectOf("webhook.order_paid", webhook.Payload{URL: recv.URL + "/orders", Body: json.RawMessage(`{"card": "4242"}`)}))
		return err
	}))
	request.End()
	traceID := request.SpanContext().TraceID()

	wh, err := webhook.New(webhook.Config{Secret: secret, AllowedNetworks: loopback, Timeout: 10 * time.Second})
	require.NoError(t, err)
	d1 := testdispatch.Start(t, db, engine.Config{Tracer: outboxtrace.New(first.tp), RiverMiddleware: []rivertype.Middleware{outboxtrace.RiverMiddleware(first.tp)}}, wh)
	<-inFlight
	killed, cancel := context.WithCancel(ctx)
	cancel() // no grace: the call in flight is cut off, its outcome unknown
	require.NoError(t, d1.Stop(killed))

	var logs syncBuffer
	logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	testdispatch.Start(t, db, engine.Config{Tracer: outboxtrace.New(second.tp), Logger: logger}, wh)
	st := engine.NewStore(db.Schema)
	require.Eventually(t, func() bool {
		e, err := st.Get(ctx, db.Pool, res.Effects[0].ID)
		return err == nil && e.State == engine.StateConfirmed
	}, 30*time.Second, 10*time.Millisecond)
	require.Len(t, recv.ByID()[res.Effects[0].Key], 2, "re-fired once, with the same key")

	enqueue := named(app.exp.GetSpans(), "outbox.enqueue")
	require.Len(t, enqueue, 1)
	require.Equal(t, request.SpanContext().SpanID(), enqueue[0].Parent.SpanID(), "Enqueue is a child of the request")
	require.Equal(t, "new", attr(enqueue[0], "outboxd.result").AsString())

	for i, p := range []process{first, second} {
		spans := p.exp.GetSpans()
		dispatch := named(spans, "outboxd.dispatch")
		require.Len(t, dispatch, 1, "process %d", i+1)
		call := named(spans, "outboxd.provider_call")
		require.Len(t, call, 1, "process %d", i+1)
		require.Equal(t, traceID, dispatch[0].SpanContext.TraceID(), "process %d continues the request's trace", i+1)
		require.Equal(t, enqueue[0].SpanContext.SpanID(), dispatch[0].Parent.SpanID(), "dispatch is a child of Enqueue")
		require.Equal(t, trace.SpanKindConsumer, dispatch[0].SpanKind)
		require.Equal(t, dispatch[0].SpanContext.SpanID(), call[0].Parent.SpanID(), "the call is a child of the dispatch")
		require.Equal(t, trace.SpanKindClient, call[0].SpanKind)
		require.Equal(t, res.Effects[0].ID.String(), attr(call[0], "outboxd.effect_id").AsString())
		require.Equal(t, "webhook.order_paid", attr(call[0], "outboxd.kind").AsString())
		require.Equal(t, res.Effects[0].Key[:12], attr(call[0], "outboxd.key_prefix").AsString())
		require.EqualValues(t, i+1, attr(dispatch[0], "outboxd.total_attempts").AsInt64())
		for _, s := range spans {
			for _, a := range s.Attributes {
				require.NotContains(t, a.Value.Emit(), "4242", "no payload on a span")
				require.NotContains(t, a.Value.Emit(), res.Effects[0].Key, "no whole key on a span")
			}
		}
	}
	require.Equal(t, "in_doubt", attr(named(first.exp.GetSpans(), "outboxd.provider_call")[0], "outboxd.outcome").AsString())
	require.Equal(t, "confirmed", attr(named(second.exp.GetSpans(), "outboxd.dispatch")[0], "outboxd.outcome").AsString())

	// River's own job span (otelriver) is linked from the dispatch.
	river := named(first.exp.GetSpans(), "river.work")
	require.Len(t, river, 1)
	require.Len(t, named(first.exp.GetSpans(), "outboxd.dispatch")[0].Links, 1)
	require.Equal(t, river[0].SpanContext.SpanID(), named(first.exp.GetSpans(), "outboxd.dispatch")[0].Links[0].SpanContext.SpanID())

	// The dispatch's log lines carry its trace.
	var found bool
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, res.Effects[0].ID.String()) {
			require.Contains(t, line, `"trace_id":"`+traceID.String()+`"`, line)
			found = true
		}
	}
	require.True(t, found, "a log line names the effect")
}
