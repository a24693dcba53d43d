package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/testdb"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/webhook"
	"github.com/outboxd/outboxd/sideeffects"
)

// flakyProxy forwards connections to Postgres, but drops every connection
// while down is true: the database going away during start.
type flakyProxy struct {
	ln      net.Listener
	target  string
	down    atomic.Bool
	dropped atomic.Int64
	wg      sync.WaitGroup
}

func newFlakyProxy(t *testing.T, target string) *flakyProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &flakyProxy{ln: ln, target: target}
	p.down.Store(true)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if p.down.Load() {
				p.dropped.Add(1)
				c.Close()
				continue
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				defer c.Close()
				s, err := net.Dial("tcp", p.target)
				if err != nil {
					return
				}
				defer s.Close()
				go func() { _, _ = io.Copy(s, c); s.Close() }()
				_, _ = io.Copy(c, s)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return p
}

// TestStartRetriesWhileTheDatabaseIsAway: outboxd run keeps trying to
// start while its connections are dropped, and starts once the database is
// back; an error that is not the connection's (a schema not migrated) ends
// it at once.
func TestStartRetriesWhileTheDatabaseIsAway(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	u, err := url.Parse(testdb.URL())
	require.NoError(t, err)
	proxy := newFlakyProxy(t, u.Host)
	u.Host = proxy.ln.Addr().String()
	pool, err := pgxpool.New(context.Background(), u.String())
	require.NoError(t, err)
	defer pool.Close()
	wh, err := webhook.New(webhook.Config{Secret: testSecret})
	require.NoError(t, err)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	builds := 0
	build := func(schema string) func() (*sideeffects.Dispatcher, error) {
		return func() (*sideeffects.Dispatcher, error) {
			builds++
			if builds == 3 {
				proxy.down.Store(false) // the database is back
			}
			return sideeffects.NewDispatcher(pool, sideeffects.Config{Schema: schema, Providers: []providers.Provider{wh}, Logger: log})
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := startRetrying(ctx, log, build(db.Schema), 10*time.Millisecond)
	require.NoError(t, err)
	require.GreaterOrEqual(t, builds, 3, "it tried again")
	require.Positive(t, proxy.dropped.Load())
	stopCtx, stopCancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer stopCancel()
	require.NoError(t, d.Stop(stopCtx))

	empty := testdb.NewEmpty(t)
	builds = 10
	_, err = startRetrying(ctx, log, build(empty.Schema), 10*time.Millisecond)
	require.Error(t, err, "a schema without River's tables is not retried")
	require.Equal(t, 11, builds)
}

func TestTransientDBError(t *testing.T) {
	t.Parallel()
	for _, err := range []error{
		&pgconn.PgError{Code: "57P01"}, &pgconn.PgError{Code: "08006"}, io.ErrUnexpectedEOF,
		&net.OpError{Op: "dial", Err: errors.New("connection refused")}, errors.New("conn closed"),
	} {
		require.True(t, transientDBError(err), "%v", err)
	}
	for _, err := range []error{&pgconn.PgError{Code: "42P01"}, &pgconn.PgError{Code: "28P01"}, errors.New("river: invalid config")} {
		require.False(t, transientDBError(err), "%v", err)
	}
}
