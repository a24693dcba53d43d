package engine

import (
	"bytes"
	"context"
	"log/slog"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/outboxtype"
)

// An effect's logger writes what slog's With writes: the effect's
// attributes first, then the line's own, in groups as asked; and a
// level the handler leaves out writes nothing.
func TestEffectLoggerWritesWhatWithWrites(t *testing.T) {
	t.Parallel()
	id := uuid.New()
	e := &outboxtype.Effect{ID: id, Kind: "webhook.order_paid", Provider: "webhook", Attempts: 2}
	for _, json := range []bool{false, true} {
		var lazy, eager bytes.Buffer
		handler := func(b *bytes.Buffer) slog.Handler {
			opts := &slog.HandlerOptions{Level: slog.LevelInfo, ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
				if a.Key == slog.TimeKey {
					return slog.Attr{}
				}
				return a
			}}
			if json {
				return slog.NewJSONHandler(b, opts)
			}
			return slog.NewTextHandler(b, opts)
		}
		write := func(l *slog.Logger) {
			l.Info("effect confirmed", "provider_ref", "re_123")
			l.Debug("not written at info")
			l.With("limit", "host:a").WithGroup("call").Warn("attempt failed", "status", 503)
			l.LogAttrs(context.Background(), slog.LevelError, "effect failed", slog.String("reason", "gone"))
		}
		write(effectLogger(slog.New(handler(&lazy)), id, e))
		write(slog.New(handler(&eager)).With("effect_id", id, "kind", e.Kind, "provider", e.Provider, "attempt", e.Attempts))
		require.Equal(t, eager.String(), lazy.String())
		require.Contains(t, lazy.String(), id.String())
		require.NotContains(t, lazy.String(), "not written")
	}
}
