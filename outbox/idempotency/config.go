package idempotency

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/pgschema"
)

// Forever is a Retention that never expires a key: for money movement,
// where a retry a week later must still not pay twice. Such keys stay until
// deleted by hand.
const Forever time.Duration = -1

// Defaults for Config.
const (
	DefaultHeader       = "Idempotency-Key"
	DefaultMaxKeyLength = 255
	DefaultMaxBodyBytes = 1 << 20
	DefaultRetention    = 24 * time.Hour
	DefaultRetryAfter   = time.Second
	DefaultLockTimeout  = time.Minute
	// ReplayedHeader marks a replayed response, as Stripe does.
	ReplayedHeader = "Idempotent-Replayed"
)

// Outcome is what the middleware did with one request that carried a key.
type Outcome string

const (
	// Executed: the handler ran and its response was stored with the key.
	Executed Outcome = "executed"
	// Replayed: the key was completed; the stored response was sent again.
	Replayed Outcome = "replayed"
	// InFlight: another request with the key was still running (409).
	InFlight Outcome = "in_flight"
	// FingerprintMismatch: the key was used for a different request (422).
	FingerprintMismatch Outcome = "fingerprint_mismatch"
	// Invalid: a missing or malformed key or an oversized body (4xx).
	Invalid Outcome = "invalid"
	// RolledBack: a 5xx, a panic, a status not stored, or a failed commit:
	// nothing was stored and a retry runs the handler again.
	RolledBack Outcome = "rolled_back"
)

// Observer is told the outcome of every request the middleware handles,
// as an outboxtype.KeyRequest observation (outboxmetrics.NewIdempotency
// counts them for Prometheus); it is the one Observer shape of outboxd.
type Observer = outboxtype.Observer

// Config configures the middleware. The zero value of each field is its
// documented default.
type Config struct {
	// Schema holds outboxd's tables ("" uses search_path).
	Schema string
	// Header names the request header carrying the key. Default
	// Idempotency-Key.
	Header string
	// Scope returns the authenticated caller's identity (tenant, API key
	// id): keys of two scopes never collide, and a caller never gets
	// another's response, learns whether another's key exists, or takes a
	// key another would use. Required, unless Unscoped.
	Scope func(*http.Request) string
	// Unscoped, set instead of Scope, puts every caller in one scope: for
	// an endpoint with one caller (an internal service), where sharing
	// keys is harmless. With several callers, any of them can replay
	// another's response by sending its key and body.
	Unscoped bool
	// Route names the endpoint in the stored key. Default: the ServeMux
	// pattern the request matched (wrap each handler, not the whole mux),
	// else the URL path.
	Route func(*http.Request) string
	// Methods are the methods the middleware applies to when a key is
	// present; others pass through untouched. Default POST, PUT, PATCH,
	// DELETE.
	Methods []string
	// RequiredFor are the methods that must carry a key (400 without one).
	// Default POST; an empty non-nil slice requires it for none.
	RequiredFor []string
	// MaxKeyLength bounds a key's length in bytes. Default 255.
	MaxKeyLength int
	// KeyPattern is what a key must match in full. Default: visible ASCII
	// (0x21-0x7E), which covers UUIDs and Stripe-style keys.
	KeyPattern *regexp.Regexp
	// FingerprintHeaders are request headers that, with the method, route
	// and body, make up the request's fingerprint.
	FingerprintHeaders []string
	// MaxBodyBytes bounds the request body the middleware reads and
	// fingerprints (413 past it). Default 1 MiB.
	MaxBodyBytes int64
	// ResponseHeaders are the response headers stored and replayed with the
	// status and body. Default Content-Type and Location.
	ResponseHeaders []string
	// Retention is how long a key is remembered. Default 24h; Forever never
	// expires it. After it, the same key runs the handler again.
	Retention time.Duration
	// RouteRetention overrides Retention per route (as Route names it).
	RouteRetention map[string]time.Duration
	// StoreStatus reports whether a response below 500 is stored (and its
	// transaction committed). Default StoreUnlessInvalid: every one but
	// 400 and 422, so a retry of a request the handler acted on or refused
	// for what it is (402 card declined, 404, 409) gets the same answer,
	// while a request refused as malformed can be corrected and retried
	// with the same key, as Stripe does. A response not stored is rolled
	// back like a 5xx. 5xx responses are never stored.
	StoreStatus func(status int) bool
	// InFlightWait is how long a request waits for another with the same key
	// to finish before answering 409. Default 0: answer as soon as the key
	// is seen held for 50 ms (the moment a connection that just died takes
	// to let go of its key).
	InFlightWait time.Duration
	// RetryAfter is sent with a 409 for a key in flight. Default 1s.
	RetryAfter time.Duration
	// LockTimeout is how long a three-phase claim holds its key: the
	// handler's context is cancelled then, and a retry may reclaim the key.
	// Default 1m; it must exceed the handler's longest run.
	LockTimeout time.Duration
	// Observer, if set, is told each request's outcome.
	Observer Observer
	// Tracer, if set, traces the key's claim ("idempotency.claim": claimed,
	// or the state of the request that holds the key) and the replay of a
	// stored response ("idempotency.replay") as spans of the request's
	// trace; the handler's Enqueue inside is in the same trace. Package
	// outbox/outboxtrace provides one for OpenTelemetry.
	Tracer outboxtype.Tracer
	// Logger reports failed commits and lost claims. Default slog.Default().
	Logger *slog.Logger
}

// StoreUnlessInvalid is the default Config.StoreStatus: store every
// response below 500 except 400 Bad Request and 422 Unprocessable Content,
// the answers of a validation failure, after which nothing happened.
func StoreUnlessInvalid(status int) bool {
	return status != http.StatusBadRequest && status != http.StatusUnprocessableEntity
}

// StoreAll stores every response below 500, validation failures included:
// a retry with the same key gets the same 400 back.
func StoreAll(int) bool { return true }

var (
	defaultKeyPattern = regexp.MustCompile(`^[\x21-\x7e]+$`)
)

// withDefaults validates cfg and fills in its defaults.
func (cfg Config) withDefaults() (Config, error) {
	var errs []error
	if err := pgschema.Check(cfg.Schema); err != nil {
		errs = append(errs, fmt.Errorf("Config.Schema: %w", err))
	}
	if cfg.Header == "" {
		cfg.Header = DefaultHeader
	}
	switch {
	case cfg.Scope == nil && !cfg.Unscoped:
		errs = append(errs, errors.New("Config.Scope: required: return the authenticated caller's identity (tenant or API key id), "+
			"so that callers never share keys; or set Unscoped: true when the endpoint has a single caller"))
	case cfg.Scope != nil && cfg.Unscoped:
		errs = append(errs, errors.New("Config.Unscoped is set beside Config.Scope: choose one"))
	case cfg.Scope == nil:
		cfg.Scope = func(*http.Request) string { return "" }
	}
	if cfg.Route == nil {
		cfg.Route = func(r *http.Request) string { return cmpOr(r.Pattern, r.URL.Path) }
	}
	if cfg.Methods == nil {
		cfg.Methods = []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}
	}
	if cfg.RequiredFor == nil {
		cfg.RequiredFor = []string{http.MethodPost}
	}
	for _, m := range cfg.RequiredFor {
		if !slices.Contains(cfg.Methods, m) {
			errs = append(errs, fmt.Errorf("RequiredFor: %s is not among Methods %v", m, cfg.Methods))
		}
	}
	if cfg.MaxKeyLength < 0 {
		errs = append(errs, fmt.Errorf("MaxKeyLength %d: must be positive", cfg.MaxKeyLength))
	}
	if cfg.MaxKeyLength == 0 {
		cfg.MaxKeyLength = DefaultMaxKeyLength
	}
	if cfg.KeyPattern == nil {
		cfg.KeyPattern = defaultKeyPattern
	}
	if cfg.MaxBodyBytes < 0 {
		errs = append(errs, fmt.Errorf("MaxBodyBytes %d: must be positive", cfg.MaxBodyBytes))
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.ResponseHeaders == nil {
		cfg.ResponseHeaders = []string{"Content-Type", "Location"}
	}
	for i, h := range cfg.ResponseHeaders {
		cfg.ResponseHeaders[i] = http.CanonicalHeaderKey(h)
	}
	for i, h := range cfg.FingerprintHeaders {
		cfg.FingerprintHeaders[i] = http.CanonicalHeaderKey(h)
	}
	checkRetention := func(name string, d time.Duration) {
		if d < 0 && d != Forever {
			errs = append(errs, fmt.Errorf("%s %s: must be positive, or idempotency.Forever", name, d))
		}
	}
	checkRetention("Retention", cfg.Retention)
	if cfg.Retention == 0 {
		cfg.Retention = DefaultRetention
	}
	for _, route := range slices.Sorted(maps.Keys(cfg.RouteRetention)) {
		checkRetention(fmt.Sprintf("RouteRetention[%q]", route), cfg.RouteRetention[route])
	}
	if cfg.StoreStatus == nil {
		cfg.StoreStatus = StoreUnlessInvalid
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"InFlightWait", cfg.InFlightWait}, {"RetryAfter", cfg.RetryAfter}, {"LockTimeout", cfg.LockTimeout}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s %s: must not be negative", d.name, d.v))
		}
	}
	if cfg.RetryAfter == 0 {
		cfg.RetryAfter = DefaultRetryAfter
	}
	if cfg.LockTimeout == 0 {
		cfg.LockTimeout = DefaultLockTimeout
	}
	// A key that expires while a three-phase claim holds it would let a
	// second request claim it and run the handler again.
	for _, route := range append([]string{""}, slices.Sorted(maps.Keys(cfg.RouteRetention))...) {
		d, name := cfg.Retention, "Retention"
		if route != "" {
			d, name = cfg.RouteRetention[route], fmt.Sprintf("RouteRetention[%q]", route)
		}
		if d > 0 && d <= cfg.LockTimeout {
			errs = append(errs, fmt.Errorf("%s %s: must exceed LockTimeout %s, or a key could expire while a three-phase claim holds it and a second request run the handler again", name, d, cfg.LockTimeout))
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if len(errs) > 0 {
		return cfg, fmt.Errorf("idempotency: %w", errors.Join(errs...))
	}
	return cfg, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// retention is the key lifetime of route; 0 means forever.
func (cfg *Config) retention(route string) time.Duration {
	d, ok := cfg.RouteRetention[route]
	if !ok {
		d = cfg.Retention
	}
	if d == Forever {
		return 0
	}
	return d
}

func (cfg *Config) table() string { return pgschema.Table(cfg.Schema, "idempotency_keys") }

func describeKeyRule(cfg *Config) string {
	if cfg.KeyPattern == defaultKeyPattern {
		return fmt.Sprintf("1 to %d visible ASCII characters (a UUID is a good key)", cfg.MaxKeyLength)
	}
	return fmt.Sprintf("at most %d characters matching %s", cfg.MaxKeyLength, strings.TrimSpace(cfg.KeyPattern.String()))
}
