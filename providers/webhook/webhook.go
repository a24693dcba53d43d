// Package webhook delivers side effects as HTTP POSTs signed per the Standard
// Webhooks specification (https://www.standardwebhooks.com).
//
// Every attempt of one effect carries the same webhook-id (the effect's
// idempotency key) and an Idempotency-Key header with the same value, so a
// receiver that remembers ids acts once however often outboxd retries.
//
// Outcomes: 2xx confirms. 410 Gone and 3xx (redirects are never followed)
// are permanent. 429 and other 4xx prove the receiver refused the request
// before acting on it: retryable, honouring Retry-After. A 5xx does not
// prove that (the receiver, or a proxy in front of it, may have acted and
// then failed): in doubt, re-sent with the same id under the default
// at_least_once policy, honouring Retry-After; a 503 also slows the
// receiver's limit key as a 429 does. A failure before any byte of
// the request was written (DNS, refused connection, TLS) is retryable; a
// failure after (timeout, reset) is in doubt.
//
// Destinations that resolve to loopback, private, link-local (cloud
// metadata), CGNAT and other non-public addresses are refused at dial time
// unless Config.AllowedNetworks contains them.
package webhook

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/outboxd/outboxd/providers"
)

// Name is the provider name used in side_effects.provider and as River queue.
const Name = "webhook"

// Defaults for Config's zero values.
const (
	DefaultTimeout   = 15 * time.Second
	DefaultKeyWindow = 24 * time.Hour
	// KeyWindowMargin is kept back from the key window.
	KeyWindowMargin  = 5 * time.Minute
	DefaultUserAgent = "outboxd-webhook/1"
)

// Config configures the webhook provider. The zero value is usable except
// for Secret.
type Config struct {
	// Secret signs every request: "whsec_" followed by base64, as the
	// Standard Webhooks libraries expect. Required.
	Secret string
	// PreviousSecrets are secrets being retired. During a rotation every
	// request carries, beside Secret's signature, one by each of them (the
	// webhook-signature header holds a space-separated list, which the
	// Standard Webhooks verifiers accept if any one matches), so that a
	// receiver still verifying with an old secret accepts it until it
	// moves to the new one. Remove them when every receiver has.
	PreviousSecrets []string
	// Timeout bounds one attempt, connection included. Default 15s.
	Timeout time.Duration
	// AllowedNetworks are destinations allowed even though they are
	// loopback, private or link-local, for example 10.0.0.0/8 for an
	// internal receiver. Empty: only public addresses.
	AllowedNetworks []netip.Prefix
	// KeyWindow is how long receivers are expected to remember a
	// webhook-id; no attempt is made later than that after the first.
	// Default 24h.
	KeyWindow time.Duration
	// UserAgent is sent with every request. Default "outboxd-webhook/1".
	UserAgent string
	// MaxPerHost caps concurrent requests to one destination host (host and
	// port), so that one slow or hanging receiver cannot take every worker.
	// A host whose requests keep getting no answer is, in addition, left
	// alone for 5s, doubling up to 5m, between single probe requests.
	// Default 16.
	MaxPerHost int
	// RootCAs are the certificate authorities receivers' certificates are
	// checked against (a private CA's receivers). Nil: the system's.
	RootCAs *x509.CertPool
}

// Schema validates webhook payloads without being able to send them; it is
// what the enqueue side needs. AllowedNetworks has Config's meaning and only
// applies to IP literals (host names are checked when dialled).
type Schema struct {
	AllowedNetworks []netip.Prefix
}

// Name implements providers.Validator.
func (Schema) Name() string { return Name }

// ValidatePayload implements providers.Validator.
func (s Schema) ValidatePayload(_ string, payload json.RawMessage) error {
	_, _, err := parsePayload(payload, s.AllowedNetworks, true)
	return err
}

// Provider sends signed webhooks. It is safe for concurrent use.
type Provider struct {
	Schema
	*Sender
	signer *standardwebhooks.Webhook
	// previous sign with Config.PreviousSecrets during a rotation.
	previous []*standardwebhooks.Webhook
}

// Sender is what delivers a signed POST: the HTTP client behind the
// dial-time guard, and the per-destination cap and breaker. A Provider has
// one; another provider that delivers webhooks with secrets of its own (a
// registry of endpoints) shares it, so that a destination has one cap and
// one breaker in a process whichever provider calls it.
type Sender struct {
	cfg    Config
	client *http.Client
	gate   *gate
	// transport is client's; withCert holds, by client certificate, the
	// clients that present one (mutual TLS), built from it on first use.
	transport *http.Transport
	mu        sync.Mutex
	withCert  map[[32]byte]*http.Client
}

// maxCertClients bounds the clients kept for client certificates; past it
// they are built again as needed.
const maxCertClients = 1024

// clientFor is the client that presents cert (nil: none).
func (s *Sender) clientFor(cert *tls.Certificate) *http.Client {
	if cert == nil || len(cert.Certificate) == 0 {
		return s.client
	}
	id := sha256.Sum256(cert.Certificate[0])
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.withCert[id]; ok {
		return c
	}
	if len(s.withCert) >= maxCertClients {
		for k, c := range s.withCert {
			c.CloseIdleConnections()
			delete(s.withCert, k)
		}
	}
	t := s.transport.Clone()
	t.TLSClientConfig = t.TLSClientConfig.Clone()
	t.TLSClientConfig.Certificates = []tls.Certificate{*cert}
	c := *s.client
	c.Transport = t
	s.withCert[id] = &c
	return &c
}

var _ providers.Provider = (*Provider)(nil)

// New checks cfg and builds a provider.
func New(cfg Config) (*Provider, error) {
	if cfg.Secret == "" {
		return nil, errors.New("webhook: Config.Secret is required: whsec_ followed by base64")
	}
	if !strings.HasPrefix(cfg.Secret, "whsec_") {
		return nil, errors.New("webhook: Config.Secret must start with whsec_ followed by base64")
	}
	signer, err := standardwebhooks.NewWebhook(cfg.Secret)
	if err != nil {
		return nil, errors.New("webhook: Config.Secret is not valid base64 after whsec_")
	}
	var previous []*standardwebhooks.Webhook
	for i, s := range cfg.PreviousSecrets {
		w, err := standardwebhooks.NewWebhook(s)
		if err != nil || !strings.HasPrefix(s, "whsec_") {
			return nil, fmt.Errorf("webhook: Config.PreviousSecrets[%d] must be whsec_ followed by base64", i)
		}
		if s == cfg.Secret {
			return nil, fmt.Errorf("webhook: Config.PreviousSecrets[%d] is the current Secret: list only the secrets being retired", i)
		}
		previous = append(previous, w)
	}
	sender, err := NewSender(cfg)
	if err != nil {
		return nil, err
	}
	return &Provider{Schema: Schema{AllowedNetworks: cfg.AllowedNetworks}, Sender: sender, signer: signer, previous: previous}, nil
}

// NewSender checks cfg, whose Secret and PreviousSecrets it ignores, and
// builds a Sender.
func NewSender(cfg Config) (*Sender, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.KeyWindow <= 0 {
		cfg.KeyWindow = DefaultKeyWindow
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = DefaultUserAgent
	}
	if cfg.MaxPerHost < 0 {
		return nil, fmt.Errorf("webhook: Config.MaxPerHost is %d: use a positive number (0 for the default)", cfg.MaxPerHost)
	}
	if err := CheckAllowedNetworks(cfg.AllowedNetworks); err != nil {
		return nil, fmt.Errorf("webhook: Config.AllowedNetworks: %w", err)
	}
	if cfg.MaxPerHost == 0 {
		cfg.MaxPerHost = DefaultMaxPerHost
	}
	if cfg.KeyWindow > 0 && cfg.KeyWindow <= KeyWindowMargin {
		return nil, fmt.Errorf("webhook: Config.KeyWindow %s must exceed its %s margin", cfg.KeyWindow, KeyWindowMargin)
	}
	dial := guardedDialer(&net.Dialer{Timeout: min(cfg.Timeout, 10*time.Second), KeepAlive: 30 * time.Second}, cfg.AllowedNetworks)
	transport := &http.Transport{
		// No proxy from the environment: the dial-time check must see the
		// real destination.
		Proxy:                 nil,
		DialContext:           dial,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   min(cfg.Timeout, 10*time.Second),
		ResponseHeaderTimeout: cfg.Timeout,
		TLSClientConfig:       &tls.Config{RootCAs: cfg.RootCAs, MinVersion: tls.VersionTLS12},
	}
	return &Sender{
		cfg:       cfg,
		gate:      newGate(cfg.MaxPerHost),
		transport: transport,
		withCert:  map[[32]byte]*http.Client{},
		client: &http.Client{
			Transport: transport,
			Timeout:   cfg.Timeout,
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return http.ErrUseLastResponse
			},
		},
	}, nil
}

// Admit implements providers.Gate: a slot for the effect's destination
// host, unless it has MaxPerHost requests in flight or its breaker is open.
func (p *Provider) Admit(ctx context.Context, payload json.RawMessage) (release func(sendErr error), wait time.Duration, ok bool) {
	return p.AdmitHost(ctx, hostOf(payload))
}

// AdmitHost is Admit for a destination host (host[:port]) known by other
// means than a webhook payload; "" is always admitted.
func (s *Sender) AdmitHost(ctx context.Context, host string) (release func(sendErr error), wait time.Duration, ok bool) {
	if host == "" {
		return func(error) {}, 0, true
	}
	// One receiver reached by several names shares one cap and breaker.
	host = s.gate.destination(ctx, host)
	if ok, wait := s.gate.admit(ctx, host); !ok {
		return nil, wait, false
	}
	return func(sendErr error) { s.gate.done(host, sendErr) }, 0, true
}

// Destinations implements providers.DestinationReporter: each destination
// the per-host cap or breaker holds anything for (requests in flight or
// waiting, failures in a row, an open breaker).
func (s *Sender) Destinations() []providers.DestinationState { return s.gate.states() }

// Timeout is how long one delivery may take.
func (s *Sender) Timeout() time.Duration { return s.cfg.Timeout }

// Host implements providers.Hoster: the destination's host and port.
func (p *Provider) Host(payload json.RawMessage) string { return hostOf(payload) }

// Limit implements providers.Limited: each destination host (host[:port]
// as the URL writes it) is its own limit key, with no rate unless one is
// configured; it slows when the receiver answers 429. Limit(nil) is
// Limit{}: the key depends on the request.
func (p *Provider) Limit(payload json.RawMessage) providers.Limit {
	if payload == nil {
		return providers.Limit{}
	}
	if h := hostOf(payload); h != "" {
		return providers.Limit{Key: Name + ":" + h}
	}
	return providers.Limit{}
}

// Secrets implements providers.SecretHolder: the signing secret, with and
// without its whsec_ prefix.
func (p *Provider) Secrets() []string {
	out := []string{p.cfg.Secret, strings.TrimPrefix(p.cfg.Secret, "whsec_")}
	for _, s := range p.cfg.PreviousSecrets {
		out = append(out, s, strings.TrimPrefix(s, "whsec_"))
	}
	return out
}

// Guarantees implements providers.Provider.
func (p *Provider) Guarantees() providers.Guarantees { return p.cfg.Guarantees() }

// Guarantees are those of a provider built from c: receivers deduplicate
// by webhook-id for KeyWindow (default 24h), so in-doubt attempts are
// re-sent with the same id.
func (c Config) Guarantees() providers.Guarantees {
	return providers.Guarantees{
		KeyWindow:       cmp.Or(c.KeyWindow, DefaultKeyWindow),
		KeyWindowMargin: KeyWindowMargin,
		InDoubt:         providers.AtLeastOnce,
	}
}

// Send implements providers.Provider.
func (p *Provider) Send(ctx context.Context, req providers.Request) (providers.Result, error) {
	pl, u, err := parsePayload(req.Payload, p.AllowedNetworks, false)
	if err != nil {
		return providers.Result{}, providers.Refused(err)
	}
	return p.Deliver(ctx, Delivery{URL: u, Body: pl.Body, Headers: pl.Headers, Key: req.Key,
		Signers: append([]*standardwebhooks.Webhook{p.signer}, p.previous...)})
}

// Delivery is one signed POST.
type Delivery struct {
	// URL is where to POST; the dial-time guard checks where it leads.
	URL *url.URL
	// Body is sent verbatim as application/json.
	Body []byte
	// Headers are added to the request; the signing, idempotency and
	// content headers are set by Deliver and win over them.
	Headers map[string]string
	// Key is the effect's idempotency key: the webhook-id and the
	// Idempotency-Key header.
	Key string
	// Signers sign the request, the current secret first; the
	// webhook-signature header carries one signature by each.
	Signers []*standardwebhooks.Webhook
	// ClientCert, when set, is presented to the receiver (mutual TLS).
	ClientCert *tls.Certificate
}

// Deliver POSTs d once and classifies the answer as Send does.
func (s *Sender) Deliver(ctx context.Context, d Delivery) (providers.Result, error) {
	if len(d.Signers) == 0 {
		return providers.Result{}, providers.Refused(errors.New("no signing secret"))
	}
	now := time.Now()
	sigs := make([]string, len(d.Signers))
	for i, w := range d.Signers {
		sig, err := w.Sign(d.Key, now, d.Body)
		if err != nil {
			return providers.Result{}, providers.Refused(fmt.Errorf("sign: %w", err))
		}
		sigs[i] = sig
	}

	ctx, wrote := providers.WatchWrites(ctx)
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, d.URL.String(), bytes.NewReader(d.Body))
	if err != nil {
		return providers.Result{}, providers.Refused(fmt.Errorf("build request: %w", err))
	}
	for k, v := range d.Headers {
		hr.Header.Set(k, v)
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("User-Agent", s.cfg.UserAgent)
	hr.Header.Set(standardwebhooks.HeaderWebhookID, d.Key)
	hr.Header.Set(standardwebhooks.HeaderWebhookTimestamp, strconv.FormatInt(now.Unix(), 10))
	hr.Header.Set(standardwebhooks.HeaderWebhookSignature, strings.Join(sigs, " "))
	hr.Header.Set("Idempotency-Key", d.Key)

	resp, err := s.clientFor(d.ClientCert).Do(hr)
	if err != nil {
		var blocked *BlockedError
		if errors.As(err, &blocked) {
			return providers.Result{}, providers.Refused(blocked)
		}
		return providers.Result{}, providers.TransportError(err, wrote())
	}
	defer resp.Body.Close()
	// Read more than an error shows (512 bytes), so that the secret a
	// receiver echoes is redacted whole before the text is cut.
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)) // lets the connection be reused

	status := resp.StatusCode
	switch {
	case status >= 200 && status < 300:
		return providers.Result{}, nil
	case status == http.StatusGone:
		return providers.Result{}, providers.Permanent(statusError(resp, snippet, "endpoint gone"))
	case status >= 300 && status < 400:
		return providers.Result{}, providers.Permanent(statusError(resp, snippet,
			"redirect to "+resp.Header.Get("Location")+" not followed: update the URL"))
	case status == http.StatusServiceUnavailable:
		// The receiver says it is overloaded: in doubt as any 5xx, and its
		// limit key slows down as after a 429, so that retries and what
		// waits behind them stop adding to the load.
		return providers.Result{}, providers.Overloaded(providers.InDoubtAfter(statusError(resp, snippet, ""), providers.RetryAfter(resp.Header, time.Now())))
	case status >= 500:
		return providers.Result{}, providers.InDoubtAfter(statusError(resp, snippet, ""), providers.RetryAfter(resp.Header, time.Now()))
	case status == http.StatusTooManyRequests:
		return providers.Result{}, providers.Throttled(statusError(resp, snippet, ""), providers.RetryAfter(resp.Header, time.Now()))
	default:
		return providers.Result{}, providers.Retryable(statusError(resp, snippet, ""), providers.RetryAfter(resp.Header, time.Now()))
	}
}

func statusError(resp *http.Response, snippet []byte, note string) error {
	return providers.StatusError("", resp.StatusCode, note, snippet)
}
