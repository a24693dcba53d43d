package main

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/riverqueue/river/rivertype"
	"github.com/spf13/cobra"
	"golang.org/x/net/netutil"

	"github.com/outboxd/outboxd/cmd/internal/providerevents"
	"github.com/outboxd/outboxd/cmd/internal/webui"
	"github.com/outboxd/outboxd/internal/cli"
	"github.com/outboxd/outboxd/internal/envflag"
	"github.com/outboxd/outboxd/outbox/idempotency"
	"github.com/outboxd/outboxd/outbox/outboxtrace"
	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/bundled"
	"github.com/outboxd/outboxd/providers/endpoint"
	"github.com/outboxd/outboxd/providers/sendgrid"
	"github.com/outboxd/outboxd/providers/stripe"
	"github.com/outboxd/outboxd/providers/webhook"
	"github.com/outboxd/outboxd/sideeffects"
	"github.com/outboxd/outboxd/sideeffects/dispatchmetrics"
)

// DefaultStripeConcurrency bounds the Stripe calls in flight per process.
// The account's rate limit (Stripe's published 100 a second in live mode,
// 25 in test mode, shared by every replica: --limit) is what keeps outboxd
// under Stripe's limiter; enough workers reach it at 1s calls.
const DefaultStripeConcurrency = 100

// runConfig holds the settings of outboxd run.
type runConfig struct {
	Name  string
	Shard string
	// ShardDatabases are the shards' databases, name=URL each, when this
	// process dispatches for several; ShardSchemas their schemas where
	// not --schema.
	ShardDatabases  []string
	ShardSchemas    map[string]string
	HTTPAddr        string
	ShutdownTimeout time.Duration
	MaxConns        int32

	Concurrency      map[string]int
	Limits           map[string]string
	TenantWindow     int
	TenantWeights    map[string]string
	MaxAttempts      int
	RetryBaseDelay   time.Duration
	RetryMaxDelay    time.Duration
	MaxProviderDelay time.Duration
	JobTimeout       time.Duration
	RescueAfter      time.Duration
	SweepInterval    time.Duration
	Retention        time.Duration
	JobRetention     time.Duration

	Policies cli.Policies

	WebhookSecret     string
	WebhookPrevious   []string
	WebhookTimeout    time.Duration
	WebhookMaxPerHost int
	WebhookCAFile     string
	// EndpointKey seals the registered endpoints' secrets; it enables the
	// endpoint provider.
	EndpointKey          string
	EndpointDisableAfter time.Duration
	endpointKey          *endpoint.Key
	// sharedLimits is --limits-database-url opened (nil: the limits are
	// kept with the effects).
	sharedLimits *sideeffects.SharedLimits
	// webhookSender is the webhook provider's, shared with the endpoints;
	// endpointWebhook the --webhook-* settings the endpoints deliver with.
	webhookSender   *webhook.Sender
	endpointWebhook webhook.Config

	StripeAPIKey  string
	StripeAPIBase string
	StripeTimeout time.Duration

	SendGridAPIKey  string
	SendGridAPIHost string
	SendGridTimeout time.Duration

	Brokers brokerConfig

	EventsAddr             string
	WebAddr                string
	WebExpose              bool
	WebReadToken           string
	WebAnonymousRead       bool
	WebAdminToken          string
	WebOperatorTokens      map[string]string
	WebTrustedUserHeader   string
	WebTrustedProxies      []string
	WebTrustWideProxies    bool
	StripeWebhookSecret    string
	SendGridEventPublicKey string
}

func newRunCmd(g *globalConfig) *cobra.Command {
	c := &runConfig{}
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Dispatch side effects until SIGTERM or SIGINT, then drain",
		Long: `Dispatch side effects until SIGTERM or SIGINT.

On a signal, outboxd stops fetching, lets in-flight provider calls finish
for up to --shutdown-timeout, then cancels them. A cancelled call leaves its
effect fired; this or another replica re-fires it with the same key.

Crash recovery bound: an effect left fired by a killed process is re-fired,
with the same key, after --rescue-after plus a second (every outboxd looks
for such jobs each second; River's own rescuer every 30s) plus the first
retry delay (about 2 minutes with the defaults) by replicas that kept
running; an outboxd that starts after the crash finds the job already older
than --rescue-after and re-fires it within seconds.

` + tracingEnv,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return run(cmd.Context(), cmd.ErrOrStderr(), g, c) },
	}
	f := cmd.Flags()
	f.StringVar(&c.Name, "name", "", "how operators tell this replica apart (outboxctl dispatchers, the web view, a job's attempted_by), such as the pod name; with the pid and start time added (default the host name)")
	envflag.Bind(f, "name", "OUTBOXD_NAME")
	f.StringVar(&c.Shard, "shard", "", "this database's name among the application's shards: every /metrics series and log line carries it (docs/scaling.md)")
	envflag.Bind(f, "shard", "OUTBOXD_SHARD")
	cli.BindShards(f, &c.ShardDatabases, &c.ShardSchemas, "dispatch for all of them from this process instead of --database-url; each gets its own River client, leader, sweeper and retention, and the limits are kept once for all (docs/scaling.md)")
	f.StringVar(&c.HTTPAddr, "http-addr", ":8080", "address of /healthz, /readyz and /metrics (empty: none)")
	envflag.Bind(f, "http-addr", "OUTBOXD_HTTP_ADDR")
	f.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", 30*time.Second, "how long in-flight calls may finish after a signal")
	envflag.Bind(f, "shutdown-timeout", "OUTBOXD_SHUTDOWN_TIMEOUT")
	f.Int32Var(&c.MaxConns, "db-max-conns", 20, "maximum Postgres connections")
	envflag.Bind(f, "db-max-conns", "OUTBOXD_DB_MAX_CONNS")
	f.StringToIntVar(&c.Concurrency, "concurrency", map[string]int{},
		fmt.Sprintf("workers per provider queue, e.g. webhook=20 (default %d each; stripe %d, under Stripe's live-mode rate limit)", sideeffects.DefaultConcurrency, DefaultStripeConcurrency))
	envflag.Bind(f, "concurrency", "OUTBOXD_CONCURRENCY")
	f.StringToStringVar(&c.Limits, "limit", map[string]string{},
		"rate limits in requests a second shared by every replica, e.g. stripe=80,webhook:api.partner.example=50, or =4/any-second for at most 4 in any second (default: Stripe's published 100/s live, 25/s test; others slow on 429s; docs/limits.md)")
	envflag.Bind(f, "limit", "OUTBOXD_LIMITS")
	f.IntVar(&c.TenantWindow, "tenant-window", sideeffects.DefaultTenantWindow,
		"effects of one tenant, per provider, that may have a dispatch job at once: another tenant's new effect waits behind at most this many (docs/limits.md)")
	envflag.Bind(f, "tenant-window", "OUTBOXD_TENANT_WINDOW")
	f.StringToStringVar(&c.TenantWeights, "tenant-weight", map[string]string{}, "tenants whose window is a multiple of --tenant-window, e.g. acme=4,beta=0.5")
	envflag.Bind(f, "tenant-weight", "OUTBOXD_TENANT_WEIGHTS")
	f.IntVar(&c.MaxAttempts, "max-attempts", sideeffects.DefaultMaxAttempts, "fires after which an effect fails")
	envflag.Bind(f, "max-attempts", "OUTBOXD_MAX_ATTEMPTS")
	f.DurationVar(&c.RetryBaseDelay, "retry-base-delay", sideeffects.DefaultBaseDelay, "delay after the first failed attempt (doubles each time, jittered)")
	envflag.Bind(f, "retry-base-delay", "OUTBOXD_RETRY_BASE_DELAY")
	f.DurationVar(&c.RetryMaxDelay, "retry-max-delay", sideeffects.DefaultMaxDelay, "longest delay between attempts")
	envflag.Bind(f, "retry-max-delay", "OUTBOXD_RETRY_MAX_DELAY")
	f.DurationVar(&c.MaxProviderDelay, "max-provider-delay", sideeffects.DefaultMaxProviderDelay,
		"longest wait a provider's answer (Retry-After, a reset time) is obeyed for; longer ones are cut to this and raise outboxd.provider.delay_bounded")
	envflag.Bind(f, "max-provider-delay", "OUTBOXD_MAX_PROVIDER_DELAY")
	f.DurationVar(&c.JobTimeout, "job-timeout", sideeffects.DefaultJobTimeout, "cancel an attempt running longer (must exceed provider timeouts)")
	envflag.Bind(f, "job-timeout", "OUTBOXD_JOB_TIMEOUT")
	f.DurationVar(&c.RescueAfter, "rescue-after", sideeffects.DefaultRescueAfter, "re-run a job whose worker vanished after this long (must exceed --job-timeout)")
	envflag.Bind(f, "rescue-after", "OUTBOXD_RESCUE_AFTER")
	f.DurationVar(&c.SweepInterval, "sweep-interval", sideeffects.DefaultSweepInterval, "how often the leader re-inserts jobs for pending/fired effects that have none")
	envflag.Bind(f, "sweep-interval", "OUTBOXD_SWEEP_INTERVAL")
	f.DurationVar(&c.Retention, "retention", sideeffects.DefaultRetention, "keep terminal effects this long, then purge them (must exceed every key window; 0 disables)")
	envflag.Bind(f, "retention", "OUTBOXD_RETENTION")
	f.DurationVar(&c.JobRetention, "completed-job-retention", sideeffects.DefaultCompletedJobRetention, "keep River's completed dispatch jobs this long (the effect row keeps what they say)")
	envflag.Bind(f, "completed-job-retention", "OUTBOXD_COMPLETED_JOB_RETENTION")
	c.Policies.Bind(f)
	f.StringVar(&c.WebhookSecret, "webhook-secret", "", "Standard Webhooks signing secret, whsec_<base64>; enables the webhook provider")
	envflag.Bind(f, "webhook-secret", "OUTBOXD_WEBHOOK_SECRET")
	envflag.Secret(f, "webhook-secret")
	f.StringSliceVar(&c.WebhookPrevious, "webhook-previous-secrets", nil, "signing secrets being retired (whsec_…, comma-separated): during a rotation each request is also signed with them, until every receiver verifies with --webhook-secret")
	envflag.Bind(f, "webhook-previous-secrets", "OUTBOXD_WEBHOOK_PREVIOUS_SECRETS")
	envflag.Secret(f, "webhook-previous-secrets")
	f.DurationVar(&c.WebhookTimeout, "webhook-timeout", webhook.DefaultTimeout, "timeout of one webhook request")
	envflag.Bind(f, "webhook-timeout", "OUTBOXD_WEBHOOK_TIMEOUT")
	f.IntVar(&c.WebhookMaxPerHost, "webhook-max-per-host", webhook.DefaultMaxPerHost, "concurrent webhook requests per destination host; a host that keeps not answering is also backed off")
	envflag.Bind(f, "webhook-max-per-host", "OUTBOXD_WEBHOOK_MAX_PER_HOST")
	f.StringVar(&c.WebhookCAFile, "webhook-ca-file", "", "PEM certificates of the authorities receivers' certificates are checked against, instead of the system's (receivers behind a private CA)")
	envflag.Bind(f, "webhook-ca-file", "OUTBOXD_WEBHOOK_CA_FILE")
	f.StringVar(&c.EndpointKey, "endpoint-key", "", "the key that seals registered endpoints' signing secrets (32 bytes, base64; outboxctl endpoints new-key prints one); enables delivery to endpoints (docs/endpoints.md), with the --webhook-* settings")
	envflag.Bind(f, "endpoint-key", "OUTBOXD_ENDPOINT_KEY")
	envflag.Secret(f, "endpoint-key")
	f.DurationVar(&c.EndpointDisableAfter, "endpoint-disable-after", endpoint.DefaultDisableAfter, "disable an endpoint whose every delivery failed for this long (its open deliveries then wait for an operator); 0: never")
	envflag.Bind(f, "endpoint-disable-after", "OUTBOXD_ENDPOINT_DISABLE_AFTER")
	f.StringVar(&c.StripeAPIKey, "stripe-api-key", "", "Stripe secret key; enables the stripe provider")
	envflag.Bind(f, "stripe-api-key", "STRIPE_API_KEY")
	envflag.Secret(f, "stripe-api-key")
	f.StringVar(&c.StripeAPIBase, "stripe-api-base", stripe.DefaultAPIBase, "Stripe API URL (stripe-mock, a proxy)")
	envflag.Bind(f, "stripe-api-base", "STRIPE_API_BASE")
	f.DurationVar(&c.StripeTimeout, "stripe-timeout", stripe.DefaultTimeout, "timeout of one Stripe request")
	envflag.Bind(f, "stripe-timeout", "OUTBOXD_STRIPE_TIMEOUT")
	f.StringVar(&c.SendGridAPIKey, "sendgrid-api-key", "", "SendGrid API key; enables the sendgrid provider")
	envflag.Bind(f, "sendgrid-api-key", "SENDGRID_API_KEY")
	envflag.Secret(f, "sendgrid-api-key")
	f.StringVar(&c.SendGridAPIHost, "sendgrid-api-host", sendgrid.DefaultAPIHost, "SendGrid API host (EU region, a proxy)")
	envflag.Bind(f, "sendgrid-api-host", "SENDGRID_API_HOST")
	f.DurationVar(&c.SendGridTimeout, "sendgrid-timeout", sendgrid.DefaultTimeout, "timeout of one SendGrid request")
	envflag.Bind(f, "sendgrid-timeout", "OUTBOXD_SENDGRID_TIMEOUT")
	c.Brokers.bind(f)
	f.StringVar(&c.EventsAddr, "events-addr", ":8081", "address of the provider event endpoints, POST /events/stripe and /events/sendgrid (served when a secret below is set)")
	envflag.Bind(f, "events-addr", "OUTBOXD_EVENTS_ADDR")
	f.StringVar(&c.StripeWebhookSecret, "stripe-webhook-secret", "", "Stripe webhook signing secret, whsec_…; enables POST /events/stripe")
	envflag.Bind(f, "stripe-webhook-secret", "STRIPE_WEBHOOK_SECRET")
	envflag.Secret(f, "stripe-webhook-secret")
	f.StringVar(&c.SendGridEventPublicKey, "sendgrid-event-public-key", "", "SendGrid signed Event Webhook verification key (base64); enables POST /events/sendgrid")
	envflag.Bind(f, "sendgrid-event-public-key", "SENDGRID_EVENT_PUBLIC_KEY")
	f.StringVar(&c.WebAddr, "web-addr", "", "address of the web view under /ui/, e.g. 127.0.0.1:8082 (empty: off; it shows payloads and errors, so keep it on loopback or behind your SSO proxy)")
	envflag.Bind(f, "web-addr", "OUTBOXD_WEB_ADDR")
	f.BoolVar(&c.WebExpose, "web-expose", false, "allow --web-addr to listen beyond loopback (0.0.0.0, a LAN or public address); pages then need --web-read-token unless --web-anonymous-read")
	envflag.Bind(f, "web-expose", "OUTBOXD_WEB_EXPOSE")
	f.StringVar(&c.WebReadToken, "web-read-token", "", "required to read the web view (basic auth password or bearer token; at least 16 characters; the admin token reads too)")
	envflag.Bind(f, "web-read-token", "OUTBOXD_WEB_READ_TOKEN")
	envflag.Secret(f, "web-read-token")
	f.BoolVar(&c.WebAnonymousRead, "web-anonymous-read", false, "with --web-expose, let anyone who reaches the web view read payloads, errors and keys without a credential")
	envflag.Bind(f, "web-anonymous-read", "OUTBOXD_WEB_ANONYMOUS_READ")
	f.StringVar(&c.WebAdminToken, "web-admin-token", "", "enables the web view's actions for requests carrying it (basic auth password or bearer token; at least 16 characters); empty: read-only")
	envflag.Bind(f, "web-admin-token", "OUTBOXD_WEB_ADMIN_TOKEN")
	envflag.Secret(f, "web-admin-token")
	f.StringToStringVar(&c.WebOperatorTokens, "web-operator-tokens", nil,
		"named credentials for the web view's actions, name=token,... (each token at least 16 characters): a request with one acts, and is audited, as that name")
	envflag.Bind(f, "web-operator-tokens", "OUTBOXD_WEB_OPERATOR_TOKENS")
	envflag.Secret(f, "web-operator-tokens")
	f.StringVar(&c.WebTrustedUserHeader, "web-trusted-user-header", "",
		"header in which an authenticating proxy (SSO) in front of the web view passes the signed-in person's name, e.g. X-Forwarded-User: they read and act as that name; needs --web-trusted-proxies")
	envflag.Bind(f, "web-trusted-user-header", "OUTBOXD_WEB_TRUSTED_USER_HEADER")
	f.StringSliceVar(&c.WebTrustedProxies, "web-trusted-proxies", nil, "addresses (CIDRs) of the proxies whose --web-trusted-user-header is believed")
	envflag.Bind(f, "web-trusted-proxies", "OUTBOXD_WEB_TRUSTED_PROXIES")
	f.BoolVar(&c.WebTrustWideProxies, "web-trust-wide-proxies", false, "take --web-trusted-proxies ranges wider than a /16 (IPv6: /48): only if every address in them is a proxy that replaces the header")
	envflag.Bind(f, "web-trust-wide-proxies", "OUTBOXD_WEB_TRUST_WIDE_PROXIES")
	return cmd
}

// providerTimeout is a provider's timeout setting, checked against
// --job-timeout.
type providerTimeout struct {
	flag string
	t    time.Duration
}

// providers builds the configured providers, naming the setting at fault;
// close closes the brokers' connections. A provider is enabled by its
// credential, a broker by its address.
func (c *runConfig) providers(ctx context.Context) (provs []providers.Provider, close func(), err error) {
	// Checked against --job-timeout in this order, so that the error names
	// the same flag on every start.
	var timeouts []providerTimeout
	allowed, err := cli.AllowedNetworks(c.Policies.WebhookAllowCIDRs)
	if err != nil {
		return nil, nil, err
	}
	var roots *x509.CertPool
	if c.WebhookCAFile != "" {
		pemBytes, err := os.ReadFile(c.WebhookCAFile)
		if err != nil {
			return nil, nil, cli.Usagef("--webhook-ca-file (OUTBOXD_WEBHOOK_CA_FILE): %v", err)
		}
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pemBytes) {
			return nil, nil, cli.Usagef("--webhook-ca-file (OUTBOXD_WEBHOOK_CA_FILE) %s: no PEM certificate in it", c.WebhookCAFile)
		}
	}
	whConfig := c.Policies.WebhookConfig(webhook.Config{
		RootCAs:         roots,
		Secret:          c.WebhookSecret,
		PreviousSecrets: c.WebhookPrevious,
		Timeout:         c.WebhookTimeout,
		AllowedNetworks: allowed,
		MaxPerHost:      c.WebhookMaxPerHost,
	})
	if c.WebhookSecret != "" {
		wh, err := webhook.New(whConfig)
		if err != nil {
			return nil, nil, cli.Usagef("webhook settings (--webhook-secret, --webhook-max-per-host, --webhook-key-window; OUTBOXD_WEBHOOK_*): %w", err)
		}
		provs = append(provs, wh)
		c.webhookSender = wh.Sender
		timeouts = append(timeouts, providerTimeout{"--webhook-timeout", c.WebhookTimeout})
	}
	if c.EndpointDisableAfter < 0 {
		return nil, nil, cli.Usagef("--endpoint-disable-after (OUTBOXD_ENDPOINT_DISABLE_AFTER) is %s: give a duration such as 120h, or 0 for never", c.EndpointDisableAfter)
	}
	if c.EndpointKey != "" {
		if c.endpointKey, err = endpoint.ParseKey(c.EndpointKey); err != nil {
			return nil, nil, cli.Usagef("--endpoint-key (OUTBOXD_ENDPOINT_KEY): %w", err)
		}
		c.endpointWebhook = whConfig
		if c.webhookSender == nil {
			// The endpoints deliver with a sender of their own, under
			// the same --webhook-* settings: checked now, built with the
			// provider once the database is reached.
			if _, err := webhook.NewSender(whConfig); err != nil {
				return nil, nil, cli.Usagef("webhook settings (--webhook-max-per-host, --webhook-key-window; OUTBOXD_WEBHOOK_*): %w", err)
			}
			timeouts = append(timeouts, providerTimeout{"--webhook-timeout", c.WebhookTimeout})
		}
	}
	if c.StripeAPIKey != "" {
		st, err := stripe.New(c.Policies.StripeConfig(stripe.Config{APIKey: c.StripeAPIKey, APIBase: c.StripeAPIBase, Timeout: c.StripeTimeout}))
		if err != nil {
			return nil, nil, cli.Usagef("Stripe settings (--stripe-api-key, --stripe-api-base; STRIPE_API_KEY, STRIPE_API_BASE): %w", err)
		}
		provs = append(provs, st)
		timeouts = append(timeouts, providerTimeout{"--stripe-timeout", c.StripeTimeout})
	}
	if c.SendGridAPIKey != "" {
		sg, err := sendgrid.New(sendgrid.Config{APIKey: c.SendGridAPIKey, APIHost: c.SendGridAPIHost, Timeout: c.SendGridTimeout})
		if err != nil {
			return nil, nil, cli.Usagef("SendGrid settings (--sendgrid-api-key, --sendgrid-api-host; SENDGRID_API_KEY, SENDGRID_API_HOST): %w", err)
		}
		provs = append(provs, sg)
		timeouts = append(timeouts, providerTimeout{"--sendgrid-timeout", c.SendGridTimeout})
	}
	for _, pt := range timeouts {
		if pt.t >= c.JobTimeout {
			return nil, nil, cli.Usagef("--job-timeout (%s) must exceed %s (%s)", c.JobTimeout, pt.flag, pt.t)
		}
	}
	if len(provs) == 0 && c.endpointKey == nil && c.Brokers.NATSURL == "" && len(c.Brokers.KafkaBrokers) == 0 {
		return nil, nil, cli.UsageError{Err: errors.New("no provider configured: set OUTBOXD_WEBHOOK_SECRET, OUTBOXD_ENDPOINT_KEY, STRIPE_API_KEY, SENDGRID_API_KEY, OUTBOXD_NATS_URL or OUTBOXD_KAFKA_BROKERS")}
	}
	brokers, close, err := c.Brokers.build(ctx)
	if err != nil {
		return nil, nil, err
	}
	return append(provs, brokers...), close, nil
}

// settings are what this process dispatches with, as outboxctl
// dispatchers shows them: hosts, windows, policies and limits, never
// secrets.
func (c *runConfig) settings(shard string, names []string, provs []providers.Provider) map[string]any {
	s := map[string]any{
		"providers":               names,
		"concurrency":             c.concurrency(provs),
		"in_doubt_policy":         c.Policies.InDoubt,
		"max_attempts":            c.MaxAttempts,
		"retry_base_delay":        c.RetryBaseDelay.String(),
		"retry_max_delay":         c.RetryMaxDelay.String(),
		"max_provider_delay":      c.MaxProviderDelay.String(),
		"job_timeout":             c.JobTimeout.String(),
		"rescue_after":            c.RescueAfter.String(),
		"sweep_interval":          c.SweepInterval.String(),
		"retention":               c.Retention.String(),
		"completed_job_retention": c.JobRetention.String(),
		"limits":                  c.Limits,
		"tenant_window":           c.TenantWindow,
		"tenant_weights":          c.TenantWeights,
		"endpoint_disable_after":  c.EndpointDisableAfter.String(),
	}
	if shard != "" {
		s["shard"] = shard
	}
	if c.sharedLimits != nil {
		// Where, not how to reach it: the URL may hold a password.
		s["limits_shared"] = map[string]any{"schema": c.sharedLimits.Schema}
	}
	for _, n := range names {
		switch n {
		case webhook.Name:
			s["webhook"] = map[string]any{"timeout": c.WebhookTimeout.String(), "allow_cidrs": c.Policies.WebhookAllowCIDRs,
				"max_per_host": c.WebhookMaxPerHost, "key_window": c.Policies.WebhookKeyWindow.String()}
		case stripe.Name:
			s["stripe"] = map[string]any{"api_base": c.StripeAPIBase, "timeout": c.StripeTimeout.String(),
				"key_window": c.Policies.StripeKeyWindow.String(), "key_window_margin": c.Policies.StripeKeyWindowMargin.String()}
		case sendgrid.Name:
			s["sendgrid"] = map[string]any{"api_host": c.SendGridAPIHost, "timeout": c.SendGridTimeout.String()}
		}
	}
	c.Brokers.settings(s, provs)
	return s
}

// tenantWeights is --tenant-weight as numbers (checked by validate).
func (c *runConfig) tenantWeights() map[string]float64 {
	out := make(map[string]float64, len(c.TenantWeights))
	for t, v := range c.TenantWeights {
		out[t], _ = strconv.ParseFloat(v, 64)
	}
	return out
}

// limits is --limit as rates (checked by validate) for the enabled
// providers and for tenants: a limit of a built-in provider without
// credentials here is not an error.
// It also returns the keys held "in any second" (a value ending in
// /any-second).
func (c *runConfig) limits(provs []providers.Provider) (map[string]float64, []string) {
	out := make(map[string]float64, len(c.Limits))
	var inAnySecond []string
	for _, key := range slices.Sorted(maps.Keys(c.Limits)) {
		name, _, _ := strings.Cut(key, ":")
		if name+":" == sideeffects.TenantLimitPrefix || slices.ContainsFunc(provs, func(p providers.Provider) bool { return p.Name() == name }) {
			rate, inAny, _ := parseLimit(c.Limits[key])
			out[key] = rate
			if inAny {
				inAnySecond = append(inAnySecond, key)
			}
		}
	}
	return out, inAnySecond
}

// parseLimit reads a --limit value: requests a second ("50", "50/s"), an
// average, or "4/any-second", at most that many in any second.
func parseLimit(v string) (rate float64, inAnySecond bool, err error) {
	num, inAnySecond := strings.CutSuffix(v, "/any-second")
	if !inAnySecond {
		num = strings.TrimSuffix(v, "/s")
	}
	rate, err = strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, false, err
	}
	if inAnySecond {
		return rate, true, outboxtype.CheckRateInAnySecond(rate)
	}
	return rate, false, outboxtype.CheckRate(rate)
}

// concurrency is --concurrency for the enabled providers: a setting for a
// built-in provider without credentials here is not an error.
func (c *runConfig) concurrency(provs []providers.Provider) map[string]int {
	out := map[string]int{}
	for _, p := range provs {
		if n, ok := c.Concurrency[p.Name()]; ok {
			out[p.Name()] = n
		} else if p.Name() == stripe.Name {
			out[p.Name()] = DefaultStripeConcurrency
		}
	}
	return out
}

// validate checks ranges and relations of the settings that no provider
// or the dispatcher checks, naming the setting at fault.
func (c *runConfig) validate() error {
	if err := c.Policies.Validate(); err != nil {
		return err
	}
	if err := c.Brokers.validate(c.JobTimeout); err != nil {
		return err
	}
	for _, d := range []struct {
		flag, env string
		v, min    time.Duration
	}{
		{"--shutdown-timeout", "OUTBOXD_SHUTDOWN_TIMEOUT", c.ShutdownTimeout, 0},
		{"--retry-base-delay", "OUTBOXD_RETRY_BASE_DELAY", c.RetryBaseDelay, time.Millisecond},
		{"--retry-max-delay", "OUTBOXD_RETRY_MAX_DELAY", c.RetryMaxDelay, time.Millisecond},
		{"--max-provider-delay", "OUTBOXD_MAX_PROVIDER_DELAY", c.MaxProviderDelay, time.Second},
		{"--job-timeout", "OUTBOXD_JOB_TIMEOUT", c.JobTimeout, time.Second},
		{"--rescue-after", "OUTBOXD_RESCUE_AFTER", c.RescueAfter, time.Second},
		{"--sweep-interval", "OUTBOXD_SWEEP_INTERVAL", c.SweepInterval, time.Second},
		{"--retention", "OUTBOXD_RETENTION", c.Retention, 0},
		{"--completed-job-retention", "OUTBOXD_COMPLETED_JOB_RETENTION", c.JobRetention, time.Minute},
		{"--webhook-timeout", "OUTBOXD_WEBHOOK_TIMEOUT", c.WebhookTimeout, time.Millisecond},
		{"--stripe-timeout", "OUTBOXD_STRIPE_TIMEOUT", c.StripeTimeout, time.Millisecond},
		{"--sendgrid-timeout", "OUTBOXD_SENDGRID_TIMEOUT", c.SendGridTimeout, time.Millisecond},
	} {
		if d.v < d.min {
			if d.min == 0 {
				return cli.Usagef("%s (%s) is %s: it must not be negative", d.flag, d.env, d.v)
			}
			return cli.Usagef("%s (%s) is %s: it must be at least %s", d.flag, d.env, d.v, d.min)
		}
	}
	if c.WebAdminToken != "" && len(c.WebAdminToken) < 16 {
		return cli.Usagef("--web-admin-token (OUTBOXD_WEB_ADMIN_TOKEN) must be at least 16 characters (e.g. openssl rand -hex 24)")
	}
	if c.WebReadToken != "" && len(c.WebReadToken) < 16 {
		return cli.Usagef("--web-read-token (OUTBOXD_WEB_READ_TOKEN) must be at least 16 characters (e.g. openssl rand -hex 24)")
	}
	if c.WebAddr != "" && !loopbackAddr(c.WebAddr) {
		switch {
		case !c.WebExpose:
			return cli.Usagef("--web-addr %s listens beyond loopback, where anyone who reaches it could read payloads, errors and keys: "+
				"bind it to 127.0.0.1 (behind your SSO proxy), or set --web-expose (OUTBOXD_WEB_EXPOSE) with --web-read-token", c.WebAddr)
		case c.WebReadToken == "" && c.WebAdminToken == "" && len(c.WebOperatorTokens) == 0 && c.WebTrustedUserHeader == "" && !c.WebAnonymousRead:
			return cli.Usagef("--web-expose: set --web-read-token (OUTBOXD_WEB_READ_TOKEN) so that reading needs a credential, " +
				"or --web-anonymous-read (OUTBOXD_WEB_ANONYMOUS_READ) to let anyone read")
		}
	}
	if c.WebAdminToken != "" && c.WebAddr == "" {
		return cli.Usagef("--web-admin-token (OUTBOXD_WEB_ADMIN_TOKEN) is set but the web view is off: set --web-addr (OUTBOXD_WEB_ADDR)")
	}
	if len(c.WebOperatorTokens) > 0 && c.WebAddr == "" {
		return cli.Usagef("--web-operator-tokens (OUTBOXD_WEB_OPERATOR_TOKENS) is set but the web view is off: set --web-addr (OUTBOXD_WEB_ADDR)")
	}
	if (c.WebTrustedUserHeader == "") != (len(c.WebTrustedProxies) == 0) {
		return cli.Usagef("--web-trusted-user-header (OUTBOXD_WEB_TRUSTED_USER_HEADER) and --web-trusted-proxies (OUTBOXD_WEB_TRUSTED_PROXIES) go together: the header is believed only from the proxies' addresses")
	}
	if _, err := c.trustedProxies(); err != nil {
		return err
	}
	for name, tok := range c.WebOperatorTokens {
		if len(tok) < 16 {
			return cli.Usagef("--web-operator-tokens (OUTBOXD_WEB_OPERATOR_TOKENS): %s's token must be at least 16 characters (e.g. openssl rand -hex 24)", name)
		}
	}
	if c.StripeWebhookSecret != "" {
		if _, err := stripe.EventVerifier(c.StripeWebhookSecret, 0); err != nil {
			return cli.Usagef("--stripe-webhook-secret (STRIPE_WEBHOOK_SECRET): %v", err)
		}
	}
	if c.SendGridEventPublicKey != "" {
		if _, err := sendgrid.EventVerifier(c.SendGridEventPublicKey); err != nil {
			return cli.Usagef("--sendgrid-event-public-key (SENDGRID_EVENT_PUBLIC_KEY): %v", err)
		}
	}
	if c.Retention > 0 {
		for name, g := range c.Policies.Guarantees() {
			if g.KeyWindow > 0 && c.Retention <= g.KeyWindow {
				return cli.Usagef("--retention (OUTBOXD_RETENTION) is %s: it must exceed the %s key window (%s), or a purged effect could be fired again", c.Retention, name, g.KeyWindow)
			}
		}
	}
	if c.RetryMaxDelay < c.RetryBaseDelay {
		return cli.Usagef("--retry-max-delay (%s) must not be shorter than --retry-base-delay (%s)", c.RetryMaxDelay, c.RetryBaseDelay)
	}
	if c.WebhookMaxPerHost < 1 {
		return cli.Usagef("--webhook-max-per-host (OUTBOXD_WEBHOOK_MAX_PER_HOST) is %d: it must be at least 1", c.WebhookMaxPerHost)
	}
	if c.MaxAttempts < 1 {
		return cli.Usagef("--max-attempts (OUTBOXD_MAX_ATTEMPTS) is %d: it must be at least 1", c.MaxAttempts)
	}
	if c.MaxConns < 2 {
		return cli.Usagef("--db-max-conns (OUTBOXD_DB_MAX_CONNS) is %d: it must be at least 2", c.MaxConns)
	}
	for key, v := range c.Limits {
		if _, inAny, err := parseLimit(v); err != nil && inAny {
			return cli.Usagef("--limit (OUTBOXD_LIMITS) %s=%s: %v, e.g. %s=4/any-second", key, v, err, key)
		} else if err != nil {
			return cli.Usagef("--limit (OUTBOXD_LIMITS) %s=%s: the rate must be a positive number of requests a second, at least %g, e.g. %s=50 (or %s=4/any-second: at most 4 in any second)", key, v, outboxtype.MinRate, key, key)
		}
		if err := outboxtype.CheckLimitKey(key); err != nil {
			return cli.Usagef("--limit (OUTBOXD_LIMITS) %.80s=%s: %w", key, v, err)
		}
		name, _, _ := strings.Cut(key, ":")
		if !slices.Contains(builtinNames(), name) && name+":" != sideeffects.TenantLimitPrefix {
			return cli.Usagef("--limit (OUTBOXD_LIMITS) %s=%s: no provider %q: name one of %s (webhook:<host> for one destination) or tenant:<tenant>", key, v, name, strings.Join(builtinNames(), ", "))
		}
	}
	if err := sideeffects.CheckName(c.Name); err != nil {
		return cli.Usagef("--name (OUTBOXD_NAME) is %w", err)
	}
	if c.Shard != "" {
		if err := cli.CheckShardName("--shard (OUTBOXD_SHARD)", c.Shard); err != nil {
			return err
		}
	}
	if c.TenantWindow < 1 {
		return cli.Usagef("--tenant-window (OUTBOXD_TENANT_WINDOW) is %d: it must be at least 1", c.TenantWindow)
	}
	for tenant, v := range c.TenantWeights {
		if w, err := strconv.ParseFloat(v, 64); err != nil || !(w > 0) || math.IsInf(w, 0) {
			return cli.Usagef("--tenant-weight (OUTBOXD_TENANT_WEIGHTS) %s=%s: the weight must be a positive number, e.g. %s=2", tenant, v, tenant)
		}
	}
	for name, n := range c.Concurrency {
		if !slices.Contains(builtinNames(), name) {
			return cli.Usagef("--concurrency (OUTBOXD_CONCURRENCY) %s=%d: no provider %q: use %s", name, n, name, strings.Join(builtinNames(), ", "))
		}
		if n < 1 {
			return cli.Usagef("--concurrency (OUTBOXD_CONCURRENCY) %s=%d: it must be at least 1", name, n)
		}
	}
	return nil
}

func run(ctx context.Context, stderr io.Writer, g *globalConfig, c *runConfig) error {
	log, err := g.logger(stderr)
	if err != nil {
		return err
	}
	if c.Shard != "" {
		log = log.With("shard", c.Shard)
	}
	if err := c.validate(); err != nil {
		return err
	}
	shards, err := c.shardSpecs(g)
	if err != nil {
		return err
	}
	multi := len(c.ShardDatabases) > 0
	tp, flushTraces, err := setupTracing(ctx, os.Getenv, log)
	if err != nil {
		return err
	}
	defer func() {
		fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := flushTraces(fctx); err != nil {
			log.Warn("tracing: spans still buffered were lost", "error", err)
		}
	}()
	if tp != nil {
		// Log lines of a dispatch (and any logged with a traced context)
		// carry trace_id and span_id.
		log = slog.New(outboxtrace.LogHandler(log.Handler()))
	}
	provs, closeProviders, err := c.providers(ctx)
	if err != nil {
		return err
	}
	defer closeProviders()
	inDoubt, err := c.Policies.InDoubtPolicies()
	if err != nil {
		return err
	}
	defer closeShards(shards)
	for _, s := range shards {
		s.log = log
		if multi {
			s.log = log.With("shard", s.name)
		}
		// One database must answer at start; of several shards, one that
		// does not yet is waited for while the others dispatch.
		if err := s.open(ctx, c.MaxConns, !multi); err != nil {
			return err
		}
	}
	// Limits shared with the other databases (shards) that name the same
	// place: --limits-database-url. With several shards and no place
	// named, the first shard keeps them for all, so that N shards never
	// offer N times a provider's rate.
	limitsPool, err := g.OpenLimits(ctx, max(2, c.MaxConns/4))
	if err != nil {
		return err
	}
	if limitsPool != nil {
		defer limitsPool.Close()
		c.sharedLimits = &sideeffects.SharedLimits{Pool: limitsPool, Schema: g.LimitsSchema}
	} else if multi {
		c.sharedLimits = &sideeffects.SharedLimits{Pool: shards[0].pool, Schema: shards[0].schema}
	}
	if c.endpointKey != nil && !multi {
		ep, err := c.endpointProvider(ctx, shards[0])
		if err != nil {
			return err
		}
		provs = append(provs, ep)
	}
	reg := prometheus.NewRegistry()
	// Every series of a named shard carries shard="<name>", so that one
	// Prometheus reads the fleet; with several shards in this process, its
	// own series (Go, the process, the destinations its senders hold) are
	// one per process.
	var processReg prometheus.Registerer = reg
	if !multi && c.Shard != "" {
		processReg = prometheus.WrapRegistererWith(prometheus.Labels{"shard": c.Shard}, reg)
	}
	processReg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		dispatchmetrics.NewDestinationCollector(provs...))
	builds := make([]func() (*sideeffects.Dispatcher, error), len(shards))
	shardMetrics := make([]*dispatchmetrics.Metrics, len(shards))
	for i, s := range shards {
		var labelled prometheus.Registerer = reg
		if s.name != "" {
			labelled = prometheus.WrapRegistererWith(prometheus.Labels{"shard": s.name}, reg)
		}
		labelled.MustRegister(dispatchmetrics.NewStateCollector(s.pool, s.schema),
			dispatchmetrics.NewSharedLimitCollector(s.pool, s.schema, c.sharedLimits), dispatchmetrics.NewTenantCollector(s.pool, s.schema, 0))
		metrics, err := dispatchmetrics.New(labelled)
		if err != nil {
			return err
		}
		shardMetrics[i] = metrics
		builds[i] = func() (*sideeffects.Dispatcher, error) {
			shardProvs := provs
			if c.endpointKey != nil && multi {
				// A shard's endpoints live in its own database, with the
				// events that fan out to them: read once it answers.
				ep, err := c.endpointProvider(ctx, s)
				if err != nil {
					return nil, err
				}
				shardProvs = append(slices.Clip(provs), ep)
			}
			cfg := c.dispatcherConfig(s.name, s.schema, shardProvs, inDoubt, metrics, s.log)
			s.providers = cfg.Settings["providers"].([]string)
			if tp != nil {
				cfg.Tracer = outboxtrace.New(tp)
				cfg.RiverMiddleware = []rivertype.Middleware{outboxtrace.RiverMiddleware(tp)}
			}
			d, err := sideeffects.NewDispatcher(s.pool, cfg)
			if err != nil {
				return nil, cli.UsageError{Err: err}
			}
			return d, nil
		}
		if !multi {
			// Settings mistakes end outboxd before it serves anything.
			if _, err := builds[i](); err != nil {
				return err
			}
		}
	}

	var srv, eventsSrv, webSrv *http.Server
	if c.HTTPAddr != "" {
		mux := http.NewServeMux()
		mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte("ok\n"))
		})
		readyHandler(mux, shards, multi)
		mux.Handle("GET /metrics", metricsHandler(reg))
		if srv, _, err = serve(c.HTTPAddr, "--http-addr (OUTBOXD_HTTP_ADDR)", "health server", mux, log, listenerTimeouts); err != nil {
			return err
		}
	}
	// Provider events: their own address, as providers reach it from the
	// internet while /metrics stays internal. With several shards, each
	// event goes to the shard whose effect carries its key.
	if c.StripeWebhookSecret != "" || c.SendGridEventPublicKey != "" {
		ecfg := providerevents.Config{StripeSecret: c.StripeWebhookSecret, SendGridPublicKey: c.SendGridEventPublicKey, Logger: log}
		targets := make([]providerevents.Shard, len(shards))
		for i, s := range shards {
			targets[i] = providerevents.Shard{Name: s.name, Pool: s.pool, Schema: s.schema, Observer: shardMetrics[i]}
		}
		h, err := providerevents.NewFleet(targets, ecfg)
		if err != nil {
			return cli.UsageError{Err: err}
		}
		var addr net.Addr
		if eventsSrv, addr, err = serve(c.EventsAddr, "--events-addr (OUTBOXD_EVENTS_ADDR)", "provider events server", h, log, listenerTimeouts); err != nil {
			return err
		}
		log.Info("provider events served", "addr", addr.String(), "endpoints", ecfg.String())
	}
	if c.WebAddr != "" {
		h, err := c.webView(shards, inDoubt, provs, log)
		if err != nil {
			return cli.UsageError{Err: err}
		}
		var addr net.Addr
		if webSrv, addr, err = serve(c.WebAddr, "--web-addr (OUTBOXD_WEB_ADDR)", "web view", h, log, listenerTimeouts); err != nil {
			return err
		}
		log.Info("web view served", "url", "http://"+addr.String()+"/ui/",
			"actions", c.WebAdminToken != "" || len(c.WebOperatorTokens) > 0 || c.WebTrustedUserHeader != "",
			"operators", slices.Sorted(maps.Keys(c.WebOperatorTokens)), "who_may_act", c.whoMayAct())
		if !loopbackAddr(c.WebAddr) {
			log.Warn("web view reachable beyond loopback over plain HTTP: put TLS in front of it, or credentials and payloads travel in clear text",
				"addr", addr.String(), "reads_need_credential", !c.WebAnonymousRead || c.WebReadToken != "")
		}
	}

	// The signal cancels ctx, which starts River's soft stop
	// (ShutdownTimeout); Stop below waits for it and stops the rest.
	startCtx, cancelStart := context.WithCancel(ctx)
	defer cancelStart()
	failed := make(chan error, len(shards))
	var starting sync.WaitGroup
	for i, s := range shards {
		starting.Add(1)
		go func() {
			defer starting.Done()
			if multi {
				if err := s.waitReady(startCtx); err != nil {
					failed <- err
					return
				}
			}
			d, err := startRetrying(startCtx, s.log, builds[i], time.Second)
			if err != nil {
				failed <- fmt.Errorf("start dispatcher%s: %w", shardSuffix(s.name), err)
				return
			}
			s.mu.Lock()
			s.d = d
			s.mu.Unlock()
			s.started.Store(true)
			s.log.Info("outboxd running", "schema", s.schema, "providers", s.providers, "http_addr", c.HTTPAddr,
				"job_timeout", c.JobTimeout, "rescue_after", c.RescueAfter, "retention", c.Retention, "tracing", tp != nil)
		}()
	}
	if !multi {
		// One database: outboxd is running once its dispatcher is, or
		// ends with the reason it could not start.
		starting.Wait()
	}

	var runErr error
	select {
	case <-ctx.Done():
		log.Info("signal received: draining", "timeout", c.ShutdownTimeout)
	case runErr = <-failed:
		if ctx.Err() != nil {
			runErr = nil // the signal came while starting
		}
	}
	cancelStart()
	starting.Wait()
	stopCtx, cancel := context.WithTimeout(context.Background(), c.ShutdownTimeout+15*time.Second)
	defer cancel()
	stopErr := stopShards(stopCtx, shards)
	if srv != nil {
		_ = srv.Shutdown(context.Background())
	}
	if eventsSrv != nil {
		_ = eventsSrv.Shutdown(stopCtx)
	}
	if webSrv != nil {
		_ = webSrv.Shutdown(stopCtx)
	}
	if runErr != nil {
		return runErr
	}
	if stopErr != nil {
		return stopErr
	}
	log.Info("outboxd stopped")
	return nil
}

// closeShards closes the shards' pools.
func closeShards(shards []*shard) {
	for _, s := range shards {
		if s.pool != nil {
			s.pool.Close()
		}
	}
}

// webView is the web view of the one database, or, with several shards,
// of each shard with an overview of them all (webui.NewFleet).
func (c *runConfig) webView(shards []*shard, inDoubt map[string]providers.InDoubtPolicy, provs []providers.Provider, log *slog.Logger) (http.Handler, error) {
	if len(c.ShardDatabases) == 0 {
		cfg, err := c.webConfig(shards[0].pool, shards[0].schema, inDoubt, provs, log)
		if err != nil {
			return nil, err
		}
		return webui.New(cfg)
	}
	fleet := make([]webui.FleetShard, len(shards))
	for i, s := range shards {
		cfg, err := c.webConfig(s.pool, s.schema, inDoubt, provs, s.log)
		if err != nil {
			return nil, err
		}
		fleet[i] = webui.FleetShard{Name: s.name, Config: cfg}
	}
	return webui.NewFleet("", fleet)
}

// reconcilers are the providers the web view can ask what they hold for
// an effect's key ("Ask the provider"), by name.
func reconcilers(provs []providers.Provider) map[string]providers.Reconciler {
	out := map[string]providers.Reconciler{}
	for _, p := range provs {
		if r, ok := p.(providers.Reconciler); ok {
			out[p.Name()] = r
		}
	}
	return out
}

// validators check a payload edited in the web view, by provider name.
func validators(provs []providers.Provider) map[string]providers.Validator {
	out := make(map[string]providers.Validator, len(provs))
	for _, p := range provs {
		out[p.Name()] = p
	}
	return out
}

// webConfig configures the web view of one database with the operator
// API and the policies outboxctl uses.
func (c *runConfig) webConfig(pool *pgxpool.Pool, schema string, inDoubt map[string]providers.InDoubtPolicy, provs []providers.Provider, log *slog.Logger) (webui.Config, error) {
	// The providers this process runs know their own windows (a broker's
	// is its stream's); the policies name the rest.
	guarantees := c.Policies.Guarantees()
	for _, p := range provs {
		guarantees[p.Name()] = p.Guarantees()
	}
	op, err := sideeffects.NewOperator(pool, sideeffects.OperatorConfig{Schema: schema, Guarantees: guarantees, InDoubt: inDoubt,
		SharedLimits: c.sharedLimits})
	if err != nil {
		return webui.Config{}, err
	}
	proxies, err := c.trustedProxies()
	if err != nil {
		return webui.Config{}, err
	}
	keys, err := idempotency.NewKeys(pool, schema)
	if err != nil {
		return webui.Config{}, err
	}
	// The endpoints pages read without the key; registering an endpoint
	// and rotating a secret need it.
	endpoints, err := endpoint.NewRegistry(endpoint.RegistryConfig{Schema: schema, Key: c.endpointKey, AllowedNetworks: c.endpointWebhook.AllowedNetworks})
	if err != nil {
		return webui.Config{}, err
	}
	return webui.Config{Keys: keys, Endpoints: endpoints, EndpointsDB: pool, Schema: schema, Operator: op, AdminToken: c.WebAdminToken, ReadToken: c.webReadToken(), Logger: log,
		Operators: c.WebOperatorTokens, ReadNeedsCredential: !loopbackAddr(c.WebAddr) && !c.WebAnonymousRead,
		TrustedUserHeader: c.WebTrustedUserHeader, TrustedProxies: proxies,
		FiredBound: c.RescueAfter + time.Minute, Reconcilers: reconcilers(provs), Validators: validators(provs),
		KeyWindow: func(provider string) time.Duration { return guarantees[provider].Refirable() }}, nil
}

// dispatcherConfig is the dispatcher's configuration from the flags.
func (c *runConfig) dispatcherConfig(shard, schema string, provs []providers.Provider,
	inDoubt map[string]providers.InDoubtPolicy, metrics sideeffects.Observer, log *slog.Logger) sideeffects.Config {
	retention := c.Retention
	if retention <= 0 {
		retention = -1 // disabled
	}
	limits, inAnySecond := c.limits(provs)
	names := make([]string, len(provs))
	for i, p := range provs {
		names[i] = p.Name()
	}
	return sideeffects.Config{
		Schema:                schema,
		SweepInterval:         c.SweepInterval,
		Retention:             retention,
		CompletedJobRetention: c.JobRetention,
		Metrics:               metrics,
		Providers:             provs,
		Concurrency:           c.concurrency(provs),
		Limits:                limits,
		LimitsInAnySecond:     inAnySecond,
		SharedLimits:          c.sharedLimits,
		TenantWindow:          c.TenantWindow,
		TenantWeights:         c.tenantWeights(),
		InDoubt:               inDoubt,
		Retry:                 sideeffects.RetryPolicy{MaxAttempts: c.MaxAttempts, BaseDelay: c.RetryBaseDelay, MaxDelay: c.RetryMaxDelay},
		MaxProviderDelay:      c.MaxProviderDelay,
		JobTimeout:            c.JobTimeout,
		RescueAfter:           c.RescueAfter,
		// River's soft stop: in-flight calls get this long after a signal,
		// then their contexts are cancelled.
		ShutdownTimeout: max(c.ShutdownTimeout, time.Millisecond),
		Logger:          log,
		// What outboxctl dispatchers shows of this process.
		Settings: c.settings(shard, names, provs),
		Name:     c.Name,
	}
}

// metricsInFlight bounds the scrapes /metrics serves at once: its gauges
// read the database, so scrapes piling up (a scraper retrying, an
// unauthenticated caller) would hold connections the dispatcher needs.
// One more is answered 503 at once.
const metricsInFlight = 2

// metricsHandler serves reg's metrics, at most metricsInFlight scrapes at
// once, each given 10 s.
func metricsHandler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{MaxRequestsInFlight: metricsInFlight, Timeout: 10 * time.Second})
}

// timeouts bound every connection of a listener, so that slow or idle
// clients cannot hold connections open: the headers must arrive within
// header, the whole request within read, the response be written within
// write, and a keep-alive connection idle longer than idle is closed.
// Request headers are capped at 64 KiB; request bodies are capped by the
// handlers (the inbox at its MaxBodyBytes, the web view's forms by
// net/http's 10 MB).
// maxConns caps how many connections a listener holds open at once (more
// wait in the kernel's accept queue until one closes).
type timeouts struct {
	header, read, write, idle time.Duration
	maxConns                  int
}

// listenerTimeouts are those of outboxd's listeners (health and metrics,
// provider events, web view): a scrape, an event delivery or a page takes
// milliseconds; a provider retries a delivery that timed out.
var listenerTimeouts = timeouts{header: 5 * time.Second, read: 15 * time.Second, write: time.Minute, idle: time.Minute,
	maxConns: maxConnsPerListener}

// maxConnsPerListener caps the connections each listener holds: a scrape,
// a provider's deliveries or a few browsers need tens; a client that opens
// thousands cannot exhaust the process's descriptors or memory.
const maxConnsPerListener = 512

// whoMayAct says, for the start log, who may act from the web view.
func (c *runConfig) whoMayAct() string {
	var who []string
	if c.WebAdminToken != "" {
		who = append(who, "holders of the admin token")
	}
	if len(c.WebOperatorTokens) > 0 {
		who = append(who, "the named operators' token holders")
	}
	if c.WebTrustedUserHeader != "" {
		who = append(who, "anyone "+c.WebTrustedUserHeader+" names in a request from "+strings.Join(c.WebTrustedProxies, ", "))
	}
	if len(who) == 0 {
		return "no one (read-only)"
	}
	return strings.Join(who, "; ")
}

// trustedProxies parses --web-trusted-proxies.
func (c *runConfig) trustedProxies() ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range c.WebTrustedProxies {
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil {
			if a, aerr := netip.ParseAddr(strings.TrimSpace(s)); aerr == nil {
				p = netip.PrefixFrom(a, a.BitLen())
			} else {
				return nil, cli.Usagef("--web-trusted-proxies (OUTBOXD_WEB_TRUSTED_PROXIES) %q: give addresses or CIDRs such as 10.0.0.5 or 10.0.0.0/24", s)
			}
		}
		if p.Bits() < minTrustedBits(p.Addr()) && !c.WebTrustWideProxies {
			return nil, cli.Usagef("--web-trusted-proxies (OUTBOXD_WEB_TRUSTED_PROXIES) %s: wider than a /%d: anyone there could act as anyone by sending the header; name your proxies' addresses, or add --web-trust-wide-proxies if every address in it is a proxy that replaces the header", p, minTrustedBits(p.Addr()))
		}
		out = append(out, p)
	}
	return out, nil
}

// minTrustedBits is the widest trusted-proxy range taken without
// --web-trust-wide-proxies: a /16 of IPv4, a /48 of IPv6.
func minTrustedBits(a netip.Addr) int {
	if a.Is4() {
		return 16
	}
	return 48
}

// webReadToken is the credential reads need: the read token; or, for a
// view beyond loopback without one and without --web-anonymous-read, the
// admin token (webui lets the admin token read whenever reads need one).
func (c *runConfig) webReadToken() string {
	if c.WebReadToken != "" || loopbackAddr(c.WebAddr) || c.WebAnonymousRead {
		return c.WebReadToken
	}
	return c.WebAdminToken
}

// startRetrying builds and starts a dispatcher. A database that is
// restarting or drops a connection mid-start (a failover, a backend
// terminated) is retried with a growing wait, from first up to 30 s,
// until ctx ends; any other error (configuration, permissions) is
// returned at once.
func startRetrying(ctx context.Context, log *slog.Logger, build func() (*sideeffects.Dispatcher, error), first time.Duration) (*sideeffects.Dispatcher, error) {
	wait := first
	for {
		d, err := build()
		if err != nil {
			return nil, err
		}
		err = d.Start(ctx)
		if err == nil {
			return d, nil
		}
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = d.Stop(stopCtx)
		cancel()
		if !transientDBError(err) || ctx.Err() != nil {
			return nil, err
		}
		log.Warn("database unavailable while starting: retrying", "in", wait, "error", err)
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(wait):
		}
		wait = min(2*wait, 30*time.Second)
	}
}

// transientDBError reports whether err is a database connection that
// failed or went away (worth retrying), not a refusal of what was asked.
func transientDBError(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// Class 08 (connection exception), 57P01..57P03 (terminated by an
		// administrator, crash shutdown, cannot connect now), 53300 (too
		// many connections).
		return strings.HasPrefix(pgErr.Code, "08") || pgErr.Code == "57P01" || pgErr.Code == "57P02" ||
			pgErr.Code == "57P03" || pgErr.Code == "53300"
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	return errors.As(err, &connectErr) || errors.As(err, &netErr) || pgconn.SafeToRetry(err) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || strings.Contains(err.Error(), "conn closed")
}

// loopbackAddr reports whether a listen address (host:port) binds loopback
// only: 127.0.0.0/8, ::1 or localhost. An empty host binds every
// interface.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// serve listens on addr (the flag and variable named in an error) and
// serves h until Shutdown; what names the server in the log.
func serve(addr, setting, what string, h http.Handler, log *slog.Logger, t timeouts) (*http.Server, net.Addr, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, cli.Usagef("%s %q: %w", setting, addr, err)
	}
	if t.maxConns > 0 {
		ln = netutil.LimitListener(ln, t.maxConns)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: t.header, ReadTimeout: t.read, WriteTimeout: t.write,
		IdleTimeout: t.idle, MaxHeaderBytes: 64 << 10}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error(what+" stopped", "error", err)
		}
	}()
	return srv, ln.Addr(), nil
}

// builtinNames are the providers outboxd run can build, in their order.
func builtinNames() []string {
	var names []string
	for _, v := range bundled.Schemas(nil) {
		names = append(names, v.Name())
	}
	return names
}
