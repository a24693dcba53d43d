package engine

import (
	"context"
	"log/slog"

	"github.com/google/uuid"

	"github.com/outboxd/outboxd/outboxtype"
)

// effectLogger is logger with an effect's attributes, formatted only when
// a line is written. slog's Logger.With formats them at once, in every
// handler that pre-formats (the text and JSON handlers do), and a worker
// makes one for every attempt, most of which log nothing: that was a
// tenth of a dispatcher's CPU in a no-op burn-down.
func effectLogger(logger *slog.Logger, id uuid.UUID, e *outboxtype.Effect) *slog.Logger {
	return slog.New(&lazyAttrs{h: logger.Handler(), attrs: []slog.Attr{
		slog.Any("effect_id", id), slog.String("kind", e.Kind), slog.String("provider", e.Provider), slog.Int("attempt", e.Attempts),
	}})
}

// lazyAttrs is h with attrs, added when a record is handled.
type lazyAttrs struct {
	h     slog.Handler
	attrs []slog.Attr
}

func (l *lazyAttrs) Enabled(ctx context.Context, level slog.Level) bool {
	return l.h.Enabled(ctx, level)
}

func (l *lazyAttrs) Handle(ctx context.Context, r slog.Record) error {
	return l.h.WithAttrs(l.attrs).Handle(ctx, r)
}

func (l *lazyAttrs) WithAttrs(attrs []slog.Attr) slog.Handler {
	return l.h.WithAttrs(l.attrs).WithAttrs(attrs)
}

func (l *lazyAttrs) WithGroup(name string) slog.Handler {
	return l.h.WithAttrs(l.attrs).WithGroup(name)
}
