package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/outboxd/outboxd/internal/cli"
	"github.com/outboxd/outboxd/providers"
)

// tracingEnv are the OpenTelemetry variables outboxd run reads, for --help.
const tracingEnv = `Tracing (OpenTelemetry, off unless configured; the SDK's standard variables):
  OTEL_TRACES_EXPORTER=otlp or OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_EXPORTER_OTLP_TRACES_ENDPOINT turn it on
  (OTLP over HTTP, http/protobuf); OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none turn it off.
  Also read: OTEL_EXPORTER_OTLP_HEADERS, _TIMEOUT, _INSECURE, OTEL_SERVICE_NAME (default outboxd),
  OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG, OTEL_BSP_*.`

// quotesDropped is a slog.Handler for OpenTelemetry's own messages that
// leaves out the values they quote from the configuration ("input",
// "value", "key"), and says where the messages come from.
type quotesDropped struct{ slog.Handler }

func (h quotesDropped) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, "opentelemetry: "+r.Message, r.PC)
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "input", "value", "key":
			out.AddAttrs(slog.String(a.Key, "(not shown)"))
		default:
			out.AddAttrs(a)
		}
		return true
	})
	return h.Handler.Handle(ctx, out)
}

func (h quotesDropped) WithAttrs(attrs []slog.Attr) slog.Handler {
	return quotesDropped{h.Handler.WithAttrs(attrs)}
}

func (h quotesDropped) WithGroup(name string) slog.Handler {
	return quotesDropped{h.Handler.WithGroup(name)}
}

// setupTracing builds a TracerProvider from the standard OTEL_* variables
// (whether to trace is read with getenv; the exporter and the SDK read
// theirs from the process), or returns nil when tracing is not configured. It
// also installs it and the W3C propagator as OpenTelemetry's globals.
// shutdown flushes the spans still buffered.
func setupTracing(ctx context.Context, getenv func(string) string, log *slog.Logger) (tp *sdktrace.TracerProvider, shutdown func(context.Context) error, err error) {
	off := func(context.Context) error { return nil }
	// The SDK's own messages go through outboxd's logger, without the
	// configuration values they quote (a malformed OTEL_EXPORTER_OTLP_HEADERS
	// holds credentials).
	otel.SetLogger(logr.FromSlogHandler(quotesDropped{log.Handler()}))
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("opentelemetry", "error", providers.Summary(err))
	}))
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return nil, off, nil
	}
	exporter := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")))
	endpoint := getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") + getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
	switch {
	case exporter == "none":
		return nil, off, nil
	case exporter == "" && endpoint == "":
		return nil, off, nil
	case exporter != "" && exporter != "otlp":
		return nil, off, cli.Usagef("OTEL_TRACES_EXPORTER=%s: outboxd exports traces with otlp (or none)", exporter)
	}
	for _, v := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := getenv(v); p != "" && p != "http/protobuf" {
			return nil, off, cli.Usagef("%s=%s: outboxd exports over OTLP/HTTP: use http/protobuf (a collector's port 4318)", v, p)
		}
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, off, cli.Usagef("OTEL_EXPORTER_OTLP_*: %v", err)
	}
	opts := []resource.Option{resource.WithFromEnv(), resource.WithTelemetrySDK(), resource.WithHost()}
	if getenv("OTEL_SERVICE_NAME") == "" && !strings.Contains(getenv("OTEL_RESOURCE_ATTRIBUTES"), "service.name=") {
		opts = append(opts, resource.WithAttributes(attribute.String("service.name", "outboxd")))
	}
	res, err := resource.New(ctx, opts...)
	if err != nil {
		return nil, off, cli.Usagef("OTEL_RESOURCE_ATTRIBUTES: %v", err)
	}
	// The sampler comes from OTEL_TRACES_SAMPLER (parent-based, always on
	// by default): a trace the application sampled is sampled here.
	tp = sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	return tp, func(ctx context.Context) error {
		if err := tp.Shutdown(ctx); err != nil {
			return fmt.Errorf("flush traces: %w", err)
		}
		return nil
	}, nil
}
