package endpoint

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxd/outboxd/pgschema"
	"github.com/outboxd/outboxd/providers/endpoint/endpointschema"
	"github.com/outboxd/outboxd/providers/webhook"
)

// DB is what the registry and the provider use: a *pgxpool.Pool, a
// *pgx.Conn or a pgx.Tx (the application's own transaction, for an
// endpoint created with the customer that owns it).
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Endpoint is a registered webhook destination.
type Endpoint struct {
	// ID identifies the endpoint; Create makes one when it is Nil.
	ID uuid.UUID `json:"id"`
	// URL is where its deliveries are POSTed: https (or http), checked as
	// a webhook effect's url is (no credentials, no private addresses
	// unless allowed), and again by the dial guard at each delivery.
	URL string `json:"url"`
	// Tenant is whose endpoint it is: an event's subscribers effect with
	// tenant T reaches only T's endpoints; with none, only endpoints with
	// none. At most 128 letters, digits and . _ : @ -.
	Tenant string `json:"tenant,omitempty"`
	// Description is for people.
	Description string `json:"description,omitempty"`
	// EventTypes are the event types it receives: exact ("order.paid"),
	// a prefix ("order.*": order.paid, order.refund.created) or "*" (every
	// type of the application's: outboxd's own operational events,
	// outboxd.*, reach only endpoints that name them).
	EventTypes []string `json:"event_types"`
	// Headers are added to each request (never the signing, idempotency
	// or content headers), for example a static Authorization.
	Headers map[string]string `json:"headers,omitempty"`
	// MaxInFlight caps its requests in flight at once, per outboxd
	// process (0: only its host's cap, --webhook-max-per-host); its rate
	// over every replica is its limit key's (LimitKey).
	MaxInFlight int `json:"max_in_flight,omitempty"`
	// DisabledAt is when it was disabled (nil: enabled); DisabledReason
	// why. A disabled endpoint is given no new events; its deliveries
	// already recorded wait, spending no attempt, until it is enabled.
	DisabledAt     *time.Time `json:"disabled_at,omitempty"`
	DisabledReason string     `json:"disabled_reason,omitempty"`
	// FailingSince is when every delivery to it began failing (nil: the
	// last one succeeded, or none failed); outboxd disables it once that
	// lasts --endpoint-disable-after.
	FailingSince *time.Time `json:"failing_since,omitempty"`
	CreatedAt    time.Time  `json:"created_at"`
	UpdatedAt    time.Time  `json:"updated_at"`
	// Secrets are its signing secrets, current first (never their
	// values, which are shown once, on creation or rotation).
	Secrets []SecretInfo `json:"secrets,omitempty"`
	// ClientCertificate describes the certificate presented to its
	// receiver (mutual TLS); nil when none is set.
	ClientCertificate *CertificateInfo `json:"client_certificate,omitempty"`
}

// MarshalJSON writes the endpoint with each header value replaced by
// "(set)": header values are credentials (a static Authorization), shown
// by no output, --json included.
func (ep Endpoint) MarshalJSON() ([]byte, error) {
	type plain Endpoint
	out := plain(ep)
	if len(ep.Headers) > 0 {
		out.Headers = make(map[string]string, len(ep.Headers))
		for name := range ep.Headers {
			out.Headers[name] = "(set)"
		}
	}
	return json.Marshal(out)
}

// CertificateInfo describes an endpoint's client certificate.
type CertificateInfo struct {
	Subject  string    `json:"subject"`
	Issuer   string    `json:"issuer"`
	NotAfter time.Time `json:"not_after"`
}

// SecretInfo describes one signing secret.
type SecretInfo struct {
	CreatedAt time.Time `json:"created_at"`
	// ExpiresAt is when a rotated secret stops signing; nil for the
	// current one.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// Change says who changes an endpoint and why, for its audit trail.
type Change struct {
	Actor  string
	Reason string
}

// ValidationError names the field of an endpoint that is wrong and how to
// mend it; nothing was written.
type ValidationError struct {
	Field   string
	Problem string
}

func (e *ValidationError) Error() string { return "endpoint: " + e.Field + ": " + e.Problem }

// ErrNotFound is returned for an endpoint id that is not registered.
var ErrNotFound = errors.New("endpoint: not found")

// ErrNoKey is returned by what seals a secret when the registry has no
// Key.
var ErrNoKey = errors.New("endpoint: no endpoint key: give the key that seals endpoint secrets (OUTBOXD_ENDPOINT_KEY; outboxctl endpoints new-key prints one)")

// DefaultOverlap is how long a rotated secret keeps signing beside the new
// one, so that receivers can move to the new secret; MaxOverlap is the
// longest it may (a secret rotated out is one an operator wants gone);
// RetireAtOnce, as Rotate's overlap, stops every earlier secret signing at
// once: the rotation after a leak.
const (
	DefaultOverlap = 24 * time.Hour
	MaxOverlap     = 7 * 24 * time.Hour
	RetireAtOnce   = time.Duration(-1)
)

// RegistryConfig configures a Registry.
type RegistryConfig struct {
	// Schema holds outboxd's tables ("" uses search_path).
	Schema string
	// Key seals new secrets. Without it the registry reads, edits,
	// disables and enables, but cannot create endpoints or rotate.
	Key *Key
	// AllowedNetworks are non-public networks endpoint URLs may point at,
	// as webhook.Schema's.
	AllowedNetworks []netip.Prefix
}

// Registry manages endpoints: from an application that registers its
// customers' endpoints, from outboxctl endpoints and from the web view.
// Every change is written with its audit row in one transaction.
type Registry struct {
	schema string
	key    *Key
	urls   webhook.Schema
}

// NewRegistry checks cfg and returns a Registry.
func NewRegistry(cfg RegistryConfig) (*Registry, error) {
	if err := pgschema.Check(cfg.Schema); err != nil {
		return nil, fmt.Errorf("endpoint: RegistryConfig.Schema: %w", err)
	}
	if err := webhook.CheckAllowedNetworks(cfg.AllowedNetworks); err != nil {
		return nil, fmt.Errorf("endpoint: RegistryConfig.AllowedNetworks: %w", err)
	}
	return &Registry{schema: cfg.Schema, key: cfg.Key, urls: webhook.Schema{AllowedNetworks: cfg.AllowedNetworks}}, nil
}

func (r *Registry) table(name string) string { return pgschema.Table(r.schema, name) }

var (
	tenantPattern = regexp.MustCompile(`^[A-Za-z0-9._:@-]{1,128}$`)
	// An event type pattern: "*", or text without '*' optionally ending
	// in ".*".
	maxEventTypes = 64
)

// check validates what a caller may set on an endpoint.
func (r *Registry) check(ep *Endpoint) error {
	invalid := func(field, problem string, args ...any) error {
		return &ValidationError{Field: field, Problem: fmt.Sprintf(problem, args...)}
	}
	probe, _ := json.Marshal(webhook.Payload{URL: ep.URL, Body: json.RawMessage(`{}`), Headers: ep.Headers})
	if err := r.urls.ValidatePayload("", probe); err != nil {
		msg := strings.TrimPrefix(err.Error(), "payload.")
		field, problem, ok := strings.Cut(msg, ": ")
		if !ok {
			field, problem = "url", msg
		}
		return invalid(field, "%s", problem)
	}
	if ep.MaxInFlight < 0 || ep.MaxInFlight > 10000 {
		return invalid("max_in_flight", "%d: give 1 to 10000 requests at once, or 0 for its host's cap only", ep.MaxInFlight)
	}
	if ep.Tenant != "" && !tenantPattern.MatchString(ep.Tenant) {
		return invalid("tenant", "%q: a tenant is at most 128 letters, digits and . _ : @ -", ep.Tenant)
	}
	if len(ep.Description) > 1024 || !utf8.ValidString(ep.Description) || strings.ContainsRune(ep.Description, 0) {
		return invalid("description", "at most 1024 bytes of UTF-8 text")
	}
	if len(ep.EventTypes) == 0 {
		return invalid("event_types", "required: the event types it receives, for example order.paid, order.* or *")
	}
	if len(ep.EventTypes) > maxEventTypes {
		return invalid("event_types", "%d patterns, over the limit of %d", len(ep.EventTypes), maxEventTypes)
	}
	for i, p := range ep.EventTypes {
		field := fmt.Sprintf("event_types[%d]", i)
		switch {
		case p == "":
			return invalid(field, "empty: give an event type, a prefix such as order.* or *")
		case len(p) > 512 || !utf8.ValidString(p) || strings.ContainsRune(p, 0):
			return invalid(field, "at most 512 bytes of UTF-8 text")
		case p == "*":
		case strings.Contains(strings.TrimSuffix(p, ".*"), "*"):
			return invalid(field, "%q: * stands alone (every type) or ends a prefix after a dot (order.*)", p)
		}
		if slices.Index(ep.EventTypes, p) < i {
			return invalid(field, "%q is listed twice", p)
		}
	}
	return nil
}

const endpointColumns = `id, url, coalesce(tenant, ''), description, event_types, headers, disabled_at, coalesce(disabled_reason, ''), failing_since, created_at, updated_at,
	coalesce(client_cert, ''), coalesce(max_in_flight, 0),
	coalesce((SELECT jsonb_agg(jsonb_build_object('created_at', s.created_at, 'expires_at', s.expires_at) ORDER BY s.expires_at DESC NULLS FIRST, s.id DESC)
		FROM /*secrets*/ s WHERE s.endpoint_id = e.id AND (s.expires_at IS NULL OR s.expires_at > now())), '[]')`

func (r *Registry) selectSQL(where string) string {
	q := strings.ReplaceAll(endpointColumns, "/*secrets*/", r.table("outboxd_endpoint_secrets"))
	return "SELECT " + q + " FROM " + r.table("outboxd_endpoints") + " e " + where
}

func scanEndpoint(row pgx.Row) (*Endpoint, error) {
	var ep Endpoint
	var headers, secrets []byte
	var certPEM string
	if err := row.Scan(&ep.ID, &ep.URL, &ep.Tenant, &ep.Description, &ep.EventTypes, &headers, &ep.DisabledAt, &ep.DisabledReason, &ep.FailingSince,
		&ep.CreatedAt, &ep.UpdatedAt, &certPEM, &ep.MaxInFlight, &secrets); err != nil {
		return nil, err
	}
	if certPEM != "" {
		if block, _ := pem.Decode([]byte(certPEM)); block != nil {
			if c, err := x509.ParseCertificate(block.Bytes); err == nil {
				ep.ClientCertificate = &CertificateInfo{Subject: c.Subject.String(), Issuer: c.Issuer.String(), NotAfter: c.NotAfter}
			}
		}
	}
	if err := json.Unmarshal(headers, &ep.Headers); err != nil {
		return nil, fmt.Errorf("endpoint %s headers: %w", ep.ID, err)
	}
	if len(ep.Headers) == 0 {
		ep.Headers = nil
	}
	if err := json.Unmarshal(secrets, &ep.Secrets); err != nil {
		return nil, fmt.Errorf("endpoint %s secrets: %w", ep.ID, err)
	}
	return &ep, nil
}

// Get returns the endpoint id, or ErrNotFound.
func (r *Registry) Get(ctx context.Context, db DB, id uuid.UUID) (*Endpoint, error) {
	ep, err := scanEndpoint(db.QueryRow(ctx, r.selectSQL("WHERE e.id = $1"), id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	return ep, err
}

// ListFilter narrows List; the zero value lists every endpoint.
type ListFilter struct {
	// Tenant, when set, keeps one tenant's endpoints.
	Tenant string
	// EventType, when set, keeps the endpoints a new event of this type
	// (and Tenant) would be fanned out to (a disabled one holds its
	// delivery).
	EventType string
}

// List returns endpoints, oldest first.
func (r *Registry) List(ctx context.Context, db DB, f ListFilter) ([]Endpoint, error) {
	where := `WHERE ($1 = '' OR coalesce(e.tenant, '') = $1)
	AND ($2 = '' OR (coalesce(e.tenant, '') = $1 AND EXISTS (SELECT 1 FROM unnest(e.event_types) AS p
		WHERE p = $2 OR (p = '*' AND NOT starts_with($2, 'outboxd.')) OR (right(p, 2) = '.*' AND starts_with($2, left(p, -1))))))
	ORDER BY e.created_at, e.id`
	rows, err := db.Query(ctx, r.selectSQL(where), f.Tenant, f.EventType)
	if err != nil {
		return nil, fmt.Errorf("endpoint: list: %w", err)
	}
	defer rows.Close()
	var out []Endpoint
	for rows.Next() {
		ep, err := scanEndpoint(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, *ep)
	}
	return out, rows.Err()
}

// Create registers ep and returns it with its first signing secret, which
// is shown this once: give it to the endpoint's owner.
func (r *Registry) Create(ctx context.Context, db DB, ep Endpoint, by Change) (*Endpoint, string, error) {
	if r.key == nil {
		return nil, "", ErrNoKey
	}
	if err := checkChange(by, false); err != nil {
		return nil, "", err
	}
	if err := r.check(&ep); err != nil {
		return nil, "", err
	}
	if ep.ID == uuid.Nil {
		ep.ID = uuid.Must(uuid.NewV7())
	}
	secret := newSecret()
	headers, _ := json.Marshal(nonNil(ep.Headers))
	var out *Endpoint
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO `+r.table("outboxd_endpoints")+` (id, url, tenant, description, event_types, headers, max_in_flight)
			VALUES ($1, $2, nullif($3, ''), $4, $5, $6, nullif($7, 0))`, ep.ID, ep.URL, ep.Tenant, ep.Description, ep.EventTypes, headers, ep.MaxInFlight); err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "23505" {
				return &ValidationError{Field: "id", Problem: fmt.Sprintf("%s is registered already", ep.ID)}
			}
			return fmt.Errorf("endpoint: create: %w", err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+r.table("outboxd_endpoint_secrets")+` (endpoint_id, sealed) VALUES ($1, $2)`,
			ep.ID, r.key.seal(ep.ID, secret)); err != nil {
			return fmt.Errorf("endpoint: create: %w", err)
		}
		if err := r.audit(ctx, tx, ep.ID, "create", by, map[string]any{"url": ep.URL, "event_types": ep.EventTypes, "tenant": ep.Tenant}); err != nil {
			return err
		}
		var err error
		out, err = r.Get(ctx, tx, ep.ID)
		return err
	})
	if err != nil {
		return nil, "", err
	}
	return out, secret, nil
}

// Update is what Edit changes; nil fields are left as they are.
type Update struct {
	URL         *string
	Description *string
	EventTypes  []string
	// Headers replaces the headers; an empty non-nil map removes them.
	Headers map[string]string
	// MaxInFlight sets the cap on requests in flight (0 removes it).
	MaxInFlight *int
}

// Edit changes an endpoint's URL, description, event types or headers. A
// new URL applies to its deliveries not yet sent; new event types to
// events recorded from now on.
func (r *Registry) Edit(ctx context.Context, db DB, id uuid.UUID, u Update, by Change) (*Endpoint, error) {
	if err := checkChange(by, false); err != nil {
		return nil, err
	}
	var out *Endpoint
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		ep, err := scanEndpoint(tx.QueryRow(ctx, r.selectSQL("WHERE e.id = $1 FOR UPDATE"), id))
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		details := map[string]any{}
		if u.URL != nil && *u.URL != ep.URL {
			details["url"] = map[string]string{"from": ep.URL, "to": *u.URL}
			ep.URL = *u.URL
		}
		if u.Description != nil && *u.Description != ep.Description {
			details["description"] = *u.Description
			ep.Description = *u.Description
		}
		if u.EventTypes != nil && !slices.Equal(u.EventTypes, ep.EventTypes) {
			details["event_types"] = map[string][]string{"from": ep.EventTypes, "to": u.EventTypes}
			ep.EventTypes = u.EventTypes
		}
		if u.MaxInFlight != nil && *u.MaxInFlight != ep.MaxInFlight {
			details["max_in_flight"] = map[string]int{"from": ep.MaxInFlight, "to": *u.MaxInFlight}
			ep.MaxInFlight = *u.MaxInFlight
		}
		if u.Headers != nil {
			// Header values may be credentials: the audit names them only.
			details["headers"] = sortedKeys(u.Headers)
			ep.Headers = u.Headers
		}
		if err := r.check(ep); err != nil {
			return err
		}
		if len(details) == 0 {
			out = ep
			return nil
		}
		headers, _ := json.Marshal(nonNil(ep.Headers))
		if _, err := tx.Exec(ctx, `UPDATE `+r.table("outboxd_endpoints")+` SET url = $2, description = $3, event_types = $4, headers = $5,
			max_in_flight = nullif($6, 0), updated_at = now()
			WHERE id = $1`, id, ep.URL, ep.Description, ep.EventTypes, headers, ep.MaxInFlight); err != nil {
			return fmt.Errorf("endpoint: edit: %w", err)
		}
		if err := r.audit(ctx, tx, id, "edit", by, details); err != nil {
			return err
		}
		out, err = r.Get(ctx, tx, id)
		return err
	})
	return out, err
}

// Disable stops an endpoint from being given new events; its deliveries
// already recorded wait, spending no attempt, until Enable. by.Reason is
// required.
func (r *Registry) Disable(ctx context.Context, db DB, id uuid.UUID, by Change) error {
	if err := checkChange(by, true); err != nil {
		return err
	}
	return r.setDisabled(ctx, db, id, true, by)
}

// Enable lets a disabled endpoint receive events again; the deliveries
// that waited go on. by.Reason is required.
func (r *Registry) Enable(ctx context.Context, db DB, id uuid.UUID, by Change) error {
	if err := checkChange(by, true); err != nil {
		return err
	}
	return r.setDisabled(ctx, db, id, false, by)
}

func (r *Registry) setDisabled(ctx context.Context, db DB, id uuid.UUID, disable bool, by Change) error {
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE `+r.table("outboxd_endpoints")+`
			SET disabled_at = CASE WHEN $2 THEN coalesce(disabled_at, now()) END,
				disabled_reason = CASE WHEN $2 THEN $3 END, updated_at = now()
			WHERE id = $1`, id, disable, by.Reason)
		if err != nil {
			return fmt.Errorf("endpoint: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return ErrNotFound
		}
		action := "enable"
		if disable {
			action = "disable"
		}
		return r.audit(ctx, tx, id, action, by, nil)
	})
}

// SetClientCertificate gives endpoint id a client certificate to present
// to its receiver (mutual TLS): certPEM its chain and keyPEM its private
// key, both PEM; the key is sealed as the secrets are and never shown.
// Nil certPEM and keyPEM remove it.
func (r *Registry) SetClientCertificate(ctx context.Context, db DB, id uuid.UUID, certPEM, keyPEM []byte, by Change) error {
	if err := checkChange(by, false); err != nil {
		return err
	}
	var certText *string
	var sealed []byte
	details := map[string]any{"removed": true}
	if certPEM != nil || keyPEM != nil {
		if r.key == nil {
			return ErrNoKey
		}
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return &ValidationError{Field: "client_certificate", Problem: "not a PEM certificate and its private key: " + err.Error()}
		}
		leaf, err := x509.ParseCertificate(pair.Certificate[0])
		if err != nil {
			return &ValidationError{Field: "client_certificate", Problem: err.Error()}
		}
		if time.Now().After(leaf.NotAfter) {
			return &ValidationError{Field: "client_certificate", Problem: fmt.Sprintf("expired on %s", leaf.NotAfter.Format(time.RFC3339))}
		}
		text := string(certPEM)
		certText, sealed = &text, r.key.sealFor(id, purposeClientKey, string(keyPEM))
		details = map[string]any{"subject": leaf.Subject.String(), "not_after": leaf.NotAfter}
	}
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE `+r.table("outboxd_endpoints")+` SET client_cert = $2, client_key_sealed = $3, updated_at = now() WHERE id = $1`,
			id, certText, sealed)
		if err != nil {
			return fmt.Errorf("endpoint: client certificate: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return ErrNotFound
		}
		return r.audit(ctx, tx, id, "client_certificate", by, details)
	})
}

// Rotate gives an endpoint a new signing secret, returned this once; the
// one it replaces keeps signing beside it for overlap (DefaultOverlap
// when 0, at most MaxOverlap), so that receivers verify either until they
// move. A negative overlap (RetireAtOnce) stops the one it replaces and
// every one rotated out before it signing at once. Secrets that expired
// are removed.
func (r *Registry) Rotate(ctx context.Context, db DB, id uuid.UUID, overlap time.Duration, by Change) (string, error) {
	if r.key == nil {
		return "", ErrNoKey
	}
	if err := checkChange(by, false); err != nil {
		return "", err
	}
	if overlap == 0 {
		overlap = DefaultOverlap
	}
	if overlap > MaxOverlap {
		return "", fmt.Errorf("endpoint: rotate: overlap %s is over the cap of %s: a rotated-out secret signs for at most a week", overlap, MaxOverlap)
	}
	retire := overlap < 0
	overlap = max(overlap, 0)
	secret := newSecret()
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		var found bool
		if err := tx.QueryRow(ctx, `SELECT true FROM `+r.table("outboxd_endpoints")+` WHERE id = $1 FOR UPDATE`, id).Scan(&found); errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		} else if err != nil {
			return fmt.Errorf("endpoint: rotate: %w", err)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM `+r.table("outboxd_endpoint_secrets")+` WHERE endpoint_id = $1 AND expires_at <= now()`, id); err != nil {
			return fmt.Errorf("endpoint: rotate: %w", err)
		}
		// The current secret signs for the overlap; retiring, every
		// secret still signing stops now.
		if _, err := tx.Exec(ctx, `UPDATE `+r.table("outboxd_endpoint_secrets")+` SET expires_at = now() + $2::interval
			WHERE endpoint_id = $1 AND (expires_at IS NULL OR ($3 AND expires_at > now()))`, id, overlap, retire); err != nil {
			return fmt.Errorf("endpoint: rotate: %w", err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+r.table("outboxd_endpoint_secrets")+` (endpoint_id, sealed) VALUES ($1, $2)`,
			id, r.key.seal(id, secret)); err != nil {
			return fmt.Errorf("endpoint: rotate: %w", err)
		}
		if _, err := tx.Exec(ctx, `UPDATE `+r.table("outboxd_endpoints")+` SET updated_at = now() WHERE id = $1`, id); err != nil {
			return fmt.Errorf("endpoint: rotate: %w", err)
		}
		return r.audit(ctx, tx, id, "rotate", by, map[string]any{"overlap": overlap.String(), "retired_earlier": retire})
	})
	if err != nil {
		return "", err
	}
	return secret, nil
}

// Resealed is what Reseal did.
type Resealed struct {
	// Secrets and ClientKeys are how many sealed values it sealed again
	// with the first key of the list; Endpoints how many endpoints they
	// belong to.
	Secrets    int `json:"secrets"`
	ClientKeys int `json:"client_keys"`
	Endpoints  int `json:"endpoints"`
}

// Reseal seals again, with the first key of the registry's key list,
// every signing secret and client certificate key sealed with another key
// of the list: after it, the other keys can be dropped from
// OUTBOXD_ENDPOINT_KEY. A value no key of the list opens is left as it is
// and named in the error, after the others are resealed. Each endpoint
// changed is audited (action "reseal"); a reason is required. Secrets keep
// their expiry: a rotated-out secret still stops signing when it was to.
func (r *Registry) Reseal(ctx context.Context, db DB, by Change) (Resealed, error) {
	var res Resealed
	if r.key == nil {
		return res, ErrNoKey
	}
	if err := checkChange(by, true); err != nil {
		return res, err
	}
	var unopened []string
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		changed := map[uuid.UUID]map[string]int{}
		note := func(id uuid.UUID, what string) {
			if changed[id] == nil {
				changed[id] = map[string]int{}
			}
			changed[id][what]++
		}
		rows, err := tx.Query(ctx, `SELECT id, endpoint_id, sealed FROM `+r.table("outboxd_endpoint_secrets")+`
			WHERE substr(sealed, 2, 4) <> $1 ORDER BY id FOR UPDATE`, r.key.sealingID())
		if err != nil {
			return fmt.Errorf("endpoint: reseal: %w", err)
		}
		type sealedRow struct {
			id       int64
			endpoint uuid.UUID
			sealed   []byte
		}
		secrets, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (sealedRow, error) {
			var sr sealedRow
			return sr, row.Scan(&sr.id, &sr.endpoint, &sr.sealed)
		})
		if err != nil {
			return fmt.Errorf("endpoint: reseal: %w", err)
		}
		for _, sr := range secrets {
			plain, err := r.key.open(sr.endpoint, sr.sealed)
			if err != nil {
				unopened = append(unopened, fmt.Sprintf("endpoint %s secret %d: %v", sr.endpoint, sr.id, err))
				continue
			}
			if _, err := tx.Exec(ctx, `UPDATE `+r.table("outboxd_endpoint_secrets")+` SET sealed = $2 WHERE id = $1`,
				sr.id, r.key.seal(sr.endpoint, plain)); err != nil {
				return fmt.Errorf("endpoint: reseal: %w", err)
			}
			res.Secrets++
			note(sr.endpoint, "secrets")
		}
		rows, err = tx.Query(ctx, `SELECT id, client_key_sealed FROM `+r.table("outboxd_endpoints")+`
			WHERE client_key_sealed IS NOT NULL AND substr(client_key_sealed, 2, 4) <> $1 ORDER BY id FOR UPDATE`, r.key.sealingID())
		if err != nil {
			return fmt.Errorf("endpoint: reseal: %w", err)
		}
		keys, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (sealedRow, error) {
			var sr sealedRow
			return sr, row.Scan(&sr.endpoint, &sr.sealed)
		})
		if err != nil {
			return fmt.Errorf("endpoint: reseal: %w", err)
		}
		for _, sr := range keys {
			plain, err := r.key.openFor(sr.endpoint, purposeClientKey, sr.sealed)
			if err != nil {
				unopened = append(unopened, fmt.Sprintf("endpoint %s client certificate key: %v", sr.endpoint, err))
				continue
			}
			if _, err := tx.Exec(ctx, `UPDATE `+r.table("outboxd_endpoints")+` SET client_key_sealed = $2, updated_at = now() WHERE id = $1`,
				sr.endpoint, r.key.sealFor(sr.endpoint, purposeClientKey, plain)); err != nil {
				return fmt.Errorf("endpoint: reseal: %w", err)
			}
			res.ClientKeys++
			note(sr.endpoint, "client_keys")
		}
		for id, what := range changed {
			details := map[string]any{}
			for k, v := range what {
				details[k] = v
			}
			if err := r.audit(ctx, tx, id, "reseal", by, details); err != nil {
				return err
			}
		}
		res.Endpoints = len(changed)
		return nil
	})
	if err != nil {
		return Resealed{}, err
	}
	if len(unopened) > 0 {
		return res, fmt.Errorf("endpoint: reseal: %d sealed values no key of the list opens, left as they are: %s", len(unopened), strings.Join(unopened, "; "))
	}
	return res, nil
}

// Unopenable counts the sealed secrets and client certificate keys that
// no key of the registry's list was used to seal: what a process given
// this list could not sign or connect with.
func (r *Registry) Unopenable(ctx context.Context, db DB) (int, error) {
	if r.key == nil {
		return 0, ErrNoKey
	}
	var n int
	err := db.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+r.table("outboxd_endpoint_secrets")+` WHERE NOT substr(sealed, 2, 4) = ANY($1))
		+ (SELECT count(*) FROM `+r.table("outboxd_endpoints")+` WHERE client_key_sealed IS NOT NULL AND NOT substr(client_key_sealed, 2, 4) = ANY($1))`,
		r.key.ids()).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("endpoint: check the sealed secrets: %w", err)
	}
	return n, nil
}

// AuditEntry is one change to an endpoint.
type AuditEntry struct {
	Action    string          `json:"action"`
	Actor     string          `json:"actor"`
	Reason    string          `json:"reason,omitempty"`
	Details   json.RawMessage `json:"details,omitempty"`
	CreatedAt time.Time       `json:"created_at"`
}

// History returns an endpoint's changes, oldest first.
func (r *Registry) History(ctx context.Context, db DB, id uuid.UUID) ([]AuditEntry, error) {
	rows, err := db.Query(ctx, `SELECT action, actor, reason, details, created_at FROM `+r.table("outboxd_endpoint_audit")+`
		WHERE endpoint_id = $1 ORDER BY id`, id)
	if err != nil {
		return nil, fmt.Errorf("endpoint: history: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (AuditEntry, error) {
		var a AuditEntry
		err := row.Scan(&a.Action, &a.Actor, &a.Reason, &a.Details, &a.CreatedAt)
		return a, err
	})
}

func (r *Registry) audit(ctx context.Context, tx pgx.Tx, id uuid.UUID, action string, by Change, details map[string]any) error {
	d, _ := json.Marshal(nonNil(details))
	if _, err := tx.Exec(ctx, `INSERT INTO `+r.table("outboxd_endpoint_audit")+` (endpoint_id, action, actor, reason, details)
		VALUES ($1, $2, $3, $4, $5)`, id, action, by.Actor, by.Reason, d); err != nil {
		return fmt.Errorf("endpoint: audit: %w", err)
	}
	return nil
}

func checkChange(by Change, reason bool) error {
	if strings.TrimSpace(by.Actor) == "" {
		return &ValidationError{Field: "actor", Problem: "required: who makes the change, for the audit trail"}
	}
	if reason && strings.TrimSpace(by.Reason) == "" {
		return &ValidationError{Field: "reason", Problem: "required: why, for the audit trail and the endpoint's owner"}
	}
	return nil
}

func nonNil[M ~map[K]V, K comparable, V any](m M) M {
	if m == nil {
		return M{}
	}
	return m
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Deliveries returns the ids of endpoint id's deliveries not yet ended
// (pending or fired), oldest first, at most limit: the ones a disabled
// endpoint holds, for an operator who enables it to deliver or drop.
func (r *Registry) Deliveries(ctx context.Context, db DB, id uuid.UUID, limit int) ([]uuid.UUID, error) {
	rows, err := db.Query(ctx, `SELECT id FROM `+r.table("side_effects")+`
		WHERE phase = 'live' AND state IN ('pending', 'fired') AND kind = $1 AND provider = $2
		ORDER BY created_at, id LIMIT $3`, endpointschema.KindPrefix+id.String(), Name, limit)
	if err != nil {
		return nil, fmt.Errorf("endpoint: deliveries: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
}

// HeldDelivery is one delivery an endpoint holds, as an operator deciding
// to deliver or drop it sees it.
type HeldDelivery struct {
	EffectID  uuid.UUID `json:"effect_id"`
	EventID   uuid.UUID `json:"event_id"`
	EventType string    `json:"event_type"`
	CreatedAt time.Time `json:"created_at"`
}

// Held lists endpoint id's deliveries not yet ended, oldest first, at most
// limit, with their events' types.
func (r *Registry) Held(ctx context.Context, db DB, id uuid.UUID, limit int) ([]HeldDelivery, error) {
	rows, err := db.Query(ctx, `SELECT s.id, s.source_id, ev.event_type, s.created_at FROM `+r.table("side_effects")+` s
		JOIN `+r.table("outbox_events")+` ev ON ev.id = s.source_id
		WHERE s.phase = 'live' AND s.state IN ('pending', 'fired') AND s.kind = $1 AND s.provider = $2
		ORDER BY s.created_at, s.id LIMIT $3`, endpointschema.KindPrefix+id.String(), Name, limit)
	if err != nil {
		return nil, fmt.Errorf("endpoint: held deliveries: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (HeldDelivery, error) {
		var h HeldDelivery
		return h, row.Scan(&h.EffectID, &h.EventID, &h.EventType, &h.CreatedAt)
	})
}

// TestEventType is the type of the events SendTest records.
const TestEventType = "outboxd.endpoint.test"

// SendTest records an event of TestEventType with one delivery to
// endpoint id, whatever types it subscribes to, through outboxd_enqueue
// (the dispatchers are woken), and returns the delivery's effect id:
// outboxd run sends it as any other, signed and retried.
func (r *Registry) SendTest(ctx context.Context, db DB, id uuid.UUID, by Change) (uuid.UUID, error) {
	if err := checkChange(by, false); err != nil {
		return uuid.Nil, err
	}
	var effect uuid.UUID
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		var found bool
		if err := tx.QueryRow(ctx, `SELECT true FROM `+r.table("outboxd_endpoints")+` WHERE id = $1`, id).Scan(&found); errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		} else if err != nil {
			return fmt.Errorf("endpoint: test: %w", err)
		}
		ev, _ := json.Marshal(map[string]any{"id": uuid.Must(uuid.NewV7()), "type": TestEventType, "aggregate_type": "endpoint", "aggregate_id": id,
			"payload": map[string]any{"test": true, "endpoint_id": id, "sent_by": by.Actor}})
		effects, _ := json.Marshal([]map[string]any{{"kind": endpointschema.KindPrefix + id.String(), "provider": Name,
			"payload": endpointschema.Payload{EndpointID: id}}})
		if err := tx.QueryRow(ctx, `SELECT effect_id FROM `+r.table("outboxd_enqueue")+`($1, $2, true)`, ev, effects).Scan(&effect); err != nil {
			return fmt.Errorf("endpoint: test: %w", err)
		}
		return r.audit(ctx, tx, id, "test", by, map[string]any{"effect_id": effect})
	})
	return effect, err
}

// CanSeal reports whether the registry has the key that seals secrets
// (and so can create endpoints and rotate).
func (r *Registry) CanSeal() bool { return r.key != nil }
