// Package stripe performs side effects at Stripe with stripe-go (v79).
//
// Every request carries the effect's idempotency key as Stripe's
// Idempotency-Key, so a retry after a timeout or a crash returns the first
// result instead of charging twice. Stripe remembers keys for 24 hours:
// outboxd never fires a Stripe effect later than 23 hours after its first
// attempt (KeyWindow minus KeyWindowMargin); past that the effect fails with
// "key window expired: reconcile at provider".
//
// stripe-go's own network retries are turned off. Every attempt goes through
// outboxd's retry schedule instead, so it is counted in attempts, visible to
// operators and bounded by the key window.
//
// Error classes:
//
//   - Stripe-Should-Retry: false is permanent; true is retryable, except
//     on a 5xx, which stays in doubt (re-sent with the same key under the
//     default at_least_once policy).
//   - 409 (idempotency key in use) and 429: retryable (Stripe did not act);
//     a 429 other than lock_timeout (one object's lock, not the account's
//     rate) is Throttled: the account's limit key slows down for every
//     replica, and the attempt does not count.
//   - 5xx: in doubt. Stripe may have acted before failing; the same key
//     makes the re-send safe while the key window lasts.
//   - card_error, invalid_request_error, idempotency_error, 401, 403 and any
//     other 4xx: permanent.
//   - no response (timeout, reset) after the request was written: in doubt,
//     re-sent with the same key; nothing written (DNS, refused): retryable.
package stripe

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	stripego "github.com/stripe/stripe-go/v79"
	"github.com/stripe/stripe-go/v79/client"

	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/stripe/stripeschema"
)

// Name is the provider name used in side_effects.provider and as River queue.
const Name = stripeschema.Name

// Defaults for Config's zero values.
const (
	DefaultAPIBase         = "https://api.stripe.com"
	DefaultTimeout         = 30 * time.Second
	DefaultKeyWindow       = 24 * time.Hour
	DefaultKeyWindowMargin = time.Hour
)

// Config configures the Stripe provider.
type Config struct {
	// APIKey is the secret key (sk_live_..., sk_test_..., rk_...). Required.
	APIKey string
	// APIBase is Stripe's API URL; set it for stripe-mock or a proxy.
	// Default https://api.stripe.com.
	APIBase string
	// Timeout bounds one request. Default 30s.
	Timeout time.Duration
	// KeyWindow is how long Stripe remembers idempotency keys. Default 24h.
	KeyWindow time.Duration
	// KeyWindowMargin is kept back from KeyWindow. Default 1h.
	KeyWindowMargin time.Duration
	// HTTPClient overrides the HTTP client (its Timeout is left as is).
	HTTPClient *http.Client
}

// Schema validates Stripe payloads; it is what the enqueue side needs, and
// lives in stripeschema so that enqueueing does not compile stripe-go.
type Schema = stripeschema.Schema

// Payload is the JSON object a Stripe effect carries.
type Payload = stripeschema.Payload

// Operations lists the supported operations, sorted.
func Operations() []string { return stripeschema.Operations() }

// Provider calls Stripe. It is safe for concurrent use.
type Provider struct {
	Schema
	cfg Config
	api *client.API
}

var _ providers.Provider = (*Provider)(nil)

// New checks cfg and builds a provider.
func New(cfg Config) (*Provider, error) {
	if cfg.APIKey == "" {
		return nil, errors.New("stripe: Config.APIKey is required")
	}
	apiBase, err := providers.BaseURL(cfg.APIBase, DefaultAPIBase, "Config.APIBase")
	if err != nil {
		return nil, fmt.Errorf("stripe: API base %w", err)
	}
	cfg.APIBase = apiBase
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.KeyWindow <= 0 {
		cfg.KeyWindow = DefaultKeyWindow
	}
	if cfg.KeyWindowMargin <= 0 {
		cfg.KeyWindowMargin = DefaultKeyWindowMargin
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: cfg.Timeout}
	}
	base := hc.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	hc = &http.Client{Transport: recordingTransport{providers.LimitBodies(base, providers.MaxResponseBytes)},
		Timeout: hc.Timeout, CheckRedirect: hc.CheckRedirect, Jar: hc.Jar}
	backend := stripego.GetBackendWithConfig(stripego.APIBackend, &stripego.BackendConfig{
		URL:               stripego.String(cfg.APIBase),
		HTTPClient:        hc,
		MaxNetworkRetries: stripego.Int64(0),
		LeveledLogger:     &stripego.LeveledLogger{Level: stripego.LevelNull},
		EnableTelemetry:   stripego.Bool(false),
	})
	api := client.New(cfg.APIKey, &stripego.Backends{API: backend, Connect: backend, Uploads: backend})
	return &Provider{cfg: cfg, api: api}, nil
}

// Host implements providers.Hoster: the API host every call goes to.
func (p *Provider) Host(json.RawMessage) string {
	return providers.HostOf(p.cfg.APIBase)
}

// Stripe's published rate limits, requests a second per account: live mode
// allows 100 (read and write each), test mode 25
// (https://docs.stripe.com/rate-limits).
const (
	LiveRate = 100
	TestRate = 25
)

// Limit implements providers.Limited: every request counts against the
// account of the API key, named by its mode and last four characters (as
// Stripe's Dashboard shows a key), with Stripe's published rate.
func (p *Provider) Limit(json.RawMessage) providers.Limit { return AccountLimit(p.cfg.APIKey) }

// AccountLimit is the limit of the Stripe account of apiKey.
func AccountLimit(apiKey string) providers.Limit {
	mode, rate := "live", float64(LiveRate)
	if strings.Contains(apiKey, "_test_") {
		mode, rate = "test", TestRate
	}
	tail := apiKey
	if len(tail) > 4 {
		tail = tail[len(tail)-4:]
	}
	return providers.Limit{Key: Name + ":" + mode + "-" + tail, Rate: rate}
}

// Secrets implements providers.SecretHolder.
func (p *Provider) Secrets() []string { return []string{p.cfg.APIKey} }

// Guarantees implements providers.Provider.
func (p *Provider) Guarantees() providers.Guarantees { return p.cfg.Guarantees() }

// Timeout implements providers.Timed: how long one call may take.
func (p *Provider) Timeout() time.Duration { return p.cfg.Timeout }

// Guarantees are those of a provider built from c: Stripe remembers keys
// for KeyWindow (default 24h), so in-doubt attempts are re-sent with the
// same key until KeyWindow minus KeyWindowMargin.
func (c Config) Guarantees() providers.Guarantees {
	return providers.Guarantees{
		KeyWindow:       cmp.Or(c.KeyWindow, DefaultKeyWindow),
		KeyWindowMargin: cmp.Or(c.KeyWindowMargin, DefaultKeyWindowMargin),
		InDoubt:         providers.AtLeastOnce,
	}
}

// Send implements providers.Provider.
func (p *Provider) Send(ctx context.Context, req providers.Request) (providers.Result, error) {
	c, err := parsePayload(req.Payload)
	if err != nil {
		return providers.Result{}, providers.Refused(err)
	}
	ctx, wrote := providers.WatchWrites(ctx)
	rec := &lastResponse{}
	ctx = context.WithValue(ctx, lastResponseKey{}, rec)
	id, resp, err := c(p.api, stripego.Params{Context: ctx, IdempotencyKey: stripego.String(req.Key)})
	if err != nil {
		return providers.Result{}, providers.Redact(classify(err, rec, wrote()), p.Secrets())
	}
	return providers.Result{Ref: id, Replayed: resp != nil && resp.Header.Get("Idempotent-Replayed") == "true"}, nil
}

// classify sorts a failed call into outboxd's error classes.
func classify(err error, rec *lastResponse, wrote bool) error {
	status, header := rec.get()
	var se *stripego.Error
	if errors.As(err, &se) {
		status = se.HTTPStatusCode
		if se.LastResponse != nil {
			header = se.LastResponse.Header
		}
		code := ""
		if se.Code != "" {
			code = " " + string(se.Code)
		}
		err = fmt.Errorf("stripe %s%s (HTTP %d): %s", se.Type, code, status, se.Msg)
	}
	if status == 0 {
		return providers.TransportError(err, wrote)
	}
	if status == http.StatusTooManyRequests && (se == nil || se.Code != stripego.ErrorCodeLockTimeout) {
		// Stripe's rate limiter (code rate_limit): the account is over its
		// limit, whatever Stripe-Should-Retry says.
		return providers.Throttled(err, providers.RetryAfter(header, time.Now()))
	}
	switch header.Get("Stripe-Should-Retry") {
	case "true":
		if status >= 500 {
			return providers.InDoubtAfter(err, providers.RetryAfter(header, time.Now()))
		}
		return providers.Retryable(err, providers.RetryAfter(header, time.Now()))
	case "false":
		return providers.Permanent(err)
	}
	if se != nil {
		switch se.Type {
		case stripego.ErrorTypeCard, stripego.ErrorTypeInvalidRequest, stripego.ErrorTypeIdempotency:
			if status != http.StatusConflict && status != http.StatusTooManyRequests {
				return providers.Permanent(err)
			}
		}
	}
	switch {
	case status == http.StatusConflict, status == http.StatusTooManyRequests:
		return providers.Retryable(err, providers.RetryAfter(header, time.Now()))
	case status >= 500:
		return providers.InDoubtAfter(err, providers.RetryAfter(header, time.Now()))
	case status >= 200 && status < 300:
		// Stripe acted but the response could not be read: the object
		// exists, and a re-send with the same key returns it.
		return providers.InDoubt(err)
	default:
		return providers.Permanent(err)
	}
}

// lastResponse keeps the status and headers of the response to a call, so
// that even an error body stripe-go cannot parse is classified by status.
type lastResponse struct {
	mu     sync.Mutex
	status int
	header http.Header
}

func (r *lastResponse) get() (int, http.Header) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.status, r.header
}

type lastResponseKey struct{}

type recordingTransport struct{ base http.RoundTripper }

func (t recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if rec, ok := req.Context().Value(lastResponseKey{}).(*lastResponse); ok && resp != nil {
		rec.mu.Lock()
		rec.status, rec.header = resp.StatusCode, resp.Header.Clone()
		rec.mu.Unlock()
	}
	return resp, err
}
