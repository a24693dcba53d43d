package engine

import (
	"context"

	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/providers"
)

// Spans of a dispatch, when the dispatcher traces (sideeffects.Config.Tracer).
const (
	spanDispatch = "outboxd.dispatch"
	spanCall     = "outboxd.provider_call"
)

// keyPrefixLen is how much of an idempotency key a span carries: enough
// to find the effect (outboxctl and the web view take it), not the key.
const keyPrefixLen = 12

// effectAttrs describe e on a span: never its payload or the whole key.
func effectAttrs(e *outboxtype.Effect) []outboxtype.Attr {
	key := e.IdempotencyKey
	if len(key) > keyPrefixLen {
		key = key[:keyPrefixLen]
	}
	return []outboxtype.Attr{
		{Key: "outboxd.effect_id", Value: e.ID.String()},
		{Key: "outboxd.kind", Value: e.Kind},
		{Key: "outboxd.provider", Value: e.Provider},
		{Key: "outboxd.attempt", Value: e.Attempts},
		{Key: "outboxd.key_prefix", Value: key},
	}
}

// startDispatch starts the span of one attempt of claimed, continuing the
// trace stored with its event: a re-fire after a crash, a retry or a
// redrive, by whichever dispatcher, joins the trace of the request that
// enqueued it. The span River's middleware started for the job, if any,
// is linked.
func (w *Worker) startDispatch(ctx context.Context, claimed *outboxtype.Effect) (context.Context, outboxtype.Span) {
	var parent string
	if tp, ok := w.traceparents.LoadAndDelete(claimed.ID); ok {
		parent = tp.(string)
	} else {
		// Claimed on its own (a retry, a re-fire): one more lookup.
		var err error
		if parent, err = w.store.EventTraceparent(ctx, w.pool, claimed.SourceID); err != nil {
			w.logger.Debug("dispatch span starts a new trace", "effect_id", claimed.ID, "error", err)
		}
	}
	attrs := effectAttrs(claimed)
	attrs = append(attrs, outboxtype.Attr{Key: "outboxd.total_attempts", Value: claimed.TotalAttempts})
	return w.tracer.Start(ctx, outboxtype.SpanStart{Name: spanDispatch, Kind: outboxtype.SpanConsumer, Parent: parent, Attrs: attrs})
}

// startCall starts the client span of the provider call for claimed.
func (w *Worker) startCall(ctx context.Context, claimed *outboxtype.Effect) (context.Context, outboxtype.Span) {
	return w.tracer.Start(ctx, outboxtype.SpanStart{Name: spanCall, Kind: outboxtype.SpanClient, Attrs: effectAttrs(claimed)})
}

// endCall ends the provider call's span with its outcome, also recorded on
// the dispatch span: confirmed, or the class of its error (retryable,
// permanent: the provider refused; in_doubt: it may have acted).
func endCall(call, dispatch outboxtype.Span, res providers.Result, err error) {
	outcome := "confirmed"
	if err != nil {
		class, _ := providers.Classify(err)
		outcome = class.String()
	}
	attrs := []outboxtype.Attr{{Key: "outboxd.outcome", Value: outcome}}
	if res.Ref != "" {
		attrs = append(attrs, outboxtype.Attr{Key: "outboxd.provider_ref", Value: res.Ref})
	}
	if res.Replayed {
		attrs = append(attrs, outboxtype.Attr{Key: "outboxd.replayed", Value: true})
	}
	call.SetAttrs(attrs...)
	dispatch.SetAttrs(attrs...)
	call.End(err)
}
