//go:build chaos

package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/testdb"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/webhook"
)

// cluster is a private Postgres cluster started from the installed
// binaries (as scripts/devdb starts one), so that a test can stop it.
type cluster struct {
	bin, data, sock string
	port            int
	as              []string
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(bins) == 0 {
		t.Skip("no PostgreSQL binaries to start a cluster of its own")
	}
	sort.Strings(bins)
	c := &cluster{bin: filepath.Dir(bins[len(bins)-1])}
	dir, err := os.MkdirTemp("", "outboxd-shard-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	c.data, c.sock = filepath.Join(dir, "data"), dir
	if os.Geteuid() == 0 {
		// Postgres refuses to run as root.
		c.as = []string{"runuser", "-u", "postgres", "--"}
		require.NoError(t, exec.Command("chown", "postgres", dir).Run())
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	c.port = l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	out, err := c.run("initdb", "-D", c.data, "-U", "postgres", "-A", "trust")
	require.NoError(t, err, "initdb: %s", out)
	c.start(t)
	t.Cleanup(func() { _, _ = c.run("pg_ctl", "-D", c.data, "-m", "immediate", "stop") })
	return c
}

func (c *cluster) run(name string, args ...string) ([]byte, error) {
	argv := append(slices.Clone(c.as), append([]string{filepath.Join(c.bin, name)}, args...)...)
	return exec.Command(argv[0], argv[1:]...).CombinedOutput()
}

func (c *cluster) start(t *testing.T) {
	t.Helper()
	out, err := c.run("pg_ctl", "-D", c.data, "-l", filepath.Join(c.sock, "log"), "-w",
		"-o", fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c max_connections=200 -c fsync=off", c.port, c.sock), "start")
	require.NoError(t, err, "start the shard's Postgres: %s", out)
}

func (c *cluster) stop(t *testing.T) {
	t.Helper()
	out, err := c.run("pg_ctl", "-D", c.data, "-m", "fast", "-w", "stop")
	require.NoError(t, err, "stop the shard's Postgres: %s", out)
}

func (c *cluster) url() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=2", c.port)
}

// shardOf is one shard of the fleet test: its name, URL, schema and pool.
type shardOf struct {
	name, url, schema string
	pool              *pgxpool.Pool
	keys              []string
}

// TestChaosShards: three shards (two schemas of the local cluster and a
// cluster of its own), each with a webhook backlog, drained by two outboxd
// replicas that each serve all three, against one limit for the whole
// fleet; replicas are SIGKILLed, and the third shard's Postgres is stopped
// for 30 s mid-drain. The others keep dispatching while it is down, every
// effect of every shard is delivered with its own key, the receiver never
// gets more than the limit over any 10 s window, and the stopped shard
// drains once it is back.
func TestChaosShards(t *testing.T) {
	t.Parallel()
	const rate, perShard = 50, 400
	w := newWorld(t)
	ctx := context.Background()
	priv := newCluster(t)
	migrate := exec.Command(w.bin, "migrate", "--database-url", priv.url(), "--schema", "outboxd")
	out, err := migrate.CombinedOutput()
	require.NoError(t, err, "migrate the third shard: %s", out)
	privPool, err := pgxpool.New(ctx, priv.url())
	require.NoError(t, err)
	t.Cleanup(privPool.Close)
	second := testdb.NewFresh(t)
	shards := []*shardOf{
		{name: "eu-1", url: testdb.URL(), schema: w.db.Schema, pool: w.db.Pool},
		{name: "us-1", url: testdb.URL(), schema: second.Schema, pool: second.Pool},
		{name: "ap-1", url: priv.url(), schema: "outboxd", pool: privPool},
	}
	port := w.recv.URL[strings.LastIndex(w.recv.URL, ":")+1:]
	for _, s := range shards {
		ob, err := outbox.New(outbox.Config{Jobs: outbox.JobsByDispatcher, Schema: s.schema, Providers: []providers.Validator{
			webhook.Schema{AllowedNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}},
		}})
		require.NoError(t, err)
		require.NoError(t, pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			for i := range perShard {
				order := fmt.Sprintf("%s-%05d", s.name, i)
				res, err := ob.Enqueue(ctx, tx, outbox.Event{ID: outbox.EventID("chaos-shards", order), Type: "order.paid"},
					outbox.EffectOf("webhook.order_paid", webhook.Payload{URL: "http://localhost:" + port + "/hook",
						Body: json.RawMessage(`{"order": "` + order + `"}`)}))
				if err != nil {
					return err
				}
				w.marker[res.Effects[0].Key] = order
				w.ids[res.Effects[0].Key] = res.Effects[0].ID
				s.keys = append(s.keys, res.Effects[0].Key)
			}
			return nil
		}))
	}

	args := []string{"run", "--http-addr", "", "--log-level", "error",
		"--webhook-secret", secret, "--webhook-allow-cidrs", "127.0.0.0/8", "--webhook-timeout", "2s",
		"--job-timeout", "5s", "--rescue-after", "8s", "--retry-base-delay", "100ms", "--retry-max-delay", "2s",
		"--concurrency", "webhook=100", "--shutdown-timeout", "5s",
		// Two replicas, two shards on the local cluster: 20 of its 100
		// connections, beside the test running next to this one.
		"--db-max-conns", "5",
		"--limit", fmt.Sprintf("webhook:localhost:%s=%d", port, rate)}
	var schemas []string
	for _, s := range shards {
		args = append(args, "--shard-database", s.name+"="+s.url)
		schemas = append(schemas, s.name+"="+s.schema)
	}
	args = append(args, "--shard-schema", strings.Join(schemas, ","))
	start := func() *exec.Cmd {
		cmd := exec.Command(w.bin, args...)
		cmd.Stderr = os.Stderr
		require.NoError(t, cmd.Start())
		return cmd
	}
	cmds := []*exec.Cmd{start(), start()}
	t.Cleanup(func() {
		for _, cmd := range cmds {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			_ = cmd.Wait()
		}
	})
	kill := func(i int) {
		require.NoError(t, cmds[i].Process.Signal(syscall.SIGKILL))
		_ = cmds[i].Wait()
		cmds[i] = start()
		t.Logf("killed replica %d", i)
	}

	time.Sleep(3 * time.Second)
	kill(0)
	time.Sleep(2 * time.Second)
	priv.stop(t)
	down := time.Now()
	t.Log("shard ap-1's Postgres stopped")
	time.Sleep(5 * time.Second)
	kill(1)
	time.Sleep(25 * time.Second)
	up := time.Now()
	priv.start(t)
	t.Log("shard ap-1's Postgres started again")
	time.Sleep(2 * time.Second)
	kill(0)

	// Every shard drains: the one that was down once it is back.
	deadline := time.Now().Add(4 * time.Minute)
	for _, s := range shards {
		for {
			var left int
			err := s.pool.QueryRow(ctx, `SELECT count(*) FROM `+s.schema+`.side_effects WHERE state <> 'confirmed'`).Scan(&left)
			if err == nil && left == 0 {
				break
			}
			require.True(t, time.Now().Before(deadline), "shard %s: %d effects not confirmed (%v)", s.name, left, err)
			time.Sleep(200 * time.Millisecond)
		}
	}
	w.checkKeys(t)

	// The other shards kept dispatching while ap-1 was down.
	byShard := map[string]int{}
	var at []time.Time
	for _, d := range w.recv.Deliveries() {
		at = append(at, d.At)
		// A call in flight when the database stopped may still arrive
		// (its effect was fired before): the window starts 3 s later.
		if d.At.After(down.Add(3*time.Second)) && d.At.Before(up) {
			var body struct{ Order string }
			require.NoError(t, json.Unmarshal(d.Body, &body))
			name, _, _ := strings.Cut(body.Order, "-0")
			byShard[name]++
		}
	}
	t.Logf("delivered while ap-1 was down (%s): %v", up.Sub(down).Round(time.Second), byShard)
	require.Positive(t, byShard["eu-1"]+byShard["us-1"], "the shards that were up kept dispatching")
	require.Zero(t, byShard["ap-1"], "nothing of ap-1 could go out while its database was down")

	// One limit for the whole fleet.
	most := busiest(at, 10*time.Second)
	t.Logf("%d requests in %s; at most %d in any 10 s (limit %d for all shards)", len(at), at[len(at)-1].Sub(at[0]).Round(time.Second), most, 10*rate)
	require.LessOrEqual(t, most, 10*rate*105/100, "the shards together stayed within the limit")
}
