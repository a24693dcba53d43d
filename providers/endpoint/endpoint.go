// Package endpoint delivers events to registered endpoints: webhook
// destinations kept as data (outboxd_endpoints), each subscribed to event
// types and signing with secrets of its own, so that no receiver can sign
// what another receives.
//
// An application enqueues an event with a subscribers effect
// (outbox.ToSubscribers, or {"subscribers": true} in outboxd_enqueue); in
// the same transaction it becomes one effect per endpoint subscribed at
// that moment (package endpointschema). The Provider here sends each one
// as a Standard Webhooks request: the body is
//
//	{"type": "order.paid", "timestamp": "2026-11-27T10:00:00.123Z", "data": {…event payload…}}
//
// the webhook-id is the effect's key (one per event and endpoint), and the
// webhook-signature carries one signature by the endpoint's current secret
// and one by each rotated secret not yet expired. URL, headers and secrets
// are read when the request is made. A disabled endpoint's deliveries wait
// without spending attempts, as after a 429, until it is enabled.
//
// The Registry manages endpoints: create, edit, disable, enable, rotate,
// each with its audit row.
package endpoint

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"golang.org/x/sync/singleflight"

	"github.com/outboxd/outboxd/pgschema"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/endpoint/endpointschema"
	"github.com/outboxd/outboxd/providers/webhook"
)

// Name is the provider's name.
const Name = endpointschema.Name

// HeldRecheck is how often the deliveries of a disabled endpoint look
// whether it was enabled.
const HeldRecheck = time.Minute

// Config configures the endpoint provider.
type Config struct {
	// DB reads the endpoints (a pool).
	DB DB
	// Schema holds outboxd's tables ("" uses search_path).
	Schema string
	// Key opens the endpoints' sealed secrets. Required.
	Key *Key
	// Sender delivers the requests: pass the webhook provider's
	// (webhook.Provider.Sender) so that a destination has one cap and one
	// breaker whichever provider calls it. Nil: a Sender of its own, built
	// from Webhook.
	Sender *webhook.Sender
	// Webhook configures the Sender built when Sender is nil (timeouts,
	// allowed networks, per-host cap), and the key window (default 24h):
	// how long receivers are expected to remember a webhook-id.
	Webhook webhook.Config
	// DisableAfter disables an endpoint whose every delivery failed for
	// this long (no answer, or an error status other than 429), as Svix
	// does: its open deliveries then wait for an operator. Default
	// DefaultDisableAfter; negative: never.
	DisableAfter time.Duration
}

// DefaultDisableAfter is Config.DisableAfter's default.
const DefaultDisableAfter = 5 * 24 * time.Hour

// Provider delivers endpoint effects. It is safe for concurrent use.
type Provider struct {
	endpointschema.Schema
	db     DB
	schema string
	key    *Key
	sender *webhook.Sender
	// own is true when sender is the provider's own, not shared.
	own          bool
	g            providers.Guarantees
	disableAfter time.Duration

	// reads share one read of an endpoint between the requests that need
	// it at the same moment.
	reads singleflight.Group

	mu    sync.Mutex
	hosts map[uuid.UUID]cachedHost
	// inFlight counts each endpoint's requests in flight in this process,
	// for its MaxInFlight.
	inFlight map[uuid.UUID]int
}

type cachedHost struct {
	host        string
	maxInFlight int
	at          time.Time
}

// endpointWait is how long a delivery turned away by its endpoint's cap
// waits before it asks again (with jitter), without an attempt.
const endpointWait = time.Second

var _ providers.Provider = (*Provider)(nil)

// New checks cfg and builds a provider.
func New(cfg Config) (*Provider, error) {
	if cfg.DB == nil {
		return nil, errors.New("endpoint: Config.DB is required: the pool endpoints are read from")
	}
	if cfg.Key == nil {
		return nil, errors.New("endpoint: Config.Key is required: the key that seals endpoint secrets (OUTBOXD_ENDPOINT_KEY)")
	}
	if err := pgschema.Check(cfg.Schema); err != nil {
		return nil, fmt.Errorf("endpoint: Config.Schema: %w", err)
	}
	if cfg.DisableAfter == 0 {
		cfg.DisableAfter = DefaultDisableAfter
	}
	sender, own := cfg.Sender, cfg.Sender == nil
	if own {
		var err error
		if sender, err = webhook.NewSender(cfg.Webhook); err != nil {
			return nil, fmt.Errorf("endpoint: %w", err)
		}
	}
	return &Provider{db: cfg.DB, schema: cfg.Schema, key: cfg.Key, sender: sender, own: own, disableAfter: cfg.DisableAfter,
		g: cfg.Webhook.Guarantees(), hosts: map[uuid.UUID]cachedHost{}, inFlight: map[uuid.UUID]int{}}, nil
}

// Guarantees implements providers.Provider: a webhook's.
func (p *Provider) Guarantees() providers.Guarantees { return p.g }

// Timeout implements providers.Timed.
func (p *Provider) Timeout() time.Duration { return p.sender.Timeout() }

// PublishesEvents implements providers.EventPublisher: the body is the
// effect's event.
func (p *Provider) PublishesEvents() bool { return true }

// Limit implements providers.Limited: each endpoint is its own limit key,
// endpoint:<id> (outboxctl limits set endpoint:<id> 10), slowed by its
// 429s and paused while it is disabled.
func (p *Provider) Limit(payload json.RawMessage) providers.Limit {
	if payload == nil {
		return providers.Limit{}
	}
	pl, err := endpointschema.Parse("", payload)
	if err != nil {
		return providers.Limit{}
	}
	return providers.Limit{Key: LimitKey(pl.EndpointID)}
}

// LimitKey is the limit key of endpoint id.
func LimitKey(id uuid.UUID) string { return Name + ":" + id.String() }

// Admit implements providers.Gate: the endpoint's own cap on requests in
// flight (MaxInFlight), then the webhook per-host cap and breaker for the
// host its URL names. A delivery turned away waits about a second without
// an attempt.
func (p *Provider) Admit(ctx context.Context, payload json.RawMessage) (release func(sendErr error), wait time.Duration, ok bool) {
	pl, err := endpointschema.Parse("", payload)
	if err != nil {
		return func(error) {}, 0, true
	}
	id := pl.EndpointID
	c, ok := p.cached(id)
	if !ok {
		if ep, err := p.load(ctx, id); err == nil && ep != nil {
			c, _ = p.cached(id)
		}
	}
	// The endpoint's own cap first, then its host's.
	if c.maxInFlight > 0 {
		p.mu.Lock()
		if p.inFlight[id] >= c.maxInFlight {
			p.mu.Unlock()
			return nil, endpointWait + time.Duration(rand.Int64N(int64(endpointWait/2))), false
		}
		p.inFlight[id]++
		p.mu.Unlock()
	}
	done := func() {
		if c.maxInFlight > 0 {
			p.mu.Lock()
			if p.inFlight[id]--; p.inFlight[id] <= 0 {
				delete(p.inFlight, id)
			}
			p.mu.Unlock()
		}
	}
	hostRelease, wait, ok := p.sender.AdmitHost(ctx, c.host)
	if !ok {
		done()
		return nil, wait, false
	}
	return func(sendErr error) {
		hostRelease(sendErr)
		done()
	}, 0, true
}

// Host implements providers.Hoster: the endpoint's host as last read.
func (p *Provider) Host(payload json.RawMessage) string {
	pl, err := endpointschema.Parse("", payload)
	if err != nil {
		return ""
	}
	c, _ := p.cached(pl.EndpointID)
	return c.host
}

// hostTTL bounds how long Admit trusts what it read of an endpoint.
const hostTTL = 5 * time.Second

func (p *Provider) cached(id uuid.UUID) (cachedHost, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c, ok := p.hosts[id]
	return c, ok && time.Since(c.at) < hostTTL
}

// loaded is an endpoint as a delivery needs it.
type loaded struct {
	url      *url.URL
	host     string
	tenant   string
	headers  map[string]string
	disabled bool
	reason   string
	signers  []*standardwebhooks.Webhook
	// sensitive are its secrets and header values: a receiver that echoes
	// them in its answer must not have them stored or logged.
	sensitive []string
	cert      *tls.Certificate
	// failing and deliveredAt are what the row said of its last
	// deliveries, so that a success writes only when it changes them.
	failing     bool
	deliveredAt *time.Time
}

// load reads endpoint id as read; requests for one endpoint at the same
// moment share one read (started after each of them began, or just
// before: at most one statement's time older), so a busy endpoint costs a
// read per round of deliveries, not per delivery.
func (p *Provider) load(ctx context.Context, id uuid.UUID) (*loaded, error) {
	v, err, _ := p.reads.Do(id.String(), func() (any, error) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readTimeout)
		defer cancel()
		return p.read(rctx, id)
	})
	if err != nil {
		return nil, err
	}
	return v.(*loaded), nil
}

// readTimeout bounds a shared read of an endpoint.
const readTimeout = 10 * time.Second

// read reads endpoint id with its secrets still signing, current first;
// nil when it does not exist.
func (p *Provider) read(ctx context.Context, id uuid.UUID) (*loaded, error) {
	var rawURL, reason, certPEM, tenant string
	var headers, sealedKey []byte
	var disabled bool
	var maxInFlight int
	var failing bool
	var deliveredAt *time.Time
	var sealed [][]byte
	err := p.db.QueryRow(ctx, `SELECT e.url, coalesce(e.tenant, ''), e.headers, e.disabled_at IS NOT NULL, coalesce(e.disabled_reason, ''),
		coalesce(e.client_cert, ''), e.client_key_sealed, coalesce(e.max_in_flight, 0), e.failing_since IS NOT NULL, e.delivered_at,
		coalesce((SELECT array_agg(s.sealed ORDER BY s.expires_at DESC NULLS FIRST, s.id DESC) FROM `+pgschema.Table(p.schema, "outboxd_endpoint_secrets")+` s
			WHERE s.endpoint_id = e.id AND (s.expires_at IS NULL OR s.expires_at > now())), '{}')
		FROM `+pgschema.Table(p.schema, "outboxd_endpoints")+` e WHERE e.id = $1`, id).Scan(&rawURL, &tenant, &headers, &disabled, &reason, &certPEM, &sealedKey, &maxInFlight, &failing, &deliveredAt, &sealed)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read endpoint %s: %w", id, err)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("endpoint %s url: %w", id, err)
	}
	ep := &loaded{url: u, host: strings.ToLower(u.Host), tenant: tenant, disabled: disabled, reason: reason, failing: failing, deliveredAt: deliveredAt}
	if err := json.Unmarshal(headers, &ep.headers); err != nil {
		return nil, fmt.Errorf("endpoint %s headers: %w", id, err)
	}
	if disabled {
		// Nothing is sent: its secrets stay sealed.
		p.remember(id, ep.host, maxInFlight)
		return ep, nil
	}
	for i, s := range sealed {
		secret, err := p.key.open(id, s)
		if err != nil {
			return nil, &secretError{fmt.Errorf("endpoint %s secret %d: %w", id, i, err)}
		}
		w, err := standardwebhooks.NewWebhook(secret)
		if err != nil {
			return nil, &secretError{fmt.Errorf("endpoint %s secret %d: %w", id, i, err)}
		}
		ep.signers = append(ep.signers, w)
		ep.sensitive = append(ep.sensitive, secret)
	}
	for _, v := range ep.headers {
		// "Bearer <token>": the token may be echoed alone.
		ep.sensitive = append(ep.sensitive, v, v[strings.LastIndex(v, " ")+1:])
	}
	if certPEM != "" {
		keyPEM, err := p.key.openFor(id, purposeClientKey, sealedKey)
		if err != nil {
			return nil, &secretError{fmt.Errorf("endpoint %s client certificate's key: %w", id, err)}
		}
		pair, err := tls.X509KeyPair([]byte(certPEM), []byte(keyPEM))
		if err != nil {
			return nil, &secretError{fmt.Errorf("endpoint %s client certificate: %w", id, err)}
		}
		ep.cert = &pair
	}
	p.remember(id, ep.host, maxInFlight)
	return ep, nil
}

// remember keeps what Admit and Host need of endpoint id.
func (p *Provider) remember(id uuid.UUID, host string, maxInFlight int) {
	p.mu.Lock()
	p.hosts[id] = cachedHost{host: host, maxInFlight: maxInFlight, at: time.Now()}
	p.mu.Unlock()
}

// secretError is a sealed secret that does not open.
type secretError struct{ error }

func (e *secretError) Unwrap() error { return e.error }

// Body is what an endpoint receives: the event, in the shape the Standard
// Webhooks specification recommends, with the event's id (the same for
// every endpoint it reaches, where webhook-id is one per endpoint) and the
// tenant whose event it is.
type Body struct {
	Type      string          `json:"type"`
	Timestamp time.Time       `json:"timestamp"`
	EventID   string          `json:"event_id"`
	Tenant    string          `json:"tenant,omitempty"`
	Data      json.RawMessage `json:"data"`
}

// Send implements providers.Provider.
func (p *Provider) Send(ctx context.Context, req providers.Request) (providers.Result, error) {
	pl, err := endpointschema.Parse(req.Kind, req.Payload)
	if err != nil {
		return providers.Result{}, providers.Refused(err)
	}
	if req.Event == nil {
		return providers.Result{}, providers.Refused(errors.New("no event given: the dispatcher passes the effect's event to an endpoint delivery"))
	}
	ep, err := p.load(ctx, pl.EndpointID)
	switch {
	case errors.Is(err, errOtherKey):
		// Sealed under a key this process was not given (a replica started
		// with another OUTBOXD_ENDPOINT_KEY, or before the list that holds
		// it): the delivery is not this process's to fail. It waits,
		// spending no attempt, until a process with the key takes it.
		return providers.Result{}, providers.Held(fmt.Errorf("%w: its deliveries wait", err), HeldRecheck)
	case errors.As(err, new(*secretError)):
		// A secret that does not open with its own key (altered, or copied
		// from another endpoint) is the operator's to mend (a rotation):
		// nothing was sent, and retrying will not help until then.
		return providers.Result{}, providers.Refused(err)
	case err != nil:
		return providers.Result{}, providers.Retryable(err, 0)
	case ep == nil:
		return providers.Result{}, providers.Refused(fmt.Errorf("endpoint %s is not registered (removed?): nothing was sent", pl.EndpointID))
	case ep.tenant != req.Tenant:
		// An endpoint:<id> effect names its endpoint itself: one tenant's
		// event must not reach another tenant's receiver.
		return providers.Result{}, providers.Refused(fmt.Errorf("endpoint %s belongs to tenant %q and the effect to tenant %q: nothing was sent",
			pl.EndpointID, ep.tenant, req.Tenant))
	case ep.disabled:
		return providers.Result{}, providers.Held(fmt.Errorf("endpoint %s is disabled (%s): its deliveries wait, spending no attempt, until it is enabled", pl.EndpointID, ep.reason), HeldRecheck)
	case len(ep.signers) == 0:
		return providers.Result{}, providers.Refused(fmt.Errorf("endpoint %s has no signing secret: rotate it to give it one", pl.EndpointID))
	}
	body, err := json.Marshal(Body{Type: req.Event.Type, Timestamp: req.Event.OccurredAt.UTC(), EventID: req.Event.ID, Tenant: req.Tenant, Data: req.Event.Payload})
	if err != nil {
		return providers.Result{}, providers.Refused(fmt.Errorf("encode body: %w", err))
	}
	res, err := p.sender.Deliver(ctx, webhook.Delivery{URL: ep.url, Body: body, Headers: ep.headers, Key: req.Key, Signers: ep.signers, ClientCert: ep.cert})
	// Redacted here, at the source: last_error, the attempt history, the
	// logs, River's job errors and the operational events all read it.
	err = providers.Redact(err, ep.sensitive)
	if ctx.Err() == nil && !providers.IsThrottled(err) && !providers.IsRefused(err) {
		// The endpoint's own answer (or silence): a 429 says it is alive,
		// a refusal was outboxd's.
		// Best effort: a delivery made is not undone by a failure to
		// record it; a failed one says so beside its own error.
		if rerr := p.recordOutcome(context.WithoutCancel(ctx), pl.EndpointID, ep, err); rerr != nil && err != nil {
			err = fmt.Errorf("%w (and recording the endpoint's failure failed: %v)", err, rerr)
		}
	}
	return res, err
}

// recordOutcome keeps when endpoint id began failing, and disables it
// once every delivery failed for disableAfter, with an audit row by
// outboxd.
func (p *Provider) recordOutcome(ctx context.Context, id uuid.UUID, ep *loaded, sendErr error) error {
	endpoints := pgschema.Table(p.schema, "outboxd_endpoints")
	if sendErr == nil {
		// Written when it ends a failing spell, and otherwise at most about
		// once a minute: a busy endpoint's successes write nothing.
		if !ep.failing && ep.deliveredAt != nil && time.Since(*ep.deliveredAt) < time.Minute {
			return nil
		}
		_, err := p.db.Exec(ctx, `UPDATE `+endpoints+` SET failing_since = NULL, delivered_at = now()
			WHERE id = $1 AND (failing_since IS NOT NULL OR delivered_at IS NULL OR delivered_at < now() - interval '1 minute')`, id)
		return err
	}
	return pgx.BeginFunc(ctx, p.db, func(tx pgx.Tx) error {
		var since time.Time
		var disabled bool
		err := tx.QueryRow(ctx, `UPDATE `+endpoints+` SET failing_since = coalesce(failing_since, now())
			WHERE id = $1 RETURNING failing_since, disabled_at IS NOT NULL`, id).Scan(&since, &disabled)
		if errors.Is(err, pgx.ErrNoRows) || err == nil && (disabled || p.disableAfter < 0) {
			return nil
		}
		if err != nil {
			return err
		}
		if failing := time.Since(since); failing < p.disableAfter {
			if failing < p.disableAfter-disableWarning(p.disableAfter) {
				return nil
			}
			return p.warnDisabling(ctx, tx, id, sendErr)
		}
		reason := fmt.Sprintf("every delivery failed since %s (for %s; last: %s): disabled by outboxd",
			since.UTC().Format(time.RFC3339), p.disableAfter, providers.Summary(sendErr))
		if _, err := tx.Exec(ctx, `UPDATE `+endpoints+` SET disabled_at = now(), disabled_reason = $2, updated_at = now() WHERE id = $1`, id, reason); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO `+pgschema.Table(p.schema, "outboxd_endpoint_audit")+` (endpoint_id, action, actor, reason)
			VALUES ($1, 'disable', 'outboxd', $2)`, id, reason)
		return err
	})
}

// disableWarning is how long before outboxd disables a failing endpoint
// it raises outboxd.endpoint.disabling: an hour, or a quarter of
// disableAfter when that is shorter.
func disableWarning(disableAfter time.Duration) time.Duration {
	return min(time.Hour, disableAfter/4)
}

// sqlDisabling raises outboxd.endpoint.disabling for endpoint $1, which
// outboxd disables at failing_since + $2, once per failing spell (its id
// derived from the endpoint and the spell's start), saying what the
// disable will hold back: the deliveries to it not ended.
const sqlDisabling = `
SELECT %[1]s('outboxd.endpoint.disabling', 'endpoint', e.id::text,
	jsonb_build_object('endpoint_id', e.id, 'url', e.url, 'tenant', e.tenant, 'failing_since', e.failing_since,
		'disables_at', e.failing_since + $2::interval, 'last_error', $3::text,
		'open_deliveries', (SELECT count(*) FROM %[2]s s
			WHERE s.phase = 'live' AND s.provider = 'endpoint' AND s.payload->>'endpoint_id' = e.id::text)),
	md5('outboxd.endpoint.disabling:' || e.id || ':' || e.failing_since)::uuid)
FROM %[3]s e
WHERE e.id = $1 AND e.failing_since IS NOT NULL
	AND NOT EXISTS (SELECT 1 FROM %[4]s ev WHERE ev.id = md5('outboxd.endpoint.disabling:' || e.id || ':' || e.failing_since)::uuid)`

// warnDisabling raises outboxd.endpoint.disabling for endpoint id, in the
// transaction that recorded its failure: outboxd will disable it within
// disableWarning unless a delivery succeeds first.
func (p *Provider) warnDisabling(ctx context.Context, tx pgx.Tx, id uuid.UUID, sendErr error) error {
	q := fmt.Sprintf(sqlDisabling, pgschema.Table(p.schema, "outboxd_emit"), pgschema.Table(p.schema, "side_effects"),
		pgschema.Table(p.schema, "outboxd_endpoints"), pgschema.Table(p.schema, "outbox_events"))
	_, err := tx.Exec(ctx, q, id, p.disableAfter, providers.Summary(sendErr))
	return err
}

// Destinations implements providers.DestinationReporter, when the Sender
// is the provider's own (a shared one is reported by the webhook
// provider).
func (p *Provider) Destinations() []providers.DestinationState {
	if !p.own {
		return nil
	}
	return p.sender.Destinations()
}
