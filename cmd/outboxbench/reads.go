package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/google/uuid"

	"github.com/outboxd/outboxd/cmd/internal/providerevents"
	"github.com/outboxd/outboxd/internal/fakes"
	"github.com/outboxd/outboxd/providers/stripe"
)

// readResult is one operator read at a history size, through the real
// binaries: a web view page or the provider-event endpoint served by
// `outboxd run`, or an `outboxctl` command (its wall time, process start
// and connection included).
type readResult struct {
	Read   string        `json:"read"`
	Via    string        `json:"via"`
	Median time.Duration `json:"median_ns"`
	Max    time.Duration `json:"max_ns"`
	// First is the untimed first pass: a fresh process's caches (the
	// overview's chart reads the whole hour once) and connections.
	First time.Duration `json:"first_ns"`
	// SeqScans counts sequential scans of side_effects, outbox_events and
	// river_job while the read ran, untimed pass included (Postgres's own
	// counters; the idle row shows what the dispatcher's background work
	// adds in as long).
	SeqScans seqScans `json:"seq_scans"`
}

// seqScans are sequential scans of the tables that grow with history.
type seqScans struct {
	Effects int64 `json:"side_effects"`
	Events  int64 `json:"outbox_events"`
	Jobs    int64 `json:"river_job"`
}

func (s seqScans) minus(o seqScans) seqScans {
	return seqScans{s.Effects - o.Effects, s.Events - o.Events, s.Jobs - o.Jobs}
}

func (s seqScans) String() string {
	return fmt.Sprintf("%d / %d / %d", s.Effects, s.Events, s.Jobs)
}

// Vias of the operator reads.
const (
	viaWeb    = "outboxd run --web-addr (HTTP)"
	viaEvents = "outboxd run --events-addr (HTTP)"
	viaCtl    = "outboxctl (process wall time)"
	viaIdle   = "none: the counters in as long, idle"
)

// readRepeats is how many times each read is timed (after one untimed).
const readRepeats = 7

// binaries are outboxd and outboxctl, built once per run.
type binaries struct{ outboxd, outboxctl string }

func buildBinaries(ctx context.Context, dir string) (*binaries, error) {
	b := &binaries{outboxd: filepath.Join(dir, "outboxd"), outboxctl: filepath.Join(dir, "outboxctl")}
	for bin, pkg := range map[string]string{b.outboxd: "github.com/outboxd/outboxd/cmd/outboxd", b.outboxctl: "github.com/outboxd/outboxd/cmd/outboxctl"} {
		if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("build %s: %v\n%s", pkg, err, out)
		}
	}
	return b, nil
}

// operatorReads times what an operator reads, against the tables as they
// are: every web view page and a provider event through a real `outboxd
// run`, and outboxctl's reads as the binary runs them.
func (b *bench) operatorReads(ctx context.Context) ([]readResult, error) {
	if b.bins == nil {
		dir, err := os.MkdirTemp("", "outboxbench-bin")
		if err != nil {
			return nil, err
		}
		b.cleanup = append(b.cleanup, func() { os.RemoveAll(dir) })
		if b.bins, err = buildBinaries(ctx, dir); err != nil {
			return nil, err
		}
	}
	// What the reads look for: a failed effect (the stuck list's kind), a
	// confirmed one, its event and an aggregate.
	var failedID, confirmedID, eventID uuid.UUID
	var failedKey, confirmedKey, ref string
	if err := b.pool.QueryRow(ctx, `SELECT id, `+b.schema+`.outboxd_idempotency_key(source_id, kind) FROM `+b.schema+`.side_effects
		WHERE phase = 'failed' LIMIT 1`).Scan(&failedID, &failedKey); err != nil {
		return nil, fmt.Errorf("a failed effect of the history: %w", err)
	}
	if err := b.pool.QueryRow(ctx, `SELECT id, source_id, `+b.schema+`.outboxd_idempotency_key(source_id, kind) FROM `+b.schema+`.side_effects
		WHERE kind = $1 ORDER BY id LIMIT 1`, historyKinds[1]).Scan(&confirmedID, &eventID, &confirmedKey); err != nil {
		return nil, fmt.Errorf("a confirmed effect of the history: %w", err)
	}
	if err := b.pool.QueryRow(ctx, `SELECT provider_ref FROM `+b.schema+`.side_effects
		WHERE provider_ref IS NOT NULL LIMIT 1`).Scan(&ref); err != nil {
		return nil, fmt.Errorf("a provider reference of the history: %w", err)
	}

	srv, err := b.startOutboxd(ctx)
	if err != nil {
		return nil, err
	}
	defer srv.stop()

	var out []readResult
	measure := func(read, via string, fn func() error) error {
		before, err := b.seqScans(ctx)
		if err != nil {
			return err
		}
		t0 := time.Now()
		if err := fn(); err != nil { // untimed: caches and connections
			return fmt.Errorf("%s: %w", read, err)
		}
		first := time.Since(t0)
		var ds []time.Duration
		for range readRepeats {
			t0 := time.Now()
			if err := fn(); err != nil {
				return fmt.Errorf("%s: %w", read, err)
			}
			ds = append(ds, time.Since(t0))
		}
		// Backends publish their counters when idle, within a second.
		time.Sleep(b.s.ReadsSettle)
		after, err := b.seqScans(ctx)
		if err != nil {
			return err
		}
		slices.Sort(ds)
		out = append(out, readResult{Read: read, Via: via, Median: ds[len(ds)/2], Max: ds[len(ds)-1], First: first, SeqScans: after.minus(before)})
		return nil
	}

	// The background: what a running dispatcher scans on its own in as
	// long as a read takes to measure.
	before, err := b.seqScans(ctx)
	if err != nil {
		return nil, err
	}
	time.Sleep(b.s.ReadsSettle + 200*time.Millisecond)
	after, err := b.seqScans(ctx)
	if err != nil {
		return nil, err
	}
	out = append(out, readResult{Read: "(idle dispatcher)", Via: viaIdle, SeqScans: after.minus(before)})

	pages := []struct{ name, path string }{
		{"web: overview", "/ui/"},
		{"web: search by key", "/ui/effects?q=" + url.QueryEscape(confirmedKey)},
		{"web: search by aggregate", "/ui/effects?aggregate_type=order&aggregate_id=ord_1"},
		{"web: search box, an order id (any aggregate type)", "/ui/effects?q=ord_1"},
		{"web: search box, a provider reference", "/ui/effects?q=" + url.QueryEscape(ref)},
		{"web: failed of one kind", "/ui/effects?state=failed&kind=" + historyKinds[0]},
		{"web: search all, first page", "/ui/effects?state="},
		{"web: effect page (failed)", "/ui/effects/" + failedID.String()},
		{"web: effect page (confirmed)", "/ui/effects/" + confirmedID.String()},
	}
	for _, p := range pages {
		if err := measure(p.name, viaWeb, func() error { return srv.get(ctx, p.path) }); err != nil {
			return nil, err
		}
	}
	var n int
	if err := measure("provider event: Stripe payment_intent.succeeded for an effect's key", viaEvents, func() error {
		n++
		return srv.stripeEvent(ctx, fmt.Sprintf("evt_bench_%d_%d_%d", b.history, n, time.Now().UnixNano()), confirmedKey)
	}); err != nil {
		return nil, err
	}
	ctl := []struct {
		name string
		args []string
	}{
		{"outboxctl dispatchers (the floor: start, connect, one small read)", []string{"dispatchers"}},
		{"outboxctl stuck", []string{"stuck"}},
		{"outboxctl stats (1h)", []string{"stats"}},
		{"outboxctl stats --window 24h", []string{"stats", "--window", "24h"}},
		{"outboxctl list --state failed --kind …", []string{"list", "--state", "failed", "--kind", historyKinds[0]}},
		{"outboxctl show <key>", []string{"show", failedKey}},
		{"outboxctl show <provider reference>", []string{"show", ref}},
		{"outboxctl events <event id>", []string{"events", eventID.String()}},
		{"outboxctl events --aggregate order:ord_1", []string{"events", "--aggregate", "order:ord_1"}},
		{"outboxctl drift", []string{"drift"}},
	}
	for _, c := range ctl {
		if err := measure(c.name, viaCtl, func() error { return b.outboxctl(ctx, c.args...) }); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// seqScans sums Postgres's sequential-scan counters of the tables that grow
// with history.
func (b *bench) seqScans(ctx context.Context) (seqScans, error) {
	var n seqScans
	err := b.pool.QueryRow(ctx, `SELECT
		coalesce(sum(seq_scan) FILTER (WHERE relname = 'side_effects'), 0),
		coalesce(sum(seq_scan) FILTER (WHERE relname = 'outbox_events'), 0),
		coalesce(sum(seq_scan) FILTER (WHERE relname = 'river_job'), 0)
		FROM pg_stat_user_tables WHERE schemaname = $1`, b.schema).Scan(&n.Effects, &n.Events, &n.Jobs)
	return n, err
}

func (b *bench) outboxctl(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, b.bins.outboxctl, append([]string{"--database-url", b.s.DatabaseURL, "--schema", b.schema}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.Stdout = io.Discard
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("outboxctl %v: %v: %s", args, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return nil
}

// outboxdServer is a running `outboxd run` serving the web view and the
// provider-event endpoint.
type outboxdServer struct {
	cmd          *exec.Cmd
	web, events  string
	stripeSecret string
	client       *http.Client
	exited       chan error
	stderr       *bytes.Buffer
}

const benchStripeSecret = "whsec_outboxbench"

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// startOutboxd starts `outboxd run` on the bench schema with the webhook
// provider (which nothing in the history uses) and waits until its web
// view answers.
func (b *bench) startOutboxd(ctx context.Context) (*outboxdServer, error) {
	web, err := freeAddr()
	if err != nil {
		return nil, err
	}
	events, err := freeAddr()
	if err != nil {
		return nil, err
	}
	s := &outboxdServer{web: "http://" + web, events: "http://" + events, stripeSecret: benchStripeSecret,
		client: &http.Client{Timeout: 30 * time.Second}, exited: make(chan error, 1), stderr: &bytes.Buffer{}}
	s.cmd = exec.Command(b.bins.outboxd, "run", "--database-url", b.s.DatabaseURL, "--schema", b.schema,
		"--http-addr", "", "--log-level", "error",
		"--webhook-secret", "whsec_"+base64.StdEncoding.EncodeToString([]byte("outboxbench-signing-secret-32byt")),
		"--web-addr", web, "--events-addr", events, "--stripe-webhook-secret", benchStripeSecret)
	s.cmd.Stderr = s.stderr
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { s.exited <- s.cmd.Wait() }()
	deadline := time.Now().Add(time.Minute)
	for {
		select {
		case err := <-s.exited:
			return nil, fmt.Errorf("outboxd run exited: %v: %s", err, bytes.TrimSpace(s.stderr.Bytes()))
		default:
		}
		if err := s.get(ctx, "/ui/"); err == nil {
			return s, nil
		} else if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("outboxd's web view did not answer within a minute: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (s *outboxdServer) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

func (s *outboxdServer) get(ctx context.Context, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.web+path, nil)
	if err != nil {
		return err
	}
	return s.do(req)
}

func (s *outboxdServer) do(req *http.Request) error {
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: HTTP %d: %s", req.Method, req.URL.Path, resp.StatusCode, bytes.TrimSpace(body))
	}
	return nil
}

// stripeEvent posts a signed payment_intent.succeeded event carrying key.
func (s *outboxdServer) stripeEvent(ctx context.Context, id, key string) error {
	body, err := json.Marshal(map[string]any{"id": id, "object": "event", "type": "payment_intent.succeeded",
		"created": time.Now().Unix(), "api_version": "2024-06-20", "data": map[string]any{"object": map[string]any{
			"id": "pi_bench", "object": "payment_intent", "status": "succeeded", "metadata": map[string]any{stripe.MetadataKey: key}}}})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.events+providerevents.StripePath, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header = fakes.StripeSignatureHeaders(s.stripeSecret, body)
	return s.do(req)
}
