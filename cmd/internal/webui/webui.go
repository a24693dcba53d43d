// Package webui is outboxd's web view for operators: an overview (counts,
// stuck effects with the same diagnosis as `outboxctl stuck`, failure
// reasons, confirmed and failed per minute), search, the effect page, and
// the operator's actions with the same functions and guards as outboxctl.
//
// It is server-rendered with html/template and embedded assets, read-only
// unless an admin token is configured, protects actions against CSRF, and
// is served with a restrictive Content-Security-Policy. `outboxd run`
// serves it on --web-addr (off by default).
package webui

import (
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/outboxd/outboxd/outbox/idempotency"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/endpoint"
	"github.com/outboxd/outboxd/sideeffects"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Config configures the web view.
type Config struct {
	// Schema is shown in the page header ("" shows search_path).
	Schema string
	// Shard names the database among the application's shards, shown in
	// the header of every page (NewFleet sets it).
	Shard string
	// Fleet is the path of the overview of every shard, linked from the
	// header (NewFleet sets it; "" for one database).
	Fleet string
	// Operator reads and acts; the web view holds no connection of its own.
	Operator *sideeffects.Operator
	// Prefix is the path the view is served under. Default "/ui/".
	Prefix string
	// AdminToken enables actions: a request carrying it (HTTP basic auth
	// with it as password, the user name as actor; or a bearer token) may
	// act. Empty: read-only.
	AdminToken string
	// Operators are named credentials for actions, name -> token (at least
	// 16 characters each, all different): a request carrying one acts as
	// "web:<name>" whatever user name it typed, so the audit names a
	// person, not what was typed in front of a shared token. They read
	// too. With Operators set, AdminToken may be left empty.
	Operators map[string]string
	// ReadToken, when set, is required to read any page (basic auth
	// password or bearer token; the admin token and operators' tokens
	// read too): for a view reachable beyond loopback. Empty: pages are
	// readable without one, unless ReadNeedsCredential.
	ReadToken string
	// ReadNeedsCredential requires one of the configured tokens to read,
	// also without a ReadToken (operators' tokens only, say).
	ReadNeedsCredential bool
	// TrustedUserHeader, with TrustedProxies, names the header in which an
	// authenticating proxy in front of the view (SSO) passes the signed-in
	// person's name: a request from one of TrustedProxies carrying it reads
	// and acts as "web:<name>" (the proxy decides who reaches the view).
	// The header from any other address is ignored.
	TrustedUserHeader string
	TrustedProxies    []netip.Prefix
	// KeyWindow is a provider's key window minus margin, for the stuck
	// diagnosis (as outboxctl reads it).
	KeyWindow func(provider string) time.Duration
	// Reconcilers are the providers "Ask the provider" asks what they hold
	// for an effect's key, by provider name (those outboxd run dispatches
	// for that can be asked: Stripe). SendGrid's recorded events and a
	// webhook's advice need none.
	Reconcilers map[string]providers.Reconciler
	// Validators check an edited payload, by provider name (outboxd run
	// gives its providers); the built-in schemas otherwise.
	Validators map[string]providers.Validator
	// Keys are the Idempotency-Key middleware's stored keys, for the
	// Idempotency-Keys page (nil: no such page).
	Keys *idempotency.Keys
	// Endpoints is the registry of webhook endpoints, read and changed
	// through EndpointsDB, for the endpoints pages (nil: no such pages).
	// Creating one and rotating its secret need the registry's key.
	Endpoints   *endpoint.Registry
	EndpointsDB endpoint.DB
	// FiredBound is the crash-recovery bound of the stuck diagnosis.
	FiredBound time.Duration
	Logger     *slog.Logger
}

type ui struct {
	cfg   Config
	op    *sideeffects.Operator
	pages map[string]*template.Template
	// minutes keeps the chart's settled minutes (throughput.go).
	minutes *minuteCounts
}

// ContentSecurityPolicy is sent with every response: only this origin's
// stylesheet and script, no inline code, no framing, forms post here only.
const ContentSecurityPolicy = "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

const csrfCookie = "outboxd_csrf"

// New returns the web view's handler.
func New(cfg Config) (http.Handler, error) {
	if cfg.Operator == nil {
		return nil, errors.New("webui: Operator is required")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "/ui/"
	}
	if !strings.HasPrefix(cfg.Prefix, "/") || !strings.HasSuffix(cfg.Prefix, "/") {
		return nil, fmt.Errorf("webui: Prefix %q must start and end with /", cfg.Prefix)
	}
	if cfg.AdminToken != "" && len(cfg.AdminToken) < 16 {
		return nil, errors.New("webui: the admin token must be at least 16 characters (e.g. openssl rand -hex 24)")
	}
	if (cfg.TrustedUserHeader == "") != (len(cfg.TrustedProxies) == 0) {
		return nil, errors.New("webui: TrustedUserHeader and TrustedProxies go together: the header is believed only from the proxies")
	}
	seen := map[string]string{}
	for name, tok := range cfg.Operators {
		switch {
		case !operatorName.MatchString(name):
			return nil, fmt.Errorf("webui: operator name %q: letters, digits and . _ @ - only", name)
		case len(tok) < 16:
			return nil, fmt.Errorf("webui: operator %s: the token must be at least 16 characters (e.g. openssl rand -hex 24)", name)
		case tok == cfg.AdminToken || tok == cfg.ReadToken:
			return nil, fmt.Errorf("webui: operator %s: the token is the admin or read token: give each operator a token of their own", name)
		case seen[tok] != "":
			return nil, fmt.Errorf("webui: operators %s and %s have the same token: give each a token of their own", seen[tok], name)
		}
		seen[tok] = name
	}
	if cfg.ReadToken != "" && len(cfg.ReadToken) < 16 {
		return nil, errors.New("webui: the read token must be at least 16 characters (e.g. openssl rand -hex 24)")
	}
	if (cfg.Endpoints == nil) != (cfg.EndpointsDB == nil) {
		return nil, errors.New("webui: Endpoints and EndpointsDB go together")
	}
	if cfg.KeyWindow == nil {
		cfg.KeyWindow = func(string) time.Duration { return 0 }
	}
	if cfg.FiredBound == 0 {
		cfg.FiredBound = sideeffects.DefaultRescueAfter + time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	u := &ui{cfg: cfg, op: cfg.Operator, pages: map[string]*template.Template{}, minutes: &minuteCounts{read: cfg.Operator.Throughput}}
	funcs := template.FuncMap{
		"age":   func(d time.Duration) string { return d.Round(time.Second).String() },
		"since": func(t time.Time) string { return time.Since(t).Round(time.Second).String() },
		"join":  strings.Join,
		"deref": func(s *string) string {
			if s == nil {
				return ""
			}
			return *s
		},
	}
	for _, page := range []string{"overview", "search", "effect", "action", "error", "bulk", "replays", "replay", "limits", "drift", "reconcile", "keys", "key", "dispatchers", "edit", "endpoints", "endpoint"} {
		t, err := template.New(page).Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+page+".html")
		if err != nil {
			return nil, fmt.Errorf("webui: template %s: %w", page, err)
		}
		u.pages[page] = t
	}
	static, err := fs.Sub(staticFS, "static")
	if err != nil {
		return nil, err
	}
	p := cfg.Prefix
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+p+"{$}", u.overview)
	mux.HandleFunc("GET "+p+"effects", u.search)
	mux.HandleFunc("GET "+p+"effects/bulk", u.bulkForm)
	mux.HandleFunc("POST "+p+"effects/bulk", u.bulkAct)
	mux.HandleFunc("GET "+p+"effects/{id}", u.effect)
	mux.HandleFunc("GET "+p+"effects/{id}/reconcile", u.reconcile)
	mux.HandleFunc("GET "+p+"effects/{id}/edit", u.editForm)
	mux.HandleFunc("POST "+p+"effects/{id}/edit", u.edit)
	mux.HandleFunc("GET "+p+"effects/{id}/actions/{action}", u.actionForm)
	mux.HandleFunc("POST "+p+"effects/{id}/actions/{action}", u.act)
	mux.HandleFunc("GET "+p+"limits", u.limits)
	mux.HandleFunc("POST "+p+"limits", u.setLimit)
	mux.HandleFunc("POST "+p+"limits/resume", u.resumeLimits)
	mux.HandleFunc("GET "+p+"dispatchers", u.dispatchers)
	mux.HandleFunc("GET "+p+"keys", u.keysPage)
	mux.HandleFunc("GET "+p+"keys/{id}", u.keyPage)
	mux.HandleFunc("POST "+p+"keys/{id}/release", u.releaseKey)
	mux.HandleFunc("POST "+p+"keys/{id}/complete", u.completeKey)
	mux.HandleFunc("GET "+p+"drift", u.drift)
	mux.HandleFunc("POST "+p+"drift/ack", u.ackDrift)
	mux.HandleFunc("GET "+p+"endpoints", u.endpointsPage)
	mux.HandleFunc("POST "+p+"endpoints", u.createEndpoint)
	mux.HandleFunc("GET "+p+"endpoints/{id}", u.endpointPage)
	mux.HandleFunc("POST "+p+"endpoints/{id}/{action}", u.endpointAct)
	mux.HandleFunc("GET "+p+"replays", u.replays)
	mux.HandleFunc("POST "+p+"replays", u.startReplay)
	mux.HandleFunc("GET "+p+"replays/{id}", u.replay)
	mux.HandleFunc("POST "+p+"replays/{id}/cancel", u.cancelReplay)
	mux.HandleFunc("POST "+p+"replays/{id}/pace", u.setReplayPace)
	mux.Handle("GET "+p+"static/", http.StripPrefix(p+"static/", http.FileServerFS(static)))
	if p != "/" {
		mux.Handle("GET /{$}", http.RedirectHandler(p, http.StatusFound))
	}
	if cfg.ReadToken != "" || cfg.ReadNeedsCredential {
		return secure(u.readers(mux)), nil
	}
	return secure(mux), nil
}

// readers lets through only requests that carry the read token or the
// admin token (basic auth password or bearer).
func (u *ui) readers(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := u.proxyUser(r); ok {
			h.ServeHTTP(w, r)
			return
		}
		got, found := "", false
		if _, pass, ok := r.BasicAuth(); ok {
			got, found = pass, true
		} else if b, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
			got, found = b, true
		}
		toks := []string{u.cfg.ReadToken, u.cfg.AdminToken}
		for _, t := range u.cfg.Operators {
			toks = append(toks, t)
		}
		for _, tok := range toks {
			if found && tok != "" && subtle.ConstantTimeCompare([]byte(got), []byte(tok)) == 1 {
				h.ServeHTTP(w, r)
				return
			}
		}
		w.Header().Set("WWW-Authenticate", `Basic realm="outboxd", charset="UTF-8"`)
		u.fail(w, http.StatusUnauthorized, "this web view needs a credential: any user name, the read token (or the admin token) as password", nil)
	})
}

// secure sets the headers every response carries.
func secure(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", ContentSecurityPolicy)
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "no-referrer")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("Cache-Control", "no-store")
		h.ServeHTTP(w, r)
	})
}

// view is what every page template gets.
type view struct {
	Title  string
	Prefix string
	Schema string
	Shard  string
	Fleet  string
	Admin  bool
	CSRF   string
	Data   any
}

func (u *ui) render(w http.ResponseWriter, r *http.Request, status int, page, title string, data any) {
	v := view{Title: title, Prefix: u.cfg.Prefix, Schema: cmpOr(u.cfg.Schema, "search_path"), Shard: u.cfg.Shard, Fleet: u.cfg.Fleet,
		Admin: u.canAct(), CSRF: u.csrfToken(w, r), Data: data}
	var b strings.Builder
	if err := u.pages[page].ExecuteTemplate(&b, "layout", v); err != nil {
		u.cfg.Logger.Error("webui: render", "page", page, "error", err)
		http.Error(w, "could not render the page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(b.String()))
}

// fail answers with an error page: the status, what went wrong and the
// way back, in the view's layout (no form on it, so no CSRF token).
func (u *ui) fail(w http.ResponseWriter, status int, msg string, err error) {
	if err != nil {
		u.cfg.Logger.Error("webui: "+msg, "error", err)
	}
	v := view{Title: http.StatusText(status), Prefix: u.cfg.Prefix, Schema: cmpOr(u.cfg.Schema, "search_path"), Shard: u.cfg.Shard,
		Fleet: u.cfg.Fleet, Admin: u.canAct(), Data: errorData{Status: status, StatusText: http.StatusText(status), Message: msg}}
	var b strings.Builder
	if err := u.pages["error"].ExecuteTemplate(&b, "layout", v); err != nil {
		http.Error(w, msg, status)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(b.String()))
}

type errorData struct {
	Status     int
	StatusText string
	Message    string
}

// csrfToken returns this browser's CSRF token, setting the cookie that
// carries it when there is none. A form posts it back; a cross-site page
// can neither read the cookie nor make the browser send it (SameSite=Strict).
func (u *ui) csrfToken(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(csrfCookie); err == nil && len(c.Value) == 64 {
		return c.Value
	}
	var b [32]byte
	_, _ = rand.Read(b[:])
	tok := hex.EncodeToString(b[:])
	http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: tok, Path: u.cfg.Prefix, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	return tok
}

// sameOrigin refuses a state-changing request that comes from another site
// or lacks the CSRF token of this browser.
func (u *ui) sameOrigin(r *http.Request) error {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return fmt.Errorf("cross-site request (%s)", site)
	}
	if o := r.Header.Get("Origin"); o != "" && o != "null" {
		ou, err := url.Parse(o)
		if err != nil || ou.Host != r.Host {
			return fmt.Errorf("request from origin %s", o)
		}
	}
	c, err := r.Cookie(csrfCookie)
	form := r.PostFormValue("csrf")
	if err != nil || form == "" || subtle.ConstantTimeCompare([]byte(c.Value), []byte(form)) != 1 {
		return errors.New("missing or wrong CSRF token: reload the page and submit its form again")
	}
	return nil
}

// admin authenticates an action: HTTP basic auth with the admin token as
// password (the user name is the actor), or a bearer token. It answers
// the request itself when it returns false.
func (u *ui) admin(w http.ResponseWriter, r *http.Request) (actor string, ok bool) {
	actor, _, ok = u.authenticate(w, r)
	return actor, ok
}

// authenticate is admin, also saying whether the credential was a bearer
// token: a browser never sends one by itself, so such a request needs no
// CSRF token (basic auth is cached and sent by the browser: it does).
func (u *ui) authenticate(w http.ResponseWriter, r *http.Request) (actor string, bearer, ok bool) {
	if !u.canAct() {
		u.fail(w, http.StatusForbidden, "read-only: this outboxd has no admin credential configured (--web-admin-token, --web-operator-tokens)", nil)
		return "", false, false
	}
	if name, ok := u.proxyUser(r); ok {
		return "web:" + name, false, true
	}
	user, pass, hasBasic := r.BasicAuth()
	b, hasBearer := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	// A named operator's token names its holder, whatever was typed.
	for name, t := range u.cfg.Operators {
		if hasBasic && subtle.ConstantTimeCompare([]byte(pass), []byte(t)) == 1 {
			return "web:" + name, false, true
		}
		if hasBearer && subtle.ConstantTimeCompare([]byte(b), []byte(t)) == 1 {
			return "web:" + name, true, true
		}
	}
	if tok := []byte(u.cfg.AdminToken); len(tok) > 0 {
		if hasBasic && subtle.ConstantTimeCompare([]byte(pass), tok) == 1 {
			return "web:" + cmpOr(user, "admin"), false, true
		}
		if hasBearer && subtle.ConstantTimeCompare([]byte(b), tok) == 1 {
			return "web:token", true, true
		}
	}
	w.Header().Set("WWW-Authenticate", `Basic realm="outboxd actions", charset="UTF-8"`)
	var ways []string
	if len(u.cfg.Operators) > 0 {
		ways = append(ways, "your own operator token as password (any user name; the audit names you)")
	}
	if u.cfg.AdminToken != "" {
		ways = append(ways, "your name as user and the admin token as password")
	}
	if u.cfg.TrustedUserHeader != "" {
		ways = append(ways, "signing in through the authenticating proxy in front of this view")
	}
	u.fail(w, http.StatusUnauthorized, "actions need a credential: "+strings.Join(ways, "; or ")+". A script sends the same token as a bearer token.", nil)
	return "", false, false
}

// canAct is whether any credential for actions is configured.
func (u *ui) canAct() bool {
	return u.cfg.AdminToken != "" || len(u.cfg.Operators) > 0 || u.cfg.TrustedUserHeader != ""
}

// proxyUser is the person an authenticating proxy in front of the view
// says made the request: the trusted header, believed only from the
// trusted proxies' addresses.
func (u *ui) proxyUser(r *http.Request) (string, bool) {
	if u.cfg.TrustedUserHeader == "" {
		return "", false
	}
	// A header that arrives more than once names no one: a proxy that
	// appends the signed-in name to a client's own header, instead of
	// replacing it, must not let the client's value win.
	values := r.Header.Values(u.cfg.TrustedUserHeader)
	if len(values) != 1 {
		return "", false
	}
	name := strings.TrimSpace(values[0])
	if name == "" || !operatorName.MatchString(name) {
		return "", false
	}
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return "", false
	}
	for _, p := range u.cfg.TrustedProxies {
		if p.Contains(ap.Addr().Unmap()) {
			return name, true
		}
	}
	return "", false
}

var operatorName = regexp.MustCompile(`^[A-Za-z0-9._@-]{1,64}$`)

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
