// Package testdispatch runs a real dispatcher for a test, with the short
// timings tests want, and stops it when the test ends.
package testdispatch

import (
	"cmp"
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/engine"
	"github.com/outboxd/outboxd/internal/testdb"
	"github.com/outboxd/outboxd/providers"
)

// Start runs a dispatcher for ps in db's schema until the test ends. cfg
// may set anything else; its zero timings become fast ones (fetch every
// 5ms, poll every 20ms, retries after 10 to 20ms), and logs are discarded.
func Start(tb testing.TB, db *testdb.DB, cfg engine.Config, ps ...providers.Provider) *engine.Dispatcher {
	tb.Helper()
	cfg.Schema = db.Schema
	cfg.Providers = append(cfg.Providers, ps...)
	cfg.FetchCooldown = cmp.Or(cfg.FetchCooldown, 5*time.Millisecond)
	cfg.FetchPollInterval = cmp.Or(cfg.FetchPollInterval, 20*time.Millisecond)
	cfg.Retry.BaseDelay = cmp.Or(cfg.Retry.BaseDelay, 10*time.Millisecond)
	cfg.Retry.MaxDelay = cmp.Or(cfg.Retry.MaxDelay, 20*time.Millisecond)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	cfg.TestOnly = true
	d, err := engine.NewDispatcher(db.Pool, cfg)
	if err != nil {
		tb.Fatalf("testdispatch: %v", err)
	}
	if err := d.Start(context.Background()); err != nil {
		tb.Fatalf("testdispatch: start: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = d.Stop(ctx)
	})
	return d
}
