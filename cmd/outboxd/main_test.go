package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/cli"
	"github.com/outboxd/outboxd/internal/fakes"
	"github.com/outboxd/outboxd/internal/store"
	"github.com/outboxd/outboxd/internal/testdb"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/sendgrid"
	"github.com/outboxd/outboxd/providers/sendgrid/sendgridschema"
	"github.com/outboxd/outboxd/providers/stripe"
	"github.com/outboxd/outboxd/providers/stripe/stripeschema"
	"github.com/outboxd/outboxd/providers/webhook"
	"github.com/outboxd/outboxd/sideeffects"
)

const testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// execute runs outboxd with args in-process and returns its output.
func execute(ctx context.Context, args ...string) (string, error) {
	cmd := newRootCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	return out.String(), err
}

func TestMigrateTwiceIsANoOp(t *testing.T) {
	t.Parallel()
	db := testdb.NewEmpty(t)
	out, err := execute(context.Background(), "migrate", "--database-url", testdb.URL(), "--schema", db.Schema)
	require.NoError(t, err)
	require.Contains(t, out, "applied")
	out, err = execute(context.Background(), "migrate", "--database-url", testdb.URL(), "--schema", db.Schema)
	require.NoError(t, err)
	require.Contains(t, out, "up to date")
}

func TestDemoConfirmsEveryEffect(t *testing.T) {
	t.Parallel()
	out, err := execute(context.Background(), "demo", "--database-url", testdb.URL())
	require.NoError(t, err, out)
	require.Contains(t, out, "all 6 effects confirmed")
	require.Regexp(t, `web view: http://127\.0\.0\.1:\d+/ui/ \(read-only`, out)
	require.Contains(t, out, "(HTTP 500: in doubt) -> fired", "a 5xx does not prove the receiver did nothing: re-fired with the same id")
	require.Contains(t, out, "HTTP 201, Idempotent-Replayed: true; orders, events, effects: [3 3 6] before, [3 3 6] after")
	require.Contains(t, out, `same key, changed amount: HTTP 422 {"error":{"code":"idempotency_key_reused"`)
	require.Contains(t, out, "4 requests, 4 with valid signatures, 3 distinct webhook-ids for 3 webhook effects")
	require.Contains(t, out, "sendgrid: 2 mails")
	require.Contains(t, out, `delivered twice: HTTP 200 {"processed": 1, "duplicates": 0}; HTTP 200 {"processed": 0, "duplicates": 1} -> the email is confirmed once`)
	require.Regexp(t, `email\.receipt .*\(sendgrid HTTP 500 \(empty body\): in doubt\) -> confirmed .* ref msg_demo_accepted`, out)
	require.Regexp(t, `stripe\.capture .* confirmed .* ref pi_1001`, out)
}

func TestRunRejectsBadConfiguration(t *testing.T) {
	t.Setenv("OUTBOXD_WEBHOOK_SECRET", "")
	cases := []struct {
		args    []string
		env     map[string]string
		mention string
	}{
		{[]string{"run"}, nil, "OUTBOXD_WEBHOOK_SECRET"},
		{[]string{"run", "--webhook-secret", "nope"}, nil, "whsec_"},
		{[]string{"run", "--webhook-secret", testSecret, "--webhook-allow-cidrs", "10.0.0.0"}, nil, "OUTBOXD_WEBHOOK_ALLOW_CIDRS"},
		{[]string{"run", "--webhook-secret", testSecret, "--job-timeout", "5s"}, nil, "--job-timeout"},
		{[]string{"run"}, map[string]string{"OUTBOXD_JOB_TIMEOUT": "soon"}, "invalid OUTBOXD_JOB_TIMEOUT"},
		{[]string{"run", "--log-level", "loud"}, nil, "OUTBOXD_LOG_LEVEL"},
		{[]string{"run", "--webhook-secret", testSecret, "--in-doubt-policy", "email.x=sometimes"}, nil, "OUTBOXD_IN_DOUBT_POLICY"},
		{[]string{"run", "--stripe-api-key", "sk_test_1", "--stripe-api-base", "api.stripe.com"}, nil, "STRIPE_API_BASE"},
		{[]string{"run", "--sendgrid-api-key", "SG.x", "--sendgrid-timeout", "2m"}, nil, "--sendgrid-timeout"},
		{[]string{"run", "--no-such-flag"}, nil, "unknown flag"},
		{[]string{"run", "--webhook-secret", testSecret, "--database-url", "::not a url"}, nil, "DATABASE_URL"},
		{[]string{"run", "--webhook-secret", testSecret, "--sweep-interval", "500ms"}, nil, "--sweep-interval"},
		{[]string{"run", "--webhook-secret", testSecret, "--stripe-key-window", "30m"}, nil, "--stripe-key-window"},
		{[]string{"run", "--webhook-secret", testSecret, "--webhook-key-window", "1m"}, nil, "--webhook-key-window"},
		{[]string{"run", "--webhook-secret", testSecret, "--max-attempts", "-3"}, nil, "--max-attempts"},
		{[]string{"run", "--webhook-secret", testSecret, "--retry-base-delay", "-1s"}, nil, "--retry-base-delay"},
		{[]string{"run", "--webhook-secret", testSecret, "--retention", "-1h"}, nil, "--retention"},
		{[]string{"run", "--webhook-secret", testSecret, "--retention", "12h"}, nil, "key window"},
		{[]string{"run", "--webhook-secret", testSecret, "--completed-job-retention", "10s"}, nil, "OUTBOXD_COMPLETED_JOB_RETENTION"},
		{[]string{"run", "--webhook-secret", testSecret, "--webhook-key-window", "800h"}, nil, "--retention"},
		{[]string{"run", "--webhook-secret", testSecret, "--concurrency", "webhook=0"}, nil, "--concurrency"},
		{[]string{"run", "--webhook-secret", testSecret, "--schema", "a,public"}, nil, "--schema"},
		{[]string{"run", "--webhook-secret", testSecret, "--schema", "Upper"}, nil, "--schema"},
		{[]string{"migrate", "--schema", "a,public"}, nil, "--schema"},
		{[]string{"run", "--webhook-secret", testSecret, "--stripe-webhook-secret", "sk_live_1"}, nil, "STRIPE_WEBHOOK_SECRET"},
		{[]string{"run", "--webhook-secret", testSecret, "--sendgrid-event-public-key", "not a key"}, nil, "SENDGRID_EVENT_PUBLIC_KEY"},
		{[]string{"run", "--webhook-secret", testSecret, "--web-addr", "127.0.0.1:0", "--web-admin-token", "short"}, nil, "OUTBOXD_WEB_ADMIN_TOKEN"},
		{[]string{"run", "--webhook-secret", testSecret, "--web-admin-token", "0123456789abcdef0123"}, nil, "--web-addr"},
		{[]string{"run", "--webhook-secret", testSecret, "--web-addr", "127.0.0.1:0", "--web-operator-tokens", "ada=short"}, nil, "ada's token must be at least 16"},
		{[]string{"run", "--webhook-secret", testSecret, "--web-addr", "127.0.0.1:0", "--web-trusted-user-header", "X-Forwarded-User"}, nil, "go together"},
		{[]string{"run", "--webhook-secret", testSecret, "--web-addr", "127.0.0.1:0", "--web-trusted-user-header", "X-Forwarded-User", "--web-trusted-proxies", "proxy.internal"}, nil, "give addresses or CIDRs"},
		{[]string{"run", "--webhook-secret", testSecret, "--web-operator-tokens", "ada=0123456789abcdef0123"}, nil, "--web-operator-tokens (OUTBOXD_WEB_OPERATOR_TOKENS) is set but the web view is off"},
		// A trusted range as wide as a whole network lets anyone there act
		// as anyone.
		{[]string{"run", "--webhook-secret", testSecret, "--web-addr", "127.0.0.1:0", "--web-trusted-user-header", "X-Forwarded-User", "--web-trusted-proxies", "0.0.0.0/0"}, nil, "--web-trust-wide-proxies"},
		{[]string{"run", "--webhook-secret", testSecret, "--web-addr", "127.0.0.1:0", "--web-trusted-user-header", "X-Forwarded-User", "--web-trusted-proxies", "10.0.0.0/8"}, nil, "wider than a /16"},
		{[]string{"run", "--webhook-secret", testSecret, "--web-addr", "127.0.0.1:0", "--web-trusted-user-header", "X-Forwarded-User", "--web-trusted-proxies", "::/0"}, nil, "wider than a /48"},
		// Brokers: what can be told without reaching them.
		{[]string{"run", "--nats-url", "nats://127.0.0.1:4222"}, nil, "--nats-streams"},
		{[]string{"run", "--nats-streams", "ORDERS"}, nil, "--nats-url"},
		{[]string{"run", "--kafka-brokers", "127.0.0.1:9092", "--kafka-sasl-mechanism", "gssapi"}, nil, "OUTBOXD_KAFKA_SASL_MECHANISM"},
		{[]string{"run", "--kafka-brokers", "127.0.0.1:9092", "--kafka-sasl-mechanism", "plain"}, nil, "--kafka-sasl-user"},
		{[]string{"run", "--kafka-brokers", "127.0.0.1:9092", "--kafka-timeout", "0s"}, nil, "--kafka-timeout"},
		{[]string{"run", "--kafka-brokers", "127.0.0.1:9092", "--kafka-timeout", "2m"}, nil, "must exceed --kafka-timeout"},
		// Limits name a provider and a rate.
		{[]string{"run", "--webhook-secret", testSecret, "--limit", "webhook:api.partner.example=fast"}, nil, "--limit (OUTBOXD_LIMITS)"},
		{[]string{"run", "--webhook-secret", testSecret, "--limit", "twilio=5"}, nil, `no provider "twilio"`},
		{[]string{"run", "--webhook-secret", testSecret, "--limit", "webhook:x=0"}, nil, "positive number"},
		{[]string{"run", "--webhook-secret", testSecret, "--limit", "webhook:x=1e-12"}, nil, "at least 0.001"},
		{[]string{"run", "--webhook-secret", testSecret, "--limit", "webhook:x=4.5/any-second"}, nil, "a whole number of requests"},
		{[]string{"run", "--webhook-secret", testSecret, "--shard", "EU 1"}, nil, "--shard (OUTBOXD_SHARD)"},
		{[]string{"run", "--webhook-secret", testSecret, "--limit", "webhook:" + strings.Repeat("a", 400) + "=5"}, nil, "at most 300"},
		{[]string{"run", "--webhook-secret", testSecret, "--tenant-window", "0"}, nil, "--tenant-window (OUTBOXD_TENANT_WINDOW) is 0"},
		{[]string{"run", "--webhook-secret", testSecret, "--webhook-allow-cidrs", "::ffff:0:0/96"}, nil, "write it as 0.0.0.0/0"},
		{[]string{"run", "--webhook-secret", testSecret, "--name", "api blue"}, nil, `--name (OUTBOXD_NAME) is "api blue"`},
		{[]string{"run", "--webhook-secret", testSecret, "--tenant-weight", "acme=heavy"}, nil, "--tenant-weight (OUTBOXD_TENANT_WEIGHTS) acme=heavy"},
		// The web view beyond loopback is a deliberate choice, and reads
		// then need a credential unless anonymous reads are asked for.
		{[]string{"run", "--webhook-secret", testSecret, "--web-addr", "0.0.0.0:0"}, nil, "--web-expose"},
		{[]string{"run", "--webhook-secret", testSecret, "--web-addr", ":8082"}, nil, "--web-expose"},
		{[]string{"run", "--webhook-secret", testSecret, "--web-addr", "[::]:0", "--web-admin-token", "0123456789abcdef0123"}, nil, "--web-expose"},
		{[]string{"run", "--webhook-secret", testSecret, "--web-addr", "0.0.0.0:0", "--web-expose"}, nil, "--web-read-token"},
		{[]string{"run", "--webhook-secret", testSecret, "--web-addr", "0.0.0.0:0", "--web-expose", "--web-read-token", "short"}, nil, "OUTBOXD_WEB_READ_TOKEN"},
	}
	for _, tc := range cases {
		for k, v := range tc.env {
			t.Setenv(k, v)
		}
		_, err := execute(context.Background(), tc.args...)
		require.Error(t, err, tc.args)
		require.Equal(t, 2, cli.ExitCode(err), "%v: want a usage error (exit 2), got %v", tc.args, err)
		require.Contains(t, err.Error(), tc.mention, tc.args)
		for k := range tc.env {
			t.Setenv(k, "")
		}
	}
}

func TestRunRefusesUnmigratedSchema(t *testing.T) {
	t.Parallel()
	db := testdb.NewEmpty(t)
	_, err := execute(context.Background(), "run", "--database-url", testdb.URL(), "--schema", db.Schema,
		"--webhook-secret", testSecret, "--http-addr", "")
	require.ErrorContains(t, err, "outboxd migrate")
}

func TestRunServesHealthAndDrainsOnSignal(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := execute(ctx, "run", "--database-url", testdb.URL(), "--schema", db.Schema,
			"--webhook-secret", testSecret, "--http-addr", addr, "--log-level", "error")
		done <- err
	}()

	// Wait until ready, as an orchestrator's readiness probe would.
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(fmt.Sprintf("http://%s/readyz", addr))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		require.True(t, time.Now().Before(deadline), "outboxd never became ready")
		time.Sleep(50 * time.Millisecond)
	}
	resp, err := http.Get(fmt.Sprintf("http://%s/healthz", addr))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	resp, err = http.Get(fmt.Sprintf("http://%s/metrics", addr))
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Contains(t, string(body), "outboxd_effects_scrape_ok 1")
	require.Contains(t, string(body), "outboxd_limits_scrape_ok 1")
	require.Contains(t, string(body), "outboxd_tenants_scrape_ok 1")
	require.Contains(t, string(body), "go_goroutines")

	cancel() // what SIGTERM does through signal.NotifyContext
	require.NoError(t, <-done)
}

func TestHelpListsEveryEnvironmentVariable(t *testing.T) {
	t.Parallel()
	out, err := execute(context.Background(), "run", "--help")
	require.NoError(t, err)
	for _, env := range []string{"DATABASE_URL", "OUTBOXD_SCHEMA", "OUTBOXD_WEBHOOK_SECRET", "OUTBOXD_WEBHOOK_ALLOW_CIDRS",
		"OUTBOXD_CONCURRENCY", "OUTBOXD_JOB_TIMEOUT", "OUTBOXD_RESCUE_AFTER", "OUTBOXD_HTTP_ADDR", "OUTBOXD_SHUTDOWN_TIMEOUT",
		"STRIPE_API_KEY", "STRIPE_API_BASE", "SENDGRID_API_KEY", "SENDGRID_API_HOST", "OUTBOXD_IN_DOUBT_POLICY",
		"OUTBOXD_EVENTS_ADDR", "STRIPE_WEBHOOK_SECRET", "SENDGRID_EVENT_PUBLIC_KEY", "OUTBOXD_WEB_ADDR", "OUTBOXD_WEB_ADMIN_TOKEN"} {
		require.True(t, strings.Contains(out, "$"+env+"]"), "--help lacks %s", env)
	}
}

func TestRunLogsNoSecretsAndNamesEveryEffect(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	const stripeKey, sendgridKey = "sk_test_4eC39HqLyjWDarjtT1zdp7dc", "SG.secret-sendgrid-key"

	recv, err := fakes.NewReceiver(testSecret)
	require.NoError(t, err)
	defer recv.Close()
	fs := fakes.NewFakeStripe()
	defer fs.Close()
	fs.Respond("/v1/refunds", func(w http.ResponseWriter, r *http.Request) int {
		// Echo the credential back, as some servers do in errors.
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(401)
		auth := r.Header.Get("Authorization")
		fmt.Fprintf(w, `{"error": {"type": "invalid_request_error %s", "code": "key_%s", "message": "bad key %s"}}`, auth, auth, auth)
		return 401
	})
	sg := fakes.NewFakeSendGrid()
	defer sg.Close()
	sg.Respond(func(w http.ResponseWriter, r *http.Request) int {
		w.WriteHeader(400)
		fmt.Fprintf(w, `{"errors": [{"message": "unauthorized: %s"}]}`, r.Header.Get("Authorization"))
		return 400
	})

	ob, err := outbox.New(outbox.Config{Jobs: outbox.JobsInTransaction, Schema: db.Schema, Providers: []providers.Validator{
		webhook.Schema{AllowedNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}, stripe.Schema{}, sendgrid.Schema{},
	}})
	require.NoError(t, err)
	var effects []outbox.EffectResult
	err = pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		port := recv.URL[strings.LastIndex(recv.URL, ":")+1:]
		res, err := ob.Enqueue(ctx, tx, outbox.Event{ID: uuid.New(), Type: "order.paid"},
			outbox.EffectOf("webhook.order_paid", webhook.Payload{URL: "http://localhost:" + port + "/o", Body: json.RawMessage(`{}`)}),
			outbox.EffectOf("stripe.refund", stripeschema.RefundCreate{PaymentIntent: "pi_1"}),
			outbox.EffectOf("email.receipt", sendgridschema.Payload{From: sendgridschema.Address{Email: "s@example.com"}, To: []sendgridschema.Address{{Email: "a@example.com"}}, Subject: "s", Text: "t"}))
		if err == nil {
			effects = res.Effects
		}
		return err
	})
	require.NoError(t, err)

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var logs lockedBuffer
	done := make(chan error, 1)
	go func() {
		cmd := newRootCmd()
		cmd.SetOut(&logs)
		cmd.SetErr(&logs)
		cmd.SetArgs([]string{"run", "--name", "api-blue", "--database-url", testdb.URL(), "--schema", db.Schema, "--http-addr", "",
			"--log-format", "json", "--log-level", "debug",
			"--webhook-secret", testSecret, "--webhook-allow-cidrs", "127.0.0.0/8",
			"--stripe-api-key", stripeKey, "--stripe-api-base", fs.URL,
			"--sendgrid-api-key", sendgridKey, "--sendgrid-api-host", sg.URL})
		done <- cmd.ExecuteContext(runCtx)
	}()

	op, err := sideeffects.NewOperator(db.Pool, sideeffects.OperatorConfig{Schema: db.Schema})
	require.NoError(t, err)
	want := map[string]outboxtype.State{"webhook.order_paid": outboxtype.StateConfirmed,
		"stripe.refund": outboxtype.StateFailed, "email.receipt": outboxtype.StateFailed}
	secrets := []string{testSecret, strings.TrimPrefix(testSecret, "whsec_"), stripeKey, sendgridKey}
	deadline := time.Now().Add(30 * time.Second)
	for _, e := range effects {
		for {
			got, err := op.Get(ctx, e.ID)
			require.NoError(t, err)
			if got.State == want[e.Kind] {
				for _, secret := range secrets {
					require.NotContains(t, deref(got.LastError), secret, "a secret reached last_error")
				}
				break
			}
			require.True(t, time.Now().Before(deadline), "%s: %s", e.Kind, got.State)
			time.Sleep(20 * time.Millisecond)
		}
	}
	// River records the jobs' errors asynchronously.
	var jobErrors string
	require.Eventually(t, func() bool {
		err := db.Pool.QueryRow(ctx, `SELECT coalesce(string_agg(errors::text, ' '), '') FROM `+db.Schema+`.river_job`).Scan(&jobErrors)
		return err == nil && strings.Contains(jobErrors, "stripe") && strings.Contains(jobErrors, "sendgrid")
	}, 30*time.Second, 20*time.Millisecond, "both failures reach River's job errors")
	require.Contains(t, jobErrors, "[redacted]", "the echoed keys were there to redact")
	for _, secret := range secrets {
		require.NotContains(t, jobErrors, secret, "a secret reached River's job errors")
	}
	// The process recorded the settings it dispatches with, and no secret.
	var settings, record string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT id, settings::text FROM `+db.Schema+`.outboxd_dispatchers`).Scan(&record, &settings))
	require.Regexp(t, fmt.Sprintf(`^api-blue-%d-20\d{6}T\d{6}\.\d{3}Z$`, os.Getpid()), record, "named as asked, with its pid and start time")
	require.Contains(t, settings, fs.URL, "the Stripe API host it talks to")
	require.Contains(t, settings, `"endpoint_disable_after"`, "every setting that changes behaviour")
	require.Contains(t, settings, `"tenant_window": 32`)
	require.Contains(t, settings, sg.URL)
	require.Contains(t, settings, "127.0.0.0/8")
	for _, secret := range secrets {
		require.NotContains(t, settings, secret, "a secret reached the dispatcher record")
	}
	cancel()
	require.NoError(t, <-done)
	var stopped bool
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT stopped_at IS NOT NULL FROM `+db.Schema+`.outboxd_dispatchers`).Scan(&stopped))
	require.True(t, stopped, "marked stopped on the way out")

	out := logs.String()
	for _, secret := range secrets {
		require.NotContains(t, out, secret, "a secret reached the logs")
	}
	effectLines := 0
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &rec), "every log line is JSON: %s", line)
		if _, ok := rec["effect_id"]; ok {
			effectLines++
			require.Contains(t, rec, "kind", line)
			require.Contains(t, rec, "attempt", line)
		}
	}
	require.GreaterOrEqual(t, effectLines, 3, "each effect's outcome is logged")
}

// lockedBuffer is a bytes.Buffer safe for the concurrent writes of a
// running outboxd.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestDatabasePasswordNeverInErrors(t *testing.T) {
	t.Parallel()
	for _, dsn := range []string{
		"postgres://postgres:hunter2secret@127.0.0.1:1/db?sslmode=disable",
		"postgres://postgres@127.0.0.1:1/db?password=hunter2secret&sslmode=disable",
		"postgres://postgres@127.0.0.1:1/db?password=hunter2secret&sslmode=bogus",
		"host=127.0.0.1 port=1 user=postgres password=hunter2secret sslmode=disable",
		"host=127.0.0.1 port=1 user=postgres password='hunter2secret x' sslmode=disable",
		"host=127.0.0.1 port=1 user=postgres password=hunter2secret sslmode=bogus",
	} {
		_, err := execute(context.Background(), "migrate", "--database-url", dsn)
		require.Error(t, err, dsn)
		require.NotContains(t, err.Error(), "hunter2secret", dsn)
	}
}

// The whole loop on a running outboxd: SendGrid answers 500 after
// accepting a mail, so the email is parked in doubt; SendGrid's signed
// processed event, delivered three times to the events endpoint, confirms
// it once, and /metrics counts it.
func TestRunConfirmsAnInDoubtEmailFromItsProviderEvent(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	sg := fakes.NewFakeSendGrid()
	t.Cleanup(sg.Close)
	sg.Respond(fakes.Status(500))
	signer, err := fakes.NewSendGridEventSigner()
	require.NoError(t, err)
	addrs := make([]string, 2)
	for i := range addrs {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addrs[i] = l.Addr().String()
		require.NoError(t, l.Close())
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := execute(ctx, "run", "--database-url", testdb.URL(), "--schema", db.Schema, "--log-level", "error",
			"--sendgrid-api-key", "SG.test", "--sendgrid-api-host", sg.URL, "--retry-base-delay", "10ms",
			"--http-addr", addrs[0], "--events-addr", addrs[1], "--sendgrid-event-public-key", signer.PublicKey())
		done <- err
	}()
	t.Cleanup(func() { cancel(); <-done })

	ob, err := outbox.New(outbox.Config{Jobs: outbox.JobsInTransaction, Schema: db.Schema})
	require.NoError(t, err)
	var eff outbox.EffectResult
	require.NoError(t, pgx.BeginFunc(context.Background(), db.Pool, func(tx pgx.Tx) error {
		res, err := ob.Enqueue(context.Background(), tx, outbox.Event{ID: uuid.New(), Type: "order.paid"}, outbox.Effect{
			Kind: "email.receipt", Provider: "sendgrid", Payload: json.RawMessage(
				`{"from": {"email": "shop@example.com"}, "to": [{"email": "ada@example.com"}], "subject": "Receipt", "text": "Thanks"}`)})
		if err == nil {
			eff = res.Effects[0]
		}
		return err
	}))
	op, err := sideeffects.NewOperator(db.Pool, sideeffects.OperatorConfig{Schema: db.Schema})
	require.NoError(t, err)
	state := func() *outboxtype.Effect {
		e, err := op.Get(context.Background(), eff.ID)
		require.NoError(t, err)
		return e
	}
	require.Eventually(t, func() bool { return state().State == outboxtype.StateFailed }, 30*time.Second, 20*time.Millisecond)
	require.Contains(t, *state().LastError, "in doubt: not re-sent")

	body, err := json.Marshal([]map[string]any{fakes.SendGridEvent("sg_evt_1", "processed", eff.Key, "msg_accepted", time.Now())})
	require.NoError(t, err)
	for range 3 {
		req, err := http.NewRequest(http.MethodPost, "http://"+addrs[1]+"/events/sendgrid", bytes.NewReader(body))
		require.NoError(t, err)
		req.Header = signer.Headers(body)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}
	e := state()
	require.Equal(t, outboxtype.StateConfirmed, e.State)
	require.Equal(t, "msg_accepted", *e.ProviderRef)
	require.Len(t, sg.Requests(), 1, "never re-sent")

	resp, err := http.Get("http://" + addrs[0] + "/metrics")
	require.NoError(t, err)
	metrics, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Contains(t, string(metrics), `outboxd_provider_events_total{kind="email.receipt",provider="sendgrid",result="confirmed"} 1`)
	require.Contains(t, string(metrics), `outboxd_deliveries_total{kind="email.receipt",status="processed"} 1`)
}

// TestSecretsAreNamedNeverEchoed: a value of a secret-bearing flag or
// variable that cannot be read is named in the error, never shown, and the
// valid secrets beside it are not shown either.
func TestSecretsAreNamedNeverEchoed(t *testing.T) {
	const secretish = "whsec_TOPSECRETVALUE"
	for _, tc := range []struct {
		args []string
		env  map[string]string
		name string
	}{
		{[]string{"run", "--webhook-secret", testSecret, "--webhook-previous-secrets", `"` + secretish}, nil, "--webhook-previous-secrets (OUTBOXD_WEBHOOK_PREVIOUS_SECRETS)"},
		{[]string{"run", "--webhook-secret", testSecret}, map[string]string{"OUTBOXD_WEBHOOK_PREVIOUS_SECRETS": `"` + secretish}, "--webhook-previous-secrets (OUTBOXD_WEBHOOK_PREVIOUS_SECRETS)"},
		{[]string{"run", "--webhook-secret", testSecret, "--web-addr", "127.0.0.1:0", "--web-operator-tokens", secretish + ",ada=0123456789abcdef0123,bob=0123456789abcdef0124"}, nil, "--web-operator-tokens (OUTBOXD_WEB_OPERATOR_TOKENS)"},
		{[]string{"run", "--webhook-secret", testSecret}, map[string]string{"OUTBOXD_WEB_OPERATOR_TOKENS": secretish + ",ada=0123456789abcdef0123,bob=0123456789abcdef0124"}, "--web-operator-tokens (OUTBOXD_WEB_OPERATOR_TOKENS)"},
	} {
		for k, v := range tc.env {
			t.Setenv(k, v)
		}
		_, err := execute(context.Background(), tc.args...)
		require.Equal(t, 2, cli.ExitCode(err), "%v: %v", tc.args, err)
		require.Contains(t, err.Error(), tc.name)
		require.Contains(t, err.Error(), "not shown")
		require.NotContains(t, err.Error(), "TOPSECRET", "%v", tc.args)
		for k := range tc.env {
			t.Setenv(k, "")
		}
	}
}

// TestRunKeepsItsLimitsInTheSharedPlace: outboxd run with
// --limits-database-url writes its --limit rates where every shard keeps
// them (held in any second as asked), not in its own schema, and /metrics
// reports them from there; a limits database it cannot reach is refused
// at start without echoing its password.
func TestRunKeepsItsLimitsInTheSharedPlace(t *testing.T) {
	t.Parallel()
	shard, place := testdb.New(t), testdb.New(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())

	_, err = execute(context.Background(), "run", "--database-url", testdb.URL(), "--schema", shard.Schema,
		"--webhook-secret", testSecret, "--log-level", "error",
		"--limits-database-url", "postgres://postgres:hunter2secret@127.0.0.1:1/db?sslmode=disable")
	require.Error(t, err)
	require.Contains(t, err.Error(), "--limits-database-url")
	require.NotContains(t, err.Error(), "hunter2secret")

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := execute(ctx, "run", "--database-url", testdb.URL(), "--schema", shard.Schema,
			"--webhook-secret", testSecret, "--http-addr", addr, "--log-level", "error",
			"--limits-database-url", testdb.URL(), "--limits-schema", place.Schema,
			"--limit", "webhook:partner.example=5/any-second", "--shard", "eu-1")
		done <- err
	}()
	const key = "webhook:partner.example"
	var body string
	require.Eventually(t, func() bool {
		resp, err := http.Get(fmt.Sprintf("http://%s/metrics", addr))
		if err != nil {
			return false
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body = string(raw)
		return strings.Contains(body, `outboxd_limit_rate{key="`+key+`",shard="eu-1"} 5`)
	}, 30*time.Second, 50*time.Millisecond, "/metrics reports the rate from the shared place, labelled with the shard")
	require.Contains(t, body, `outboxd_limits_scrape_ok{shard="eu-1"} 1`, "every series carries the shard")
	row, err := store.NewStore(place.Schema).LimitOf(context.Background(), place.Pool, key)
	require.NoError(t, err)
	require.InDelta(t, 5, *row.Rate, 0)
	require.True(t, row.InAnySecond)
	_, err = store.NewStore(shard.Schema).LimitOf(context.Background(), shard.Pool, key)
	require.ErrorIs(t, err, store.ErrNotFound, "nothing in the shard's own schema")

	cancel()
	require.NoError(t, <-done)
}
