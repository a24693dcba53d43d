package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/fakes"
	"github.com/outboxd/outboxd/internal/store"
	"github.com/outboxd/outboxd/internal/testdb"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/endpoint"
	"github.com/outboxd/outboxd/providers/webhook"
	"github.com/outboxd/outboxd/sideeffects"
)

// get returns the status and body of GET url ("" and 0 when it fails).
func get(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func TestOneOutboxdDispatchesForEveryShardAndADownShardStopsOnlyItself(t *testing.T) {
	t.Parallel()
	a, b, c := testdb.New(t), testdb.New(t), testdb.New(t)
	ctx := context.Background()
	recv, err := fakes.NewReceiver(testSecret)
	require.NoError(t, err)
	defer recv.Close()
	port := recv.URL[strings.LastIndex(recv.URL, ":")+1:]

	// Effects waiting in both shards before outboxd starts.
	enqueue := func(db *testdb.DB, n int) []uuid.UUID {
		ob, err := outbox.New(outbox.Config{Schema: db.Schema, Providers: []providers.Validator{
			webhook.Schema{AllowedNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}}})
		require.NoError(t, err)
		var ids []uuid.UUID
		for range n {
			require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
				res, err := ob.Enqueue(ctx, tx, outbox.Event{ID: uuid.New(), Type: "order.paid"},
					outbox.EffectOf("webhook.order_paid", webhook.Payload{URL: "http://localhost:" + port + "/" + db.Schema, Body: json.RawMessage(`{}`)}))
				if err == nil {
					ids = append(ids, res.Effects[0].ID)
				}
				return err
			}))
		}
		return ids
	}
	idsA, idsB, idsC := enqueue(a, 5), enqueue(b, 7), enqueue(c, 3)
	// Shard ap-1's database is reached through a proxy that refuses every
	// connection until it is let through.
	proxy := newGate(t, "127.0.0.1:5432")

	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	l, err = net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	webAddr := l.Addr().String()
	require.NoError(t, l.Close())
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	var logs lockedBuffer
	defer func() {
		if t.Failed() {
			select {
			case err := <-done:
				t.Log("outboxd ended:", err)
			default:
			}
			t.Log(logs.String())
		}
	}()
	go func() {
		cmd := newRootCmd()
		cmd.SetOut(&logs)
		cmd.SetErr(&logs)
		cmd.SetArgs([]string{"run", "--http-addr", addr, "--web-addr", webAddr, "--log-level", "info",
			"--webhook-secret", testSecret, "--webhook-allow-cidrs", "127.0.0.0/8",
			"--shard-database", "eu-1=" + testdb.URL(), "--shard-database", "us-1=" + testdb.URL(),
			// A shard whose database does not answer.
			"--shard-database", "ap-1=postgres://postgres@" + proxy.addr + "/test?sslmode=disable&connect_timeout=2",
			"--shard-schema", "eu-1=" + a.Schema + ",us-1=" + b.Schema + ",ap-1=" + c.Schema,
			"--limit", "webhook:localhost=500"})
		done <- cmd.ExecuteContext(runCtx)
	}()

	confirmed := func(db *testdb.DB, ids []uuid.UUID) {
		op, err := sideeffects.NewOperator(db.Pool, sideeffects.OperatorConfig{Schema: db.Schema})
		require.NoError(t, err)
		for _, id := range ids {
			require.Eventually(t, func() bool {
				e, err := op.Get(ctx, id)
				return err == nil && e.State == outboxtype.StateConfirmed
			}, 30*time.Second, 20*time.Millisecond, "an effect of shard %s was not confirmed", db.Schema)
		}
	}
	confirmed(a, idsA)
	confirmed(b, idsB)
	require.Len(t, recv.ByID(), len(idsA)+len(idsB), "each effect delivered, one key each")

	// Readiness per shard: the shard that is down is not ready, the
	// others are, and the process stays in service.
	var status int
	var body string
	require.Eventually(t, func() bool {
		status, body = get("http://" + addr + "/readyz")
		return strings.Contains(body, "ap-1: database unreachable\n")
	}, 30*time.Second, 20*time.Millisecond, "the shard that is down says why")
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, "eu-1: ready\n")
	require.Contains(t, body, "us-1: ready\n")
	status, _ = get("http://" + addr + "/readyz/us-1")
	require.Equal(t, http.StatusOK, status)
	status, body = get("http://" + addr + "/readyz/ap-1")
	require.Equal(t, http.StatusServiceUnavailable, status, body)
	status, _ = get("http://" + addr + "/readyz/nope")
	require.Equal(t, http.StatusNotFound, status)

	// Every shard's series carry its name.
	_, metrics := get("http://" + addr + "/metrics")
	require.Contains(t, metrics, `outboxd_effects_scrape_ok{shard="eu-1"} 1`)
	require.Contains(t, metrics, `outboxd_effects_scrape_ok{shard="us-1"} 1`)
	require.Contains(t, metrics, `outboxd_effects_scrape_ok{shard="ap-1"} 0`)
	require.Contains(t, metrics, `outboxd_transitions_total{kind="webhook.order_paid",provider="webhook",shard="us-1",to="confirmed"} 7`)

	// One web view: a row per shard, each shard's pages under its name.
	status, body = get("http://" + webAddr + "/ui/")
	require.Equal(t, http.StatusOK, status)
	for _, name := range []string{"eu-1", "us-1", "ap-1"} {
		require.Contains(t, body, `data-shard="`+name+`"`)
	}
	require.Contains(t, body, "could not be read", "the shard that is down says so")
	status, body = get("http://" + webAddr + "/ui/shards/us-1/effects/" + idsB[0].String())
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, `<strong id="shard">us-1</strong>`)

	// The shard that was down dispatches once its database answers.
	proxy.open()
	confirmed(c, idsC)
	require.Eventually(t, func() bool {
		status, _ := get("http://" + addr + "/readyz/ap-1")
		return status == http.StatusOK
	}, 30*time.Second, 20*time.Millisecond)
	require.Len(t, recv.ByID(), len(idsA)+len(idsB)+len(idsC))

	// The limits are kept once, in the first shard, for all of them.
	_, err = store.NewStore(a.Schema).LimitOf(ctx, a.Pool, "webhook:localhost")
	require.NoError(t, err, "the first shard keeps the limits")
	_, err = store.NewStore(b.Schema).LimitOf(ctx, b.Pool, "webhook:localhost")
	require.ErrorIs(t, err, store.ErrNotFound, "not the other shards")

	// Each shard's dispatcher recorded itself, with its shard, in its own
	// database.
	for _, x := range []struct {
		db   *testdb.DB
		name string
	}{{a, "eu-1"}, {b, "us-1"}, {c, "ap-1"}} {
		var shard string
		require.NoError(t, x.db.Pool.QueryRow(ctx, fmt.Sprintf(`SELECT settings->>'shard' FROM %s.outboxd_dispatchers`, x.db.Schema)).Scan(&shard))
		require.Equal(t, x.name, shard)
	}

	cancel()
	require.NoError(t, <-done)
}

func TestShardDatabasesAreCheckedBeforeAnythingStarts(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--shard-database", "EU=postgres://x/y"}, "--shard-database (OUTBOXD_SHARD_DATABASES)"},
		{[]string{"--shard-database", "eu=host=x dbname=y"}, "postgres:// URL"},
		{[]string{"--shard-database", "eu=postgres://x/y", "--shard-database", "eu=postgres://z/y"}, "names shard eu twice"},
		{[]string{"--shard-database", "eu=postgres://x/y", "--shard-schema", "us=s"}, "no --shard-database names shard us"},
		{[]string{"--shard-database", "eu=postgres://x/y", "--shard", "eu"}, "--shard (OUTBOXD_SHARD) names the one database"},
		{[]string{"--shard-database", "eu=postgres://u:hunter2secret@x/y", "--shard-schema", "eu=1bad"}, "--shard-schema (OUTBOXD_SHARD_SCHEMAS) eu"},
	} {
		args := append([]string{"run", "--webhook-secret", testSecret, "--http-addr", ""}, c.args...)
		_, err := execute(context.Background(), args...)
		require.Error(t, err, c.args)
		require.Contains(t, err.Error(), c.want)
		require.NotContains(t, err.Error(), "hunter2secret")
	}
}

// gate is a TCP proxy to a server that closes every connection until
// open is called: a database that is down, then back.
type gate struct {
	addr string
	up   chan struct{}
}

func newGate(t *testing.T, target string) *gate {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	g := &gate{addr: l.Addr().String(), up: make(chan struct{})}
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			select {
			case <-g.up:
			default:
				conn.Close()
				continue
			}
			go func() {
				defer conn.Close()
				back, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer back.Close()
				go func() { _, _ = io.Copy(back, conn) }()
				_, _ = io.Copy(conn, back)
			}()
		}
	}()
	return g
}

func (g *gate) open() { close(g.up) }

// TestEachShardsEndpointsReceiveItsOwnEvents: registered endpoints live in
// their shard's database; one outboxd serving two shards delivers each
// shard's events to that shard's endpoints only, each signed with its own
// endpoint's secret.
func TestEachShardsEndpointsReceiveItsOwnEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	keyText := endpoint.NewKey()
	key, err := endpoint.ParseKey(keyText)
	require.NoError(t, err)
	loop := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	srv := newPathRecorder(t)

	type shardOf struct {
		db      *testdb.DB
		path    string
		secret  string
		effects []uuid.UUID
	}
	shards := []*shardOf{{db: testdb.New(t), path: "/eu"}, {db: testdb.New(t), path: "/us"}}
	for _, s := range shards {
		reg, err := endpoint.NewRegistry(endpoint.RegistryConfig{Schema: s.db.Schema, Key: key, AllowedNetworks: loop})
		require.NoError(t, err)
		_, s.secret, err = reg.Create(ctx, s.db.Pool, endpoint.Endpoint{URL: srv.URL + s.path, EventTypes: []string{"order.*"}},
			endpoint.Change{Actor: "test"})
		require.NoError(t, err)
		ob, err := outbox.New(outbox.Config{Schema: s.db.Schema, WebhookAllowedNetworks: loop})
		require.NoError(t, err)
		for range 3 {
			require.NoError(t, pgx.BeginFunc(ctx, s.db.Pool, func(tx pgx.Tx) error {
				res, err := ob.Enqueue(ctx, tx, outbox.Event{ID: uuid.New(), Type: "order.paid", Payload: []byte(`{"order":"o_1"}`)},
					outbox.ToSubscribers())
				if err == nil {
					s.effects = append(s.effects, res.Effects[0].ID)
				}
				return err
			}))
		}
	}

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := execute(runCtx, "run", "--http-addr", "", "--log-level", "error",
			"--webhook-allow-cidrs", "127.0.0.0/8", "--endpoint-key", keyText,
			"--shard-database", "eu-1="+testdb.URL(), "--shard-database", "us-1="+testdb.URL(),
			"--shard-schema", "eu-1="+shards[0].db.Schema+",us-1="+shards[1].db.Schema)
		done <- err
	}()
	for _, s := range shards {
		op, err := sideeffects.NewOperator(s.db.Pool, sideeffects.OperatorConfig{Schema: s.db.Schema})
		require.NoError(t, err)
		for _, id := range s.effects {
			require.Eventually(t, func() bool {
				e, err := op.Get(ctx, id)
				return err == nil && e.State == outboxtype.StateConfirmed
			}, 30*time.Second, 20*time.Millisecond)
		}
	}
	got := srv.byPath()
	for _, s := range shards {
		require.Len(t, got[s.path], 3, "each of %s's events reached its own endpoint once", s.path)
		wh, err := standardwebhooks.NewWebhook(s.secret)
		require.NoError(t, err)
		for _, d := range got[s.path] {
			require.NoError(t, wh.Verify(d.body, d.header), "signed with %s's own endpoint's secret", s.path)
		}
	}
	cancel()
	require.NoError(t, <-done)
}
