package main

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// connect opens a pool and checks that the database answers, with an error
// that says which setting to fix. The URL's password is never printed.
func connect(ctx context.Context, databaseURL string, maxConns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, usageError{fmt.Errorf("--database-url (DATABASE_URL) is not a valid Postgres URL: %s", redact(databaseURL))}
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", redact(databaseURL), err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("database unreachable at %s: %w (check DATABASE_URL and that Postgres is running)", redact(databaseURL), err)
	}
	return pool, nil
}

// redact hides the password of a connection URL.
func redact(databaseURL string) string {
	u, err := url.Parse(databaseURL)
	if err != nil {
		return "(unparseable URL)"
	}
	return u.Redacted()
}
