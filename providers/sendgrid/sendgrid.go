// Package sendgrid sends mail through SendGrid's v3 Mail Send API with
// sendgrid-go.
//
// SendGrid has no idempotency key. outboxd sends the effect's key as the
// custom_args entry "outboxd_idempotency_key", so SendGrid's Event Webhook and
// Activity Feed tie every message back to its effect, and stores the
// X-Message-Id as provider_ref.
//
// Because a re-send after an attempt whose outcome is unknown can deliver a
// second email, the default in-doubt policy is at_most_once: such an effect
// fails with "in doubt: not re-sent" for an operator to check the Activity
// Feed (search the custom arg) and confirm or redrive. A duplicate email is
// visible to a customer and cannot be recalled; a parked one costs an
// operator a look. Kinds where a duplicate is harmless can opt into
// at_least_once (OUTBOXD_IN_DOUBT_POLICY=email.digest=at_least_once).
//
// Outcomes: 2xx confirms; 429 (rejected before acceptance) is retried after
// X-RateLimit-Reset; other 4xx are permanent; 5xx is in doubt (a server or
// proxy may have accepted the mail before failing), so under at_most_once
// it is parked, not re-sent; no response after the request was written is
// in doubt; nothing written is retryable.
package sendgrid

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sendgrid/rest"
	sendgridgo "github.com/sendgrid/sendgrid-go"
	"github.com/sendgrid/sendgrid-go/helpers/mail"

	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/sendgrid/sendgridschema"
)

// Name is the provider name used in side_effects.provider and as River queue.
const Name = sendgridschema.Name

// CustomArgKey is the custom_args entry that carries the idempotency key.
const CustomArgKey = "outboxd_idempotency_key"

// Defaults for Config's zero values.
const (
	DefaultAPIHost = "https://api.sendgrid.com"
	DefaultTimeout = 30 * time.Second
)

// Config configures the SendGrid provider.
type Config struct {
	// APIKey is the SendGrid API key (SG....). Required.
	APIKey string
	// APIHost is SendGrid's API host; set it for the EU region
	// (https://api.eu.sendgrid.com), a proxy or a test server. Default
	// https://api.sendgrid.com.
	APIHost string
	// Timeout bounds one request. Default 30s.
	Timeout time.Duration
}

// Schema validates SendGrid payloads; it is what the enqueue side needs, and
// lives in sendgridschema so that enqueueing does not compile sendgrid-go.
type Schema = sendgridschema.Schema

// Provider sends mail. It is safe for concurrent use.
type Provider struct {
	Schema
	cfg  Config
	http *http.Client
}

var _ providers.Provider = (*Provider)(nil)

// New checks cfg and builds a provider.
func New(cfg Config) (*Provider, error) {
	if cfg.APIKey == "" {
		return nil, errors.New("sendgrid: Config.APIKey is required")
	}
	host, err := providers.BaseURL(cfg.APIHost, DefaultAPIHost, "Config.APIHost")
	if err != nil {
		return nil, fmt.Errorf("sendgrid: API host %w", err)
	}
	cfg.APIHost = host
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	return &Provider{cfg: cfg, http: &http.Client{Timeout: cfg.Timeout, Transport: providers.LimitBodies(nil, providers.MaxResponseBytes)}}, nil
}

// Limit implements providers.Limited: every send counts against the
// account of the API key, named by its last four characters. SendGrid
// publishes no number for mail send (its 429s carry X-RateLimit-Reset), so
// the key has no rate unless one is configured, and slows on 429s.
func (p *Provider) Limit(json.RawMessage) providers.Limit {
	tail := p.cfg.APIKey
	if len(tail) > 4 {
		tail = tail[len(tail)-4:]
	}
	return providers.Limit{Key: Name + ":" + tail}
}

// Host implements providers.Hoster: the API host every send goes to.
func (p *Provider) Host(json.RawMessage) string {
	return providers.HostOf(p.cfg.APIHost)
}

// Secrets implements providers.SecretHolder: a server that echoes the
// Authorization header must not put the API key into last_error or logs.
func (p *Provider) Secrets() []string { return []string{p.cfg.APIKey} }

// Guarantees implements providers.Provider.
func (p *Provider) Guarantees() providers.Guarantees { return Guarantees }

// Timeout implements providers.Timed: how long one call may take.
func (p *Provider) Timeout() time.Duration { return p.cfg.Timeout }

// Guarantees are SendGrid's: no keys, so no key window, and in-doubt
// attempts are not re-sent unless a kind opts in.
var Guarantees = providers.Guarantees{InDoubt: providers.AtMostOnce}

// Send implements providers.Provider.
func (p *Provider) Send(ctx context.Context, req providers.Request) (providers.Result, error) {
	pl, err := parsePayload(req.Payload)
	if err != nil {
		return providers.Result{}, providers.Refused(err)
	}
	m := message(pl)
	m.SetCustomArg(CustomArgKey, req.Key)

	// One request (and client) per send: sendgrid-go's Request is a value
	// that SendWithContext mutates.
	r := sendgridgo.GetRequest(p.cfg.APIKey, "/v3/mail/send", p.cfg.APIHost)
	r.Method = rest.Post
	r.Body = mail.GetRequestBody(m)
	client := &rest.Client{HTTPClient: p.http}

	ctx, wrote := providers.WatchWrites(ctx)
	res, err := p.send(ctx, client, r, wrote)
	return res, providers.Redact(err, p.Secrets())
}

func (p *Provider) send(ctx context.Context, client *rest.Client, r rest.Request, wrote func() bool) (providers.Result, error) {
	resp, err := client.SendWithContext(ctx, r)
	if err != nil {
		return providers.Result{}, providers.TransportError(err, wrote())
	}
	// Send reports HTTP failures as a response, not an error.
	status := resp.StatusCode
	header := http.Header(resp.Headers)
	switch {
	case status >= 200 && status < 300:
		return providers.Result{Ref: header.Get("X-Message-Id")}, nil
	case status == http.StatusTooManyRequests:
		return providers.Result{}, providers.Throttled(statusError(resp), rateLimitReset(header, time.Now()))
	case status >= 500:
		return providers.Result{}, providers.InDoubt(statusError(resp))
	default:
		return providers.Result{}, providers.Permanent(statusError(resp))
	}
}

func statusError(resp *rest.Response) error {
	note := ""
	if strings.TrimSpace(resp.Body) == "" {
		note = "empty body"
	}
	return providers.StatusError("sendgrid ", resp.StatusCode, note, []byte(resp.Body))
}

// rateLimitReset reads X-RateLimit-Reset (a Unix time) as a delay.
func rateLimitReset(h http.Header, now time.Time) time.Duration {
	secs, err := strconv.ParseInt(strings.TrimSpace(h.Get("X-RateLimit-Reset")), 10, 64)
	if err != nil {
		return 0
	}
	if d := time.Unix(secs, 0).Sub(now); d > 0 {
		return d
	}
	return 0
}
