//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/testdb"
	"github.com/outboxd/outboxd/migrations"
)

// cluster is a private Postgres cluster started from the installed
// binaries (as scripts/devdb starts one), so that a test can stop or
// restart it without disturbing the tests beside it.
type cluster struct {
	bin, data, sock string
	port            int
	as              []string
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(bins) == 0 {
		// Every test here needs them: skipped locally, a failure in CI
		// (CI set), where .ci/run installs PostgreSQL.
		const why = "no PostgreSQL server binaries (/usr/lib/postgresql/*/bin/initdb) to start a cluster of its own"
		if os.Getenv("CI") != "" {
			t.Fatal(why)
		}
		t.Skip(why)
	}
	sort.Strings(bins)
	c := &cluster{bin: filepath.Dir(bins[len(bins)-1])}
	dir, err := os.MkdirTemp("", "outboxd-pg-")
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
	require.NoError(t, err, "start the private Postgres: %s", out)
}

func (c *cluster) stop(t *testing.T) {
	t.Helper()
	out, err := c.run("pg_ctl", "-D", c.data, "-m", "fast", "-w", "stop")
	require.NoError(t, err, "stop the private Postgres: %s", out)
}

// restart stops the cluster (fast: open connections are cut) and starts it
// again, as pg_ctlcluster restart does.
func (c *cluster) restart(t *testing.T) {
	t.Helper()
	c.stop(t)
	c.start(t)
}

// migrated opens a pool on the cluster, closed when the test ends, and
// migrates schema "outboxd" in it.
func (c *cluster) migrated(t *testing.T) *testdb.DB {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, c.url())
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = migrations.Up(ctx, pool, "outboxd")
	require.NoError(t, err, "migrate the cluster's schema outboxd")
	return &testdb.DB{Pool: pool, Schema: "outboxd"}
}

func (c *cluster) url() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=2", c.port)
}
