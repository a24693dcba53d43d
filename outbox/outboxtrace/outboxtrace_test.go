package outboxtrace_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxd/outboxd/inbox"
	"github.com/outboxd/outboxd/internal/engine"
	"github.com/outboxd/outboxd/internal/fakes"
	"github.com/outboxd/outboxd/internal/store"
	"github.com/outboxd/outboxd/internal/testdb"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/outbox/idempotency"
	"github.com/outboxd/outboxd/outbox/outboxtrace"
	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/webhook"
	"github.com/outboxd/outboxd/sideeffects"
	"github.com/outboxd/outboxd/sideeffects/sideeffectstest"
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
	ob, err := outbox.New(outbox.Config{Jobs: outbox.JobsInTransaction, Schema: db.Schema, WebhookAllowedNetworks: loopback, Tracer: outboxtrace.New(app.tp)})
	require.NoError(t, err)

	// The request, through the Idempotency-Key middleware; the server
	// span stands for the application's own HTTP instrumentation.
	keys, err := idempotency.New(db.Pool, idempotency.Config{Schema: db.Schema, Unscoped: true, Tracer: outboxtrace.New(app.tp)})
	require.NoError(t, err)
	var res *outbox.Result
	var request trace.Span
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, span := app.tp.Tracer("shop").Start(r.Context(), "POST /orders", trace.WithSpanKind(trace.SpanKindServer))
		defer span.End()
		if request == nil {
			request = span
		}
		keys.Transactional(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			tx, _ := idempotency.Tx(r.Context())
			var err error
			res, err = ob.Enqueue(r.Context(), tx, outbox.Event{ID: outbox.EventID("order.paid", "ord_1"), Type: "order.paid"},
				outbox.EffectOf("webhook.order_paid", webhook.Payload{URL: recv.URL + "/orders", Body: json.RawMessage(`{"card": "4242"}`)}))
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.WriteHeader(http.StatusCreated)
		})).ServeHTTP(w, r.WithContext(ctx))
	}))
	t.Cleanup(srv.Close)
	for range 2 { // the client retries: the second is a replay
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/orders", strings.NewReader(`{"order": "ord_1"}`))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", "order-ord_1-attempt")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusCreated, resp.StatusCode)
	}
	require.NotNil(t, res)
	traceID := request.SpanContext().TraceID()
	claims := named(app.exp.GetSpans(), "idempotency.claim")
	require.Len(t, claims, 2)
	require.Equal(t, request.SpanContext().SpanID(), claims[0].Parent.SpanID())
	require.Equal(t, "claimed", attr(claims[0], "idempotency.outcome").AsString())
	require.Equal(t, "held", attr(claims[1], "idempotency.outcome").AsString())
	require.Equal(t, "completed", attr(claims[1], "idempotency.held_state").AsString())
	replays := named(app.exp.GetSpans(), "idempotency.replay")
	require.Len(t, replays, 1)
	require.EqualValues(t, http.StatusCreated, attr(replays[0], "http.response.status_code").AsInt64())

	wh, err := webhook.New(webhook.Config{Secret: secret, AllowedNetworks: loopback, Timeout: 10 * time.Second})
	require.NoError(t, err)
	d1 := sideeffectstest.Start(t, db.Pool, sideeffects.Config{Schema: db.Schema, Providers: []providers.Provider{wh}, Tracer: outboxtrace.New(first.tp), RiverMiddleware: []rivertype.Middleware{outboxtrace.RiverMiddleware(first.tp)}})
	<-inFlight
	killed, cancel := context.WithCancel(ctx)
	cancel() // no grace: the call in flight is cut off, its outcome unknown
	require.NoError(t, d1.Stop(killed))

	var logs syncBuffer
	logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	sideeffectstest.Start(t, db.Pool, sideeffects.Config{Schema: db.Schema, Providers: []providers.Provider{wh}, Tracer: outboxtrace.New(second.tp), Logger: logger})
	st := store.NewStore(db.Schema)
	require.Eventually(t, func() bool {
		e, err := st.Get(ctx, db.Pool, res.Effects[0].ID)
		return err == nil && e.State == outboxtype.StateConfirmed
	}, 30*time.Second, 10*time.Millisecond)
	require.Len(t, recv.ByID()[res.Effects[0].Key], 2, "re-fired once, with the same key")

	enqueue := named(app.exp.GetSpans(), "outbox.enqueue")
	require.Len(t, enqueue, 1)
	require.Equal(t, request.SpanContext().SpanID(), enqueue[0].Parent.SpanID(), "Enqueue is a child of the request")
	require.Equal(t, "new", attr(enqueue[0], "outboxd.result").AsString())

	for i, p := range []process{first, second} {
		// A span is exported when it ends, which may come a moment after
		// the confirmation the test waited for.
		require.Eventually(t, func() bool {
			spans := p.exp.GetSpans()
			return len(named(spans, "outboxd.dispatch")) > 0 && len(named(spans, "outboxd.provider_call")) > 0
		}, 10*time.Second, 10*time.Millisecond, "process %d ended its spans", i+1)
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
		for _, s := range append(spans, app.exp.GetSpans()...) {
			texts := []string{s.Status.Description}
			for _, a := range s.Attributes {
				texts = append(texts, a.Value.String())
			}
			for _, ev := range s.Events {
				for _, a := range ev.Attributes {
					texts = append(texts, a.Value.String())
				}
			}
			for _, text := range texts {
				require.NotContains(t, text, "4242", "no payload on a span")
				require.NotContains(t, text, res.Effects[0].Key, "no whole key on a span")
				require.NotContains(t, text, res.EventID.String(), "nor the event id that gives the key with the kind")
			}
		}
	}
	require.Equal(t, "in_doubt", attr(named(first.exp.GetSpans(), "outboxd.provider_call")[0], "outboxd.outcome").AsString())
	require.Equal(t, "confirmed", attr(named(second.exp.GetSpans(), "outboxd.dispatch")[0], "outboxd.outcome").AsString())

	// River's own job span (otelriver) is linked from the dispatch.
	var river []tracetest.SpanStub
	for _, s := range named(first.exp.GetSpans(), "river.work") {
		if attr(s, "kind").AsString() == engine.JobKind {
			river = append(river, s)
		}
	}
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

// TestInboxClaimSpans: each claim of the inbox is a span of the caller's
// trace that says whether the message was a duplicate.
func TestInboxClaimSpans(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	p := newProcess(t)
	ib, err := inbox.New(db.Pool, inbox.Config{Schema: db.Schema, Trace: outboxtrace.InboxTrace(outboxtrace.New(p.tp))})
	require.NoError(t, err)
	ctx, delivery := p.tp.Tracer("test").Start(context.Background(), "POST /webhooks/partner")
	for range 2 {
		require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			_, err := ib.Claim(ctx, tx, "partner", "msg_42")
			return err
		}))
	}
	delivery.End()
	claims := named(p.exp.GetSpans(), "inbox.claim")
	require.Len(t, claims, 2)
	for i, c := range claims {
		require.Equal(t, delivery.SpanContext().SpanID(), c.Parent.SpanID())
		require.Equal(t, "msg_42", attr(c, "inbox.message_id").AsString())
		require.Equal(t, i == 1, attr(c, "inbox.duplicate").AsBool(), "claim %d", i)
	}
}
