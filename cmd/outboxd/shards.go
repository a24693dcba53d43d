package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/internal/cli"
	"github.com/outboxd/outboxd/migrations"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/endpoint"
	"github.com/outboxd/outboxd/sideeffects"
)

// shard is one database outboxd run dispatches for: its pool, its own
// dispatcher (River client, leader, sweeper, retention) and whether that
// dispatcher is running.
type shard struct {
	name, url, schema string
	// setting names where the shard was given, for errors.
	setting string
	pool    *pgxpool.Pool
	log     *slog.Logger
	// providers names what its dispatcher dispatches for (the log).
	providers []string

	mu      sync.Mutex
	d       *sideeffects.Dispatcher
	started atomic.Bool
	// state says why a shard that is not running is not (for /readyz).
	state atomic.Value
}

func (s *shard) setState(v string) { s.state.Store(v) }

func (s *shard) stateText() string {
	if v, ok := s.state.Load().(string); ok {
		return v
	}
	return "starting"
}

// shardSpecs are the databases this process dispatches for: each
// --shard-database, or else --database-url alone (named by --shard).
func (c *runConfig) shardSpecs(g *globalConfig) ([]*shard, error) {
	if len(c.ShardDatabases) == 0 {
		return []*shard{{name: c.Shard, url: g.URL, schema: g.Schema, setting: "--database-url (DATABASE_URL)"}}, nil
	}
	if c.Shard != "" {
		return nil, cli.Usagef("--shard (OUTBOXD_SHARD) names the one database of --database-url: with --shard-database each shard is named there (name=postgres://…)")
	}
	parsed, err := cli.ParseShards(c.ShardDatabases, c.ShardSchemas, g.Schema)
	if err != nil {
		return nil, err
	}
	var out []*shard
	for _, p := range parsed {
		out = append(out, &shard{name: p.Name, url: p.URL, schema: p.Schema,
			setting: "--shard-database (OUTBOXD_SHARD_DATABASES) " + p.Name})
	}
	return out, nil
}

// open opens the shard's pool. With wait, it also waits until the
// database answers and is migrated (the single database of --database-url:
// an error there ends outboxd at start); without, a database that does not
// answer yet is waited for by startShard.
func (s *shard) open(ctx context.Context, maxConns int32, wait bool) error {
	var err error
	if wait {
		s.pool, err = cli.Connect(ctx, s.url, maxConns)
		if err != nil {
			return err
		}
		return migrations.Check(ctx, s.pool, s.schema)
	}
	s.pool, err = cli.OpenPool(ctx, s.url, maxConns, s.setting)
	return err
}

// waitReady waits, trying again with a growing wait up to 30 s, until
// the shard's database answers and is migrated. A database that is not
// migrated, or refuses outboxd, is an error.
func (s *shard) waitReady(ctx context.Context) error {
	wait := time.Second
	for {
		pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := s.pool.Ping(pingCtx)
		cancel()
		if err == nil {
			if err := migrations.Check(ctx, s.pool, s.schema); err != nil {
				return fmt.Errorf("shard %s: %w", s.name, err)
			}
			return nil
		}
		if !transientDBError(err) || ctx.Err() != nil {
			return fmt.Errorf("shard %s: %w", s.name, err)
		}
		s.setState("database unreachable")
		s.log.Warn("shard's database unavailable: retrying", "in", wait, "error", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 30*time.Second)
	}
}

// endpointProvider builds the endpoint provider for a shard's registered
// endpoints (they live in the shard's own database, with the events that
// fan out to them), refusing a key that opens none of some of their
// secrets.
func (c *runConfig) endpointProvider(ctx context.Context, s *shard) (providers.Provider, error) {
	disableAfter := c.EndpointDisableAfter
	if disableAfter == 0 {
		disableAfter = -1 // never
	}
	ep, err := endpoint.New(endpoint.Config{DB: s.pool, Schema: s.schema, Key: c.endpointKey, Sender: c.webhookSender,
		Webhook: c.endpointWebhook, DisableAfter: disableAfter})
	if err != nil {
		return nil, cli.UsageError{Err: err}
	}
	// A key that opens none of some endpoints' secrets would leave their
	// deliveries waiting on this replica: refused at start.
	sealed, err := endpoint.NewRegistry(endpoint.RegistryConfig{Schema: s.schema, Key: c.endpointKey})
	if err != nil {
		return nil, err
	}
	if n, err := sealed.Unopenable(ctx, s.pool); err != nil {
		return nil, err
	} else if n > 0 {
		where := ""
		if s.name != "" {
			where = " in shard " + s.name
		}
		return nil, cli.Usagef("--endpoint-key (OUTBOXD_ENDPOINT_KEY) is not the key %d sealed endpoint secrets%s were sealed with: give that key too, as a comma-separated list with the new key first, then run outboxctl endpoints reseal", n, where)
	}
	return ep, nil
}

// stopShards stops every running dispatcher at once, within ctx.
func stopShards(ctx context.Context, shards []*shard) error {
	errs := make([]error, len(shards))
	var wg sync.WaitGroup
	for i, s := range shards {
		s.started.Store(false)
		s.mu.Lock()
		d := s.d
		s.mu.Unlock()
		if d == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := d.Stop(ctx); err != nil {
				errs[i] = fmt.Errorf("stop dispatcher%s: %w", shardSuffix(s.name), err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// shardSuffix is " of shard NAME", or nothing for an unnamed database.
func shardSuffix(name string) string {
	if name == "" {
		return ""
	}
	return " of shard " + name
}

// readyHandler serves /readyz: with one database, whether it answers, is
// migrated and its dispatcher runs; with several shards, one line per
// shard, 200 while at least one shard dispatches (a shard that is down
// stops only itself), and /readyz/{shard} for each shard alone.
func readyHandler(mux *http.ServeMux, shards []*shard, multi bool) {
	check := newReadiness()
	one := func(r *http.Request, s *shard) (bool, string) {
		ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
		defer cancel()
		if !s.started.Load() {
			return false, s.stateText()
		}
		if err := s.pool.Ping(ctx); err != nil {
			return false, "database unreachable"
		}
		if err := check.migrated(ctx, s); err != nil {
			return false, err.Error()
		}
		return true, "ready"
	}
	if !multi {
		mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
			s := shards[0]
			if !s.started.Load() {
				http.Error(w, "dispatcher not running", http.StatusServiceUnavailable)
				return
			}
			if ok, why := one(r, s); !ok {
				http.Error(w, why, http.StatusServiceUnavailable)
				return
			}
			_, _ = w.Write([]byte("ready\n"))
		})
		return
	}
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		var b strings.Builder
		any := false
		for _, s := range shards {
			ok, why := one(r, s)
			any = any || ok
			fmt.Fprintf(&b, "%s: %s\n", s.name, why)
		}
		if !any {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_, _ = w.Write([]byte(b.String()))
	})
	mux.HandleFunc("GET /readyz/{shard}", func(w http.ResponseWriter, r *http.Request) {
		i := slices.IndexFunc(shards, func(s *shard) bool { return s.name == r.PathValue("shard") })
		if i < 0 {
			http.Error(w, "no such shard", http.StatusNotFound)
			return
		}
		if ok, why := one(r, shards[i]); !ok {
			http.Error(w, why, http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
}

// readiness remembers, per shard, when its migrations last checked out:
// the check opens its own connection, so a passing result is reused for
// 30 seconds rather than repeated on every probe.
type readiness struct {
	mu sync.Mutex
	at map[*shard]time.Time
}

func newReadiness() *readiness { return &readiness{at: map[*shard]time.Time{}} }

func (r *readiness) migrated(ctx context.Context, s *shard) error {
	r.mu.Lock()
	last := r.at[s]
	r.mu.Unlock()
	if time.Since(last) <= 30*time.Second {
		return nil
	}
	if err := migrations.Check(ctx, s.pool, s.schema); err != nil {
		return err
	}
	r.mu.Lock()
	r.at[s] = time.Now()
	r.mu.Unlock()
	return nil
}
