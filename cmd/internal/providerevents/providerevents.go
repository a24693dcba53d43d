// Package providerevents receives the providers' signed events (Stripe
// webhooks, SendGrid's Event Webhook), deduplicates them in the inbox, and
// applies each to the effect whose key it carries: an effect in doubt that
// the provider reports as done is confirmed, a mail's delivery status is
// recorded, and disagreements are recorded as drift. `outboxd run` serves
// it on --events-addr.
package providerevents

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/inbox"
	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/sendgrid"
	"github.com/outboxd/outboxd/providers/stripe"
	"github.com/outboxd/outboxd/sideeffects"
)

// Inbox sources of the provider events.
const (
	SourceStripe   = "stripe-events"
	SourceSendGrid = "sendgrid-events"
)

// Observer is told what each event did, after its delivery committed, as
// an outboxtype.ProviderEventApplied observation (dispatchmetrics counts
// them).
type Observer = outboxtype.Observer

// Config configures the handler; an empty secret leaves that provider's
// endpoint off.
type Config struct {
	Schema string
	// StripeSecret is the Stripe webhook signing secret (whsec_…).
	StripeSecret string
	// StripeTolerance bounds the age of a Stripe signature (default 5m).
	StripeTolerance time.Duration
	// SendGridPublicKey is the Event Webhook verification key (base64).
	SendGridPublicKey string
	// Retention is how long event ids are remembered (default
	// inbox.DefaultRetention, 7 days; never below the sender's retry window).
	Retention time.Duration
	Observer  Observer
	Logger    *slog.Logger
}

// Paths of the endpoints, under wherever the handler is mounted.
const (
	StripePath   = "/events/stripe"
	SendGridPath = "/events/sendgrid"
)

// New returns a handler serving POST /events/stripe and POST
// /events/sendgrid for the providers configured.
func New(pool *pgxpool.Pool, cfg Config) (http.Handler, error) {
	return NewFleet([]Shard{{Pool: pool, Schema: cfg.Schema, Observer: cfg.Observer}}, cfg)
}

// Shard is one database of an application's shards, all of whose
// provider events arrive at one address (one Stripe or SendGrid account
// for every shard).
type Shard struct {
	Name   string
	Pool   *pgxpool.Pool
	Schema string
	// Observer is told what each event applied in this shard did (its
	// metrics, labelled with the shard).
	Observer Observer
}

// shardEvents is a shard's inbox and operator.
type shardEvents struct {
	Shard
	ib *inbox.Inbox
	op *sideeffects.Operator
}

// NewFleet is New for several shards (cfg.Schema and cfg.Observer are
// the shards' own): each
// event is claimed in the inbox of, and applied to, the shard whose
// effect carries its key, in one transaction there, so that a
// redelivery is a duplicate wherever its event went; an event whose key
// no shard holds goes to the first shard, whose drift records it. With
// one shard every event of a delivery commits in one transaction, as New
// always did.
func NewFleet(shards []Shard, cfg Config) (http.Handler, error) {
	if cfg.StripeSecret == "" && cfg.SendGridPublicKey == "" {
		return nil, errors.New("provider events: configure a Stripe signing secret or a SendGrid verification key")
	}
	if len(shards) == 0 {
		return nil, errors.New("provider events: no database")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	var retention map[string]time.Duration
	if cfg.Retention > 0 {
		retention = map[string]time.Duration{SourceStripe: cfg.Retention, SourceSendGrid: cfg.Retention}
	}
	fleet := make([]shardEvents, len(shards))
	for i, s := range shards {
		ib, err := inbox.New(s.Pool, inbox.Config{Schema: s.Schema, Retention: retention, Logger: cfg.Logger})
		if err != nil {
			return nil, err
		}
		op, err := sideeffects.NewOperator(s.Pool, sideeffects.OperatorConfig{Schema: s.Schema})
		if err != nil {
			return nil, err
		}
		fleet[i] = shardEvents{s, ib, op}
	}
	mux := http.NewServeMux()
	add := func(path, source string, v inbox.Verifier, parse func([]byte) (providers.EventReport, error)) error {
		apply := func(s shardEvents, ev providers.EventReport) inbox.Func {
			return func(ctx context.Context, tx pgx.Tx, _ inbox.Message) error {
				res, err := s.op.ApplyProviderEvent(ctx, tx, ev)
				if err != nil {
					return err
				}
				if done, ok := ctx.Value(appliedKey{}).(*[]applied); ok {
					*done = append(*done, applied{ev, res, s.Observer})
				}
				return nil
			}
		}
		var h http.Handler
		var err error
		if len(fleet) == 1 {
			h, err = fleet[0].ib.Handler(source, v, func(ctx context.Context, tx pgx.Tx, m inbox.Message) error {
				ev, err := parse(m.Body)
				if err != nil {
					return err
				}
				return apply(fleet[0], ev)(ctx, tx, m)
			})
		} else {
			h, err = fleet[0].ib.RoutedHandler(source, v, func(ctx context.Context, m inbox.Message) (*inbox.Inbox, inbox.Func, error) {
				ev, err := parse(m.Body)
				if err != nil {
					return nil, nil, err
				}
				owner, err := ownerOf(ctx, fleet, ev.Key)
				if err != nil {
					return nil, nil, err
				}
				return owner.ib, apply(owner, ev), nil
			})
		}
		if err != nil {
			return err
		}
		mux.Handle("POST "+path, observed(h, cfg))
		return nil
	}
	if cfg.StripeSecret != "" {
		v, err := stripe.EventVerifier(cfg.StripeSecret, cfg.StripeTolerance)
		if err != nil {
			return nil, err
		}
		if err := add(StripePath, SourceStripe, v, stripe.ParseEvent); err != nil {
			return nil, err
		}
	}
	if cfg.SendGridPublicKey != "" {
		v, err := sendgrid.EventVerifier(cfg.SendGridPublicKey)
		if err != nil {
			return nil, err
		}
		if err := add(SendGridPath, SourceSendGrid, v, sendgrid.ParseEvent); err != nil {
			return nil, err
		}
	}
	return mux, nil
}

// ownerOf is the shard with the effect whose idempotency key is key, or
// the first shard when none has one (or the event carries no key).
func ownerOf(ctx context.Context, fleet []shardEvents, key string) (shardEvents, error) {
	if key == "" {
		return fleet[0], nil
	}
	for _, s := range fleet {
		_, err := s.op.GetByKey(ctx, key)
		if err == nil {
			return s, nil
		}
		if !errors.Is(err, sideeffects.ErrNotFound) {
			return shardEvents{}, fmt.Errorf("shard %s: %w", s.Name, err)
		}
	}
	return fleet[0], nil
}

type appliedKey struct{}

type applied struct {
	ev  providers.EventReport
	res outboxtype.EventResult
	// obs is the observer of the shard it was applied in.
	obs Observer
}

// observed tells the observer and the log what each event did, once its
// delivery committed (a 2xx).
func observed(h http.Handler, cfg Config) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var done []applied
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		ctx := sideeffects.WithDriftLimit(context.WithValue(r.Context(), appliedKey{}, &done), MaxDriftPerDelivery)
		h.ServeHTTP(sw, r.WithContext(ctx))
		if sw.status >= 300 {
			return
		}
		logged, unlogged, unrecorded := 0, 0, 0
		for _, a := range done {
			unrecorded += a.res.DriftNotRecorded
			if a.obs != nil {
				a.obs.Observe(outboxtype.ProviderEventApplied{Event: a.ev, Result: a.res})
			}
			if a.res.Confirmed {
				cfg.Logger.Info("effect confirmed by provider event", "effect_id", a.res.Effect.ID, "kind", a.res.Effect.Kind,
					"event_id", a.ev.EventID, "event_type", a.ev.Type, "object", a.ev.ObjectID)
			}
			for _, reason := range a.res.Drift {
				if logged == MaxDriftLogLines {
					unlogged++
					continue
				}
				logged++
				attrs := []any{"reason", reason, "provider", a.ev.Provider, "event_id", a.ev.EventID, "event_type", a.ev.Type, "key", a.ev.Key}
				if a.res.Effect != nil {
					attrs = append(attrs, "effect_id", a.res.Effect.ID, "state", a.res.Effect.State)
				}
				cfg.Logger.Warn("drift between outboxd and a provider: see outboxctl drift", attrs...)
			}
		}
		if unlogged > 0 || unrecorded > 0 {
			cfg.Logger.Warn("more drift in this delivery than is logged or recorded one by one: see outboxctl drift and the provider's dashboard",
				"not_logged", unlogged, "not_recorded", unrecorded, "recorded_at_most", MaxDriftPerDelivery)
		}
	})
}

// What one delivery (one signed request, up to thousands of events) may
// record as drift rows and log as warning lines; the rest is counted in one
// summary line (and in outboxd_drift_total).
const (
	MaxDriftPerDelivery = 100
	MaxDriftLogLines    = 20
)

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(s int) {
	w.status = s
	w.ResponseWriter.WriteHeader(s)
}

// String names the endpoints configured, for the start-up log.
func (cfg Config) String() string {
	var s string
	if cfg.StripeSecret != "" {
		s += "POST " + StripePath + " "
	}
	if cfg.SendGridPublicKey != "" {
		s += "POST " + SendGridPath
	}
	return fmt.Sprint(s)
}
