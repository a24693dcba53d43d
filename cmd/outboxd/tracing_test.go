package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/outbox/outboxtrace"
	"github.com/outboxd/outboxd/outboxtype"
)

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// TestTracingFromTheStandardEnvironment: outboxd run traces only when the
// OTEL_* variables ask for it, refuses what it cannot do with the
// variable named, and exports its spans over OTLP/HTTP to the endpoint
// given, with service.name outboxd.
func TestTracingFromTheStandardEnvironment(t *testing.T) {
	ctx := context.Background()
	for name, env := range map[string]map[string]string{
		"nothing set":    {},
		"sdk disabled":   {"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"},
		"exporter none":  {"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"},
		"only a sampler": {"OTEL_TRACES_SAMPLER": "always_on"},
	} {
		tp, _, err := setupTracing(ctx, envOf(env), slog.New(slog.DiscardHandler))
		require.NoError(t, err, name)
		require.Nil(t, tp, name)
	}
	for env, want := range map[string]string{
		"OTEL_TRACES_EXPORTER":        "OTEL_TRACES_EXPORTER=zipkin: outboxd exports traces with otlp",
		"OTEL_EXPORTER_OTLP_PROTOCOL": "OTEL_EXPORTER_OTLP_PROTOCOL=grpc: outboxd exports over OTLP/HTTP",
	} {
		value := map[string]string{"OTEL_TRACES_EXPORTER": "zipkin", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}[env]
		_, _, err := setupTracing(ctx, envOf(map[string]string{env: value, "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}), slog.New(slog.DiscardHandler))
		require.ErrorContains(t, err, want)
	}

	var mu sync.Mutex
	var got []string
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.Path+" "+r.Header.Get("Content-Type")+" "+string(body))
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	defer collector.Close()
	// The exporter reads the OTLP variables itself, from the process.
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	tp, flush, err := setupTracing(ctx, os.Getenv, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	require.NotNil(t, tp)
	_, span := outboxtrace.New(tp).Start(ctx, outboxtype.SpanStart{Name: "outboxd.dispatch", Kind: outboxtype.SpanConsumer})
	span.End(nil)
	require.NoError(t, flush(ctx))
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, got, 1)
	require.Contains(t, got[0], "POST /v1/traces application/x-protobuf")
	require.Contains(t, got[0], "outboxd.dispatch")
	require.Contains(t, got[0], "service.name")
	require.Contains(t, got[0], "outboxd")
}

// TestTheSDKsMessagesQuoteNoSecret: a malformed OTEL_EXPORTER_OTLP_HEADERS
// is reported through outboxd's logger, without the header's value.
func TestTheSDKsMessagesQuoteNoSecret(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "Authorization=Bearer%zzTOPSECRETTOKEN,x-tenant")
	tp, flush, err := setupTracing(context.Background(), os.Getenv, log)
	require.NoError(t, err)
	require.NotNil(t, tp)
	_ = flush(context.Background())
	require.Contains(t, buf.String(), "opentelemetry: ", "the SDK's messages come through outboxd's logger")
	require.NotContains(t, buf.String(), "TOPSECRET")
}
