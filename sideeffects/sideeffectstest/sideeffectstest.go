// Package sideeffectstest runs a real dispatcher inside a test, as an
// application's end-to-end test wants one: enqueue with package outbox,
// run a dispatcher over the test's schema with a provider pointed at a
// local server, and read what became of the effect (sideeffects.Operator's
// Get) or what the server received.
//
//	sideeffectstest.Start(t, pool, sideeffects.Config{
//		Schema:    schema,
//		Providers: []providers.Provider{webhookProvider},
//	})
//
// Package outbox/outboxtest asserts what a transaction enqueued, without a
// dispatcher.
package sideeffectstest

import (
	"cmp"
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/sideeffects"
)

// Start runs a dispatcher with cfg until the test ends, failing the test
// if it cannot start. Zero timings become ones a test wants (River fetches
// every 5ms and polls every 20ms; retries come after 10 to 20ms), logs are
// discarded unless cfg.Logger is set, and River starts as its TestOnly
// config says.
func Start(tb testing.TB, pool *pgxpool.Pool, cfg sideeffects.Config) *sideeffects.Dispatcher {
	tb.Helper()
	cfg.FetchCooldown = cmp.Or(cfg.FetchCooldown, 5*time.Millisecond)
	cfg.FetchPollInterval = cmp.Or(cfg.FetchPollInterval, 20*time.Millisecond)
	cfg.Retry.BaseDelay = cmp.Or(cfg.Retry.BaseDelay, 10*time.Millisecond)
	cfg.Retry.MaxDelay = cmp.Or(cfg.Retry.MaxDelay, 20*time.Millisecond)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	cfg.TestOnly = true
	d, err := sideeffects.NewDispatcher(pool, cfg)
	if err != nil {
		tb.Fatalf("sideeffectstest: %v", err)
	}
	if err := d.Start(context.Background()); err != nil {
		tb.Fatalf("sideeffectstest: start: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = d.Stop(ctx)
	})
	return d
}
