package outbox

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
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
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/outboxd/outboxd/internal/engine"
	"github.com/outboxd/outboxd/internal/store"
	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/pgschema"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/bundled"
)

// Limits on what one Enqueue accepts.
const (
	// DefaultMaxPayloadBytes bounds each event and effect payload.
	DefaultMaxPayloadBytes = 256 << 10
	// MaxKindLength bounds an effect kind.
	MaxKindLength = 128
	// MaxEffects bounds the effects of one event.
	MaxEffects = 100
)

var kindPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]*$`)

// Config configures an Outbox. The zero value is usable: tables found via
// search_path, the built-in providers, 256 KiB payloads.
type Config struct {
	// Schema holds outboxd's and River's tables ("" uses search_path). It
	// must be the schema outboxd migrate and outboxd run use.
	Schema string
	// Providers validate effect payloads of your own providers, by name,
	// in addition to the built-in schemas (package providers/bundled); one
	// with a built-in name replaces that schema.
	Providers []providers.Validator
	// WebhookAllowedNetworks are non-public networks webhook effects may
	// point at (IP literals in them, and names such as localhost or
	// single-label hosts once any network is allowed), for receivers on
	// your own network. The dispatching outboxd must allow them too
	// (--webhook-allow-cidrs). Default: public addresses only.
	WebhookAllowedNetworks []netip.Prefix
	// MaxPayloadBytes bounds each payload. Default 256 KiB.
	MaxPayloadBytes int
	// River inserts the dispatch jobs under JobsInTransaction (and is
	// refused under JobsByDispatcher, which inserts none). Default: an
	// insert-only client for Schema that wakes dispatchers at most every
	// 1ms per queue. An application's own client may be passed instead;
	// its FetchCooldown then bounds how often inserts wake the dispatchers.
	River *river.Client[pgx.Tx]
	// Observer, when set, is told the result of every Enqueue call: new
	// (wrote to the transaction), duplicate (a replay, nothing written),
	// conflict or invalid. A call is reported when it returns, so "new"
	// includes calls whose transaction was later rolled back. Package
	// outboxmetrics counts them as outboxd_enqueue_total{result}.
	Observer Observer
	// Jobs says who inserts the River jobs. Default JobsByDispatcher.
	Jobs JobInsertion
	// Tracer, when set, traces each Enqueue call as a span ("outbox.enqueue",
	// a child of the span in its context) and stores that span's W3C
	// traceparent with a new event, so the dispatch of its effects, in
	// whichever outboxd and however much later, continues the same trace.
	// Package outbox/outboxtrace provides one for OpenTelemetry.
	Tracer outboxtype.Tracer
	// NotifyDispatchers, under JobsByDispatcher, also wakes the
	// dispatchers with a NOTIFY in the caller's transaction (at most every
	// millisecond per process). Off by default: Postgres takes a
	// database-wide lock at the commit of every transaction that issued
	// NOTIFY, which serialises concurrent committers, and the dispatchers
	// read the intake every millisecond while effects arrive and watch it
	// every 2ms when none do (10ms after a quiet minute). Turn it on when
	// effects are rare and the first one after a quiet minute must not
	// wait for that; WakeDispatchers does the same without the lock.
	NotifyDispatchers bool
}

// Observer is told the result of every Enqueue call, as an
// outboxtype.Enqueued observation (outboxmetrics counts them); it is the
// one Observer shape of outboxd.
type Observer = outboxtype.Observer

// The results an Observer is told.
const (
	ResultNew       = "new"
	ResultDuplicate = "duplicate"
	ResultConflict  = "conflict"
	ResultInvalid   = "invalid"
)

// JobInsertion says who inserts an effect's River job.
type JobInsertion int

const (
	// JobsByDispatcher, the default, writes one narrow row per effect to
	// outbox_intake in the caller's transaction, and no NOTIFY; the
	// dispatchers, which watch the intake, move the rows into River jobs,
	// one per batch of effects due together. The application's
	// transaction costs about half as much as with JobsInTransaction, its
	// commit takes no lock, and dispatch runs about 1.6× as fast; an
	// effect reaches a worker a few milliseconds later at low rates
	// (docs/enqueue.md).
	JobsByDispatcher JobInsertion = iota
	// JobsInTransaction inserts a River job per effect in the caller's
	// transaction with River's InsertManyTx, whose NOTIFY serialises
	// concurrent commits. Both modes commit everything needed with the
	// caller's transaction: a crash at any point loses nothing.
	JobsInTransaction
	// EffectsByDispatcher writes, in the caller's transaction, a new
	// event with its effects in its own row and one narrow row naming the
	// event, instead of a row per effect with its index entries; the
	// dispatchers write the effects' rows, each with the id, key and
	// creation time it would have had, and their jobs, when they take the
	// event. The application's transaction costs about what the simplest
	// outbox's does, and dispatch runs about a third slower than under
	// JobsByDispatcher (docs/storage.md). Until a dispatcher has taken the
	// event (milliseconds while one runs), its effects count as pending in
	// the metrics, outboxctl stats and the web view's overview, they are
	// an incident of their own in outboxctl stuck --by-cause, a lookup by
	// id or key says their event carries them, but outboxctl and the web
	// view do not list them and a query of side_effects does not find
	// them (outboxtest.RequireEnqueued does). A replay of the event and
	// Cancel write them out first, in the caller's transaction. Effects
	// with an ordering key or a tenant, and those added to an event that
	// exists, are written as under JobsByDispatcher. Run an outboxd that
	// knows it (migration 00040) before an application uses it.
	EffectsByDispatcher
)

// Outbox enqueues events and side effects. It is safe for concurrent use.
type Outbox struct {
	store      *store.Store
	enq        *engine.Enqueuer
	validators map[string]providers.Validator
	maxPayload int
	observer   Observer
	tracer     outboxtype.Tracer
}

// New builds an Outbox.
func New(cfg Config) (*Outbox, error) {
	if err := pgschema.Check(cfg.Schema); err != nil {
		return nil, fmt.Errorf("outbox: Config.Schema: %w", err)
	}
	builtin := bundled.Schemas(cfg.WebhookAllowedNetworks)
	// Providers add to the built-in schemas, or replace one of the same
	// name: leaving one out never makes it unknown.
	cfg.Providers = append(builtin, cfg.Providers...)
	if cfg.MaxPayloadBytes <= 0 {
		cfg.MaxPayloadBytes = DefaultMaxPayloadBytes
	}
	o := &Outbox{
		store:      store.NewStore(cfg.Schema),
		validators: make(map[string]providers.Validator, len(cfg.Providers)),
		maxPayload: cfg.MaxPayloadBytes,
	}
	if cfg.Jobs != JobsInTransaction && cfg.Jobs != JobsByDispatcher && cfg.Jobs != EffectsByDispatcher {
		return nil, fmt.Errorf("outbox: Config.Jobs: unknown value %d: use JobsByDispatcher, EffectsByDispatcher or JobsInTransaction", cfg.Jobs)
	}
	if cfg.River != nil && cfg.Jobs != JobsInTransaction {
		return nil, errors.New("outbox: Config.River inserts jobs only under Jobs: outbox.JobsInTransaction: set it, or leave River out (the default, JobsByDispatcher, inserts none)")
	}
	for _, v := range cfg.Providers {
		o.validators[v.Name()] = v
	}
	o.observer = cfg.Observer
	o.tracer = cfg.Tracer
	rc := cfg.River
	if rc == nil && cfg.Jobs == JobsInTransaction {
		// River notifies waiting workers of inserts at most once per
		// FetchCooldown per queue; 1ms keeps commit-to-fire latency low
		// (measured: p99 7.8ms at 200/s, 10ms with 5ms) at the cost of at
		// most 1,000 notifications a second per queue and application
		// process.
		var err error
		if rc, err = river.NewClient(riverpgxv5.New(nil), &river.Config{Schema: cfg.Schema, FetchCooldown: time.Millisecond}); err != nil {
			return nil, fmt.Errorf("outbox: river client: %w", err)
		}
	}
	o.enq = engine.NewEnqueuer(cfg.Schema, rc, cfg.Jobs == EffectsByDispatcher, cfg.NotifyDispatchers)
	return o, nil
}

// Execer runs a statement: a *pgxpool.Pool or a *pgx.Conn.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// WakeDispatchers tells the dispatchers that effects wait for them in the
// intake (JobsByDispatcher), with a NOTIFY in a statement of its own on db
// (the application's pool): call it after the transaction that enqueued
// them committed. The caller's commit takes no lock for it (a NOTIFY in
// the transaction, NotifyDispatchers, serialises concurrent commits), and
// the dispatchers give the effects their jobs at once instead of at their
// next look at the intake. At most every 50ms from this process: while
// effects come the dispatchers read the intake every millisecond anyway,
// and watch it every 2ms when idle: a wake-up matters to one that has been
// quiet for a minute (it then watches every 10ms).
// Under JobsInTransaction it does nothing. An error says only that the
// wake-up was lost: the effects are committed, and the dispatchers find
// them at their next look.
//
//	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { _, err := ob.Enqueue(ctx, tx, ev, effects...); return err })
//	if err == nil {
//		_ = ob.WakeDispatchers(ctx, pool)
//	}
func (o *Outbox) WakeDispatchers(ctx context.Context, db Execer) error {
	if err := o.enq.Wake(ctx, db); err != nil {
		return fmt.Errorf("outbox: %w", err)
	}
	return nil
}

// Event is a domain event: the cause of one or more side effects.
type Event struct {
	// ID identifies the event. Derive it with EventID from the command
	// being handled, so a retry produces the same id.
	ID uuid.UUID
	// AggregateType and AggregateID name the entity the event is about,
	// for example "order" and "ord_42". Optional.
	AggregateType string
	AggregateID   string
	// Type is the event type, for example "order.paid". Required.
	Type string
	// Payload is a JSON object; nil is stored as {}.
	Payload json.RawMessage
	// OrderingKey, when set, is the ordering key of each of its effects
	// that names none (see Effect.OrderingKey). It is not stored with the
	// event.
	OrderingKey string
	// Tenant, when set, is the tenant of each of its effects that names
	// none (see Effect.Tenant).
	Tenant string
}

// Effect is one side effect an event implies.
type Effect struct {
	// Kind names the effect, unique within the event, for example
	// "webhook.order_paid". Letters, digits and _ . : - only, at most 128.
	Kind string
	// Provider is the name of the provider that performs it ("webhook").
	Provider string
	// Payload is a JSON object in the provider's documented format.
	Payload json.RawMessage
	// NotBefore, when set, is the earliest time the dispatcher fires the
	// effect ("remind in 24 h unless paid"); until then a later
	// transaction can take it back with Outbox.Cancel. Zero: at once. The
	// provider's key window starts at its first request, not at enqueue.
	NotBefore time.Time
	// OrderingKey, when set, orders the effect after every earlier effect
	// with the same key (for example "subscription:sub_42"): it fires only
	// once each of them has ended (confirmed, cancelled, released by an
	// operator, or failed with OnFailure SkipFailed), in the order their
	// transactions committed, and in this call's order within one. Many
	// keys dispatch in parallel. The enqueueing transaction holds a lock on
	// the key until it commits: two transactions on one key wait for each
	// other. At most 256 bytes. See docs/ordering.md.
	OrderingKey string
	// OnFailure says what this effect's failure does to the effects after
	// it on its ordering key: BlockKey (the default) holds them until an
	// operator redrives, cancels, resolves or releases it; SkipFailed lets
	// them go on.
	OnFailure FailurePolicy
	// Tenant, when set, is who the effect is for (a customer, a merchant
	// account): outboxd gives the effects of each tenant their turn, so
	// that one tenant's backlog does not hold back another's new effects
	// (docs/limits.md#fair-shares-between-tenants). An effect with an
	// ordering key keeps its key's order instead. At most 128 letters,
	// digits and . _ : @ -. A replay of the effect with another tenant is
	// a duplicate: the tenant is how it is scheduled, not what it does.
	Tenant string

	// err is why EffectOf could not encode its payload; Enqueue reports it.
	err error
	// subscribers marks ToSubscribers' effect.
	subscribers bool
}

// ToSubscribers is the effect that delivers the event to every endpoint
// subscribed to its type (docs/endpoints.md): in the same transaction it
// becomes one effect per enabled endpoint of the effect's tenant (or the
// event's; none: the endpoints of no tenant) whose event types match,
// kind "endpoint:<endpoint id>", so each endpoint has its own key,
// sha256(event id + ":endpoint:" + endpoint id), and its own retries. The
// Result lists those effects in its place. A replay of the event reaches
// the endpoints the first call reached and no other: an endpoint created
// since does not receive the older event.
//
// Set NotBefore, OrderingKey, OnFailure or Tenant on it as on any effect;
// an ordering key orders each endpoint's deliveries apart
// ("<key>@<endpoint id>"), so one endpoint's failure holds back only its
// own. At most one per call.
//
//	o.Enqueue(ctx, tx, ev, outbox.ToSubscribers())
func ToSubscribers() Effect { return Effect{subscribers: true} }

// FailurePolicy is what an effect's failure does to the effects after it on
// its ordering key.
type FailurePolicy int

const (
	// BlockKey holds the effects after a failed one until an operator
	// acts on it: the safe default when a later effect depends on an
	// earlier one (a refund on its capture).
	BlockKey FailurePolicy = iota
	// SkipFailed lets the effects after a failed one go on, for effects
	// whose order matters but whose loss does not stop the rest (a
	// partner's notifications).
	SkipFailed
)

// EffectOf is the effect of kind that a typed payload describes: its
// provider and its JSON, from a value the compiler checks (a
// stripeschema.RefundCreate, a sendgridschema.Payload, a webhook.Payload,
// or a custom provider's own providers.Payload). Enqueue validates it as it
// validates raw JSON, and reports an encoding error as the effect's.
//
//	outbox.EffectOf("stripe.refund", stripeschema.RefundCreate{PaymentIntent: "pi_123", Amount: outbox.Ptr[int64](500)})
func EffectOf(kind string, p providers.Payload) Effect {
	e := Effect{Kind: kind}
	if p == nil {
		e.err = errors.New("nil typed payload: pass a provider's payload value")
		return e
	}
	e.Provider = p.ProviderName()
	e.Payload, e.err = p.EffectPayload()
	return e
}

// Ptr returns a pointer to v, for the optional fields of typed payloads
// (amounts, flags) where zero and unset differ.
func Ptr[T any](v T) *T { return &v }

// Result reports what Enqueue did.
type Result struct {
	EventID uuid.UUID
	// EventExisted is true when the event was stored already with the same
	// content. New effects may still have been added to it: read each
	// effect's Duplicate, or Replay for the whole call.
	EventExisted bool
	Effects      []EffectResult
}

// Replay is true when the call wrote nothing: the event and every effect
// existed already with the same content (no new River job either).
func (r *Result) Replay() bool {
	if !r.EventExisted {
		return false
	}
	for _, e := range r.Effects {
		if !e.Duplicate {
			return false
		}
	}
	return true
}

// EffectResult reports one effect.
type EffectResult struct {
	// ID is the effect's row id: the first 16 bytes of Key as a version 8
	// UUID, or, for an effect recorded before outboxd derived ids from
	// keys (migration 00012), the id it was given then.
	ID   uuid.UUID
	Kind string
	// Key is the idempotency key every attempt of this effect carries.
	Key string
	// Duplicate is true when the effect existed already with the same
	// provider and payload; no second job was inserted for it.
	Duplicate bool
}

// Enqueue records ev and its effects, and the River jobs that will dispatch
// them, through tx. Nothing is visible to workers until tx commits.
//
// Invalid input returns a *ValidationError before anything is written. A
// replay of the same content returns a Result with Duplicate set. Content
// that differs from what is stored under the same event id, or the same
// event and kind, returns a *ConflictError (errors.Is ErrConflict), with
// nothing of this call written. Any other error comes from the database;
// roll tx back.
//
// Two transactions enqueueing the same event at once are serialised by
// Postgres: the second waits for the first and then reports duplicate or
// conflict. Under REPEATABLE READ or SERIALIZABLE the second fails with a
// serialization error instead; retrying its transaction then reports
// duplicate.
func (o *Outbox) Enqueue(ctx context.Context, tx pgx.Tx, ev Event, effects ...Effect) (*Result, error) {
	var span outboxtype.Span
	traceparent := ""
	if o.tracer != nil {
		ctx, span = o.tracer.Start(ctx, outboxtype.SpanStart{Name: "outbox.enqueue", Attrs: []outboxtype.Attr{
			{Key: "outboxd.event_type", Value: ev.Type},
			{Key: "outboxd.effects", Value: len(effects)}}})
		traceparent = span.Traceparent()
	}
	res, err := o.enqueue(ctx, tx, ev, effects, traceparent)
	if o.observer == nil && span == nil {
		return res, err
	}
	var result string
	switch {
	case errors.Is(err, ErrInvalid):
		result = ResultInvalid
	case errors.Is(err, ErrConflict):
		result = ResultConflict
	case err != nil:
	case res.Replay():
		result = ResultDuplicate
	default:
		result = ResultNew
	}
	if o.observer != nil && result != "" {
		o.observer.Observe(outboxtype.Enqueued{Result: result})
	}
	if span != nil {
		span.SetAttrs(outboxtype.Attr{Key: "outboxd.result", Value: cmp.Or(result, "error")})
		span.End(err)
	}
	return res, err
}

func (o *Outbox) enqueue(ctx context.Context, tx pgx.Tx, ev Event, effects []Effect, traceparent string) (*Result, error) {
	newEvent, newEffects, err := o.validate(tx, ev, effects)
	if err != nil {
		return nil, err
	}
	newEvent.Traceparent = traceparent
	done, err := o.enq.Enqueue(ctx, tx, newEvent, newEffects)
	if conflict, ok := errors.AsType[*engine.EnqueueConflict](err); ok {
		return nil, &ConflictError{EventID: ev.ID, Kind: conflict.Kind, IDHeld: conflict.IDHeld}
	}
	if err != nil {
		return nil, fmt.Errorf("outbox: %w", err)
	}
	res := &Result{EventID: ev.ID, EventExisted: done.EventExisted, Effects: make([]EffectResult, len(done.Effects))}
	for i, e := range done.Effects {
		res.Effects[i] = EffectResult(e)
	}
	return res, nil
}

// validate checks everything it can before the first write.
func (o *Outbox) validate(tx pgx.Tx, ev Event, effects []Effect) (store.NewEvent, []store.NewEffect, error) {
	invalid := func(field, problem string, args ...any) error {
		return &ValidationError{Field: field, Problem: fmt.Sprintf(problem, args...)}
	}
	var ne store.NewEvent
	if tx == nil {
		return ne, nil, invalid("tx", "nil: pass the application's open pgx.Tx")
	}
	if conn := tx.Conn(); conn != nil && conn.PgConn().TxStatus() == 'E' {
		return ne, nil, invalid("tx", "aborted by an earlier error in it: roll it back and retry the whole transaction")
	}
	if ev.ID == uuid.Nil {
		return ne, nil, invalid("event.id", "required: derive one with outbox.EventID(scope, parts...)")
	}
	for _, f := range []struct{ field, v string }{
		{"event.type", ev.Type}, {"event.aggregate_type", ev.AggregateType}, {"event.aggregate_id", ev.AggregateID},
	} {
		if !utf8.ValidString(f.v) {
			return ne, nil, invalid(f.field, "not valid UTF-8: Postgres text holds UTF-8 only")
		}
		if strings.ContainsRune(f.v, 0) {
			return ne, nil, invalid(f.field, "contains a NUL byte, which Postgres text cannot store")
		}
		if len(f.v) > 512 {
			return ne, nil, invalid(f.field, "%d bytes, over the limit of 512", len(f.v))
		}
	}
	if ev.Type == "" {
		return ne, nil, invalid("event.type", "required, for example \"order.paid\"")
	}
	if strings.HasPrefix(ev.Type, "outboxd.") {
		// outboxd's own operational events (docs/endpoints.md) reach the
		// endpoints subscribed to outboxd.* as outboxd's word.
		return ne, nil, invalid("event.type", "%s: outboxd.* types are outboxd's own operational events; name yours without the outboxd. prefix", ev.Type)
	}
	payload := ev.Payload
	if payload == nil {
		payload = json.RawMessage(`{}`)
	}
	if err := o.checkPayload(payload); err != nil {
		return ne, nil, invalid("event.payload", "%s", err)
	}
	ne = store.NewEvent{ID: ev.ID, AggregateType: ev.AggregateType, AggregateID: ev.AggregateID, Type: ev.Type, Payload: payload}

	if len(effects) > MaxEffects {
		return ne, nil, invalid("effects", "%d effects, over the limit of %d per event", len(effects), MaxEffects)
	}
	out := make([]store.NewEffect, len(effects))
	seen := make(map[string]int, len(effects))
	subscribers := -1
	for i, e := range effects {
		field := fmt.Sprintf("effects[%d]", i)
		if e.subscribers {
			if subscribers >= 0 {
				return ne, nil, invalid(field, "a second outbox.ToSubscribers() (effects[%d] is one): an event reaches each endpoint once", subscribers)
			}
			subscribers = i
			if e.Kind != "" || e.Provider != "" || e.Payload != nil {
				return ne, nil, invalid(field, "outbox.ToSubscribers() takes no kind, provider or payload: each endpoint's effect is made from the event")
			}
			if err := o.checkCommon(ev, e, field, &out[i]); err != nil {
				return ne, nil, err
			}
			out[i].Subscribers = true
			if len(out[i].OrderingKey) > MaxOrderingKeyLength-subscriberKeySuffix {
				return ne, nil, invalid(field+".ordering_key", "%d bytes, over the limit of %d for outbox.ToSubscribers() (each endpoint's key adds @ and its id)",
					len(out[i].OrderingKey), MaxOrderingKeyLength-subscriberKeySuffix)
			}
			continue
		}
		switch {
		case e.Kind == "":
			return ne, nil, invalid(field+".kind", "required, for example \"webhook.order_paid\"")
		case len(e.Kind) > MaxKindLength:
			return ne, nil, invalid(field+".kind", "%d characters, over the limit of %d", len(e.Kind), MaxKindLength)
		case !kindPattern.MatchString(e.Kind):
			return ne, nil, invalid(field+".kind", "%q: use letters, digits and _ . : - only, starting with a letter or digit", e.Kind)
		}
		if j, dup := seen[e.Kind]; dup {
			return ne, nil, invalid(field+".kind", "%q repeats effects[%d]: each kind at most once per event", e.Kind, j)
		}
		seen[e.Kind] = i
		if e.err != nil {
			return ne, nil, invalid(field+".payload", "%s", e.err)
		}
		v, ok := o.validators[e.Provider]
		if !ok {
			return ne, nil, invalid(field+".provider", "unknown provider %q: use one of %s", e.Provider, o.providerNames())
		}
		if err := o.checkPayload(e.Payload); err != nil {
			return ne, nil, invalid(field+".payload", "%s", err)
		}
		if err := v.ValidatePayload(e.Kind, e.Payload); err != nil {
			return ne, nil, invalid(field+".payload", "%s", err)
		}
		out[i] = store.NewEffect{Kind: e.Kind, Provider: e.Provider, Payload: e.Payload}
		if err := o.checkCommon(ev, e, field, &out[i]); err != nil {
			return ne, nil, err
		}
	}
	return ne, out, nil
}

// subscriberKeySuffix is what an endpoint's ordering key adds to its
// subscribers effect's: "@" and the endpoint's id.
const subscriberKeySuffix = 1 + 36

// checkCommon checks and sets on out what every effect may carry besides
// its content: ordering key, failure policy, tenant, not-before.
func (o *Outbox) checkCommon(ev Event, e Effect, field string, out *store.NewEffect) error {
	invalid := func(field, problem string, args ...any) error {
		return &ValidationError{Field: field, Problem: fmt.Sprintf(problem, args...)}
	}
	out.OrderingKey, out.SkipFailed = cmp.Or(e.OrderingKey, ev.OrderingKey), e.OnFailure == SkipFailed
	if err := checkOrderingKey(out.OrderingKey); err != nil {
		f := field + ".ordering_key"
		if e.OrderingKey == "" {
			f = "event.ordering_key"
		}
		return invalid(f, "%s", err)
	}
	out.Tenant = cmp.Or(e.Tenant, ev.Tenant)
	if t := out.Tenant; t != "" && !tenantPattern.MatchString(t) {
		f := field + ".tenant"
		if e.Tenant == "" {
			f = "event.tenant"
		}
		return invalid(f, "%q: a tenant is at most 128 letters, digits and . _ : @ -", t)
	}
	if e.OnFailure != BlockKey && e.OnFailure != SkipFailed {
		return invalid(field+".on_failure", "unknown policy %d: use outbox.BlockKey or outbox.SkipFailed", e.OnFailure)
	}
	if !e.NotBefore.IsZero() {
		nb := e.NotBefore
		out.NotBefore = &nb
	}
	return nil
}

// tenantPattern is what a tenant may be (as outboxd_enqueue checks it).
var tenantPattern = regexp.MustCompile(`^[A-Za-z0-9._:@-]{1,128}$`)

// MaxOrderingKeyLength is the longest ordering key, in bytes.
const MaxOrderingKeyLength = 256

func checkOrderingKey(k string) error {
	switch {
	case k == "":
		return nil
	case len(k) > MaxOrderingKeyLength:
		return fmt.Errorf("%d bytes, over the limit of %d", len(k), MaxOrderingKeyLength)
	case !utf8.ValidString(k):
		return errors.New("not valid UTF-8: Postgres text holds UTF-8 only")
	case strings.ContainsRune(k, 0):
		return errors.New("contains a NUL byte, which Postgres text cannot store")
	}
	return nil
}

func (o *Outbox) checkPayload(p json.RawMessage) error {
	if len(p) > o.maxPayload {
		return fmt.Errorf("%d bytes, over the limit of %d", len(p), o.maxPayload)
	}
	trimmed := bytes.TrimSpace(p)
	if len(trimmed) == 0 {
		return errors.New("required: a JSON object")
	}
	if !json.Valid(trimmed) {
		return errors.New("not valid JSON")
	}
	if !utf8.Valid(trimmed) {
		return errors.New("not valid UTF-8")
	}
	if trimmed[0] != '{' {
		return errors.New("must be a JSON object, not an array, string, number or null")
	}
	return checkEscapes(trimmed)
}

// checkEscapes rejects what valid JSON may hold but Postgres jsonb cannot
// store: a \u0000 escape, and a \uD800-\uDFFF escape that is not one
// half of a surrogate pair. It reads escapes as JSON does, so an escaped
// backslash followed by "u0000" is text, not NUL. raw must be valid JSON.
func checkEscapes(raw []byte) error {
	inString := false
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if !inString {
			inString = c == '"'
			continue
		}
		switch c {
		case '"':
			inString = false
		case '\\':
			i++
			if raw[i] != 'u' {
				continue
			}
			r := hex4(raw[i+1 : i+5])
			i += 4
			switch {
			case r == 0:
				return errors.New(`contains \u0000, which Postgres jsonb cannot store`)
			case r >= 0xD800 && r <= 0xDBFF:
				if i+6 < len(raw) && raw[i+1] == '\\' && raw[i+2] == 'u' {
					if lo := hex4(raw[i+3 : i+7]); lo >= 0xDC00 && lo <= 0xDFFF {
						i += 6
						continue
					}
				}
				return fmt.Errorf(`contains \u%04x, half of a surrogate pair without the other half, which Postgres jsonb cannot store`, r)
			case r >= 0xDC00 && r <= 0xDFFF:
				return fmt.Errorf(`contains \u%04x, half of a surrogate pair without the other half, which Postgres jsonb cannot store`, r)
			}
		}
	}
	return nil
}

func hex4(b []byte) rune {
	var r rune
	for _, c := range b {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c-'a') + 10
		case c >= 'A' && c <= 'F':
			r |= rune(c-'A') + 10
		}
	}
	return r
}

func (o *Outbox) providerNames() string {
	names := make([]string, 0, len(o.validators))
	for n := range o.validators {
		names = append(names, fmt.Sprintf("%q", n))
	}
	if len(names) == 0 {
		return "(none configured)"
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}
