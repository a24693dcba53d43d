package engine

import (
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
