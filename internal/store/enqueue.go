package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/outboxtype"
)

// NewEvent is an outbox_events row to insert.
type NewEvent struct {
	ID            uuid.UUID
	AggregateType string
	AggregateID   string
	Type          string
	Payload       json.RawMessage
	// Traceparent is the W3C traceparent of the span that enqueued it
	// (empty: none); not part of its content.
	Traceparent string
}

func nullIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// EventTraceparent returns the traceparent stored with event id, or "".
func (s *Store) EventTraceparent(ctx context.Context, db DB, id uuid.UUID) (string, error) {
	var tp string
	if err := db.QueryRow(ctx, s.sql(sqlEventTraceparent), id).Scan(&tp); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("trace context of event %s: %w", id, err)
	}
	return tp, nil
}

// InsertEvent inserts ev. It reports inserted=false when a row with that id
// exists already, and then whether that row has identical columns and
// whether it still carried effects whose rows no dispatcher had written
// (WriteOutEvent writes them; an event that carries none never will again).
func (s *Store) InsertEvent(ctx context.Context, db DB, ev NewEvent) (inserted, same, carried bool, err error) {
	tag, err := db.Exec(ctx, s.sql(sqlInsertEvent), ev.ID, ev.AggregateType, ev.AggregateID, ev.Type, ev.Payload, nullIfEmpty(ev.Traceparent))
	if err != nil {
		return false, false, false, fmt.Errorf("insert event %s: %w", ev.ID, err)
	}
	if tag.RowsAffected() == 1 {
		return true, true, false, nil
	}
	if err := db.QueryRow(ctx, s.sql(sqlEventMatches), ev.ID, ev.AggregateType, ev.AggregateID, ev.Type, ev.Payload).Scan(&same, &carried); err != nil {
		return false, false, false, fmt.Errorf("compare event %s: %w", ev.ID, err)
	}
	return false, same, carried, nil
}

// NewEffect is a side_effects row to insert.
type NewEffect struct {
	// ID and Key are the effect's row id and idempotency key, derived from
	// its event and kind (EffectIDAndKey): by Enqueuer.Enqueue when left
	// empty.
	ID       uuid.UUID
	Key      string
	Kind     string
	Provider string
	Payload  json.RawMessage
	// NotBefore, when set, is the earliest time it may fire.
	NotBefore *time.Time
	// OrderingKey, when not empty, orders it after the earlier effects
	// of that key; SkipFailed lets those after it go on if it fails.
	OrderingKey string
	SkipFailed  bool
	// Tenant, when not empty, is the tenant it is enqueued for: without an
	// ordering key, it waits in its tenant's queue for a dispatcher to
	// give it a job (migration 00025), instead of getting one here.
	Tenant string
	// Subscribers marks the call's subscribers effect: it stands for one
	// effect per endpoint it reaches (outboxd_subscribers, migration
	// 00028), each with its NotBefore, SkipFailed and Tenant and an
	// ordering key of its own per endpoint; Kind, Provider and Payload
	// are unset.
	Subscribers bool
}

// Queued reports whether e gets its job from its tenant's queue.
func (e NewEffect) Queued() bool { return e.Tenant != "" && e.OrderingKey == "" }

// effectArrays are new effects as the column arrays the unnest-based
// statements take.
type effectArrays struct {
	ids       [][16]byte // uuidArray's
	kinds     []string
	providers []string
	payloads  []json.RawMessage
	notBefore []*time.Time
	okeys     []*string
	oskip     []bool
	tenants   []*string
}

func columnsOf(sourceID uuid.UUID, effects []NewEffect) effectArrays {
	c := effectArrays{
		ids:       make([][16]byte, len(effects)),
		kinds:     make([]string, len(effects)),
		providers: make([]string, len(effects)),
		payloads:  make([]json.RawMessage, len(effects)),
		notBefore: make([]*time.Time, len(effects)),
		okeys:     make([]*string, len(effects)),
		oskip:     make([]bool, len(effects)),
		tenants:   make([]*string, len(effects)),
	}
	for i, e := range effects {
		id := e.ID
		if id == uuid.Nil {
			id = EffectID(sourceID, e.Kind)
		}
		c.ids[i], c.kinds[i], c.providers[i], c.payloads[i], c.notBefore[i] = id, e.Kind, e.Provider, e.Payload, e.NotBefore
		if e.OrderingKey != "" {
			c.okeys[i], c.oskip[i] = &e.OrderingKey, e.SkipFailed
		}
		if e.Tenant != "" {
			c.tenants[i] = &e.Tenant
		}
	}
	return c
}

// InsertEffects inserts the effects of event sourceID that do not exist yet
// and returns the ids of those it inserted. With intake, each inserted
// effect is also queued in outbox_intake for a dispatcher to give it a job.
func (s *Store) InsertEffects(ctx context.Context, db DB, sourceID uuid.UUID, effects []NewEffect, intake bool) (map[uuid.UUID]bool, error) {
	c := columnsOf(sourceID, effects)
	sql := s.sql(sqlInsertEffects)
	if intake {
		sql = s.sql(sqlInsertEffectsIntake)
	}
	rows, err := db.Query(ctx, sql, sourceID, c.ids, c.kinds, c.providers, c.payloads, c.notBefore, c.okeys, c.oskip, c.tenants)
	if err != nil {
		return nil, fmt.Errorf("insert effects of event %s: %w", sourceID, err)
	}
	inserted := make(map[uuid.UUID]bool, len(effects))
	for rows.Next() {
		var id uuid.UUID
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, err
		}
		inserted[id] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("insert effects of event %s: %w", sourceID, err)
	}
	return inserted, nil
}

// InsertEventWithEffects inserts a new event and all its effects in one
// statement. When an event with that id exists already it inserts nothing
// and reports inserted=false; compare with InsertEvent and CompareEffects.
// With intake, each effect is also queued in outbox_intake.
// effects must not be empty.
func (s *Store) InsertEventWithEffects(ctx context.Context, db DB, ev NewEvent, effects []NewEffect, intake bool) (inserted bool, err error) {
	c := columnsOf(ev.ID, effects)
	sql := s.sql(sqlInsertEventWithEffects)
	if intake {
		sql = s.sql(sqlInsertEventWithEffectsIntake)
	}
	tag, err := db.Exec(ctx, sql, ev.ID, ev.AggregateType, ev.AggregateID, ev.Type, ev.Payload,
		c.ids, c.kinds, c.providers, c.payloads, c.notBefore, c.okeys, c.oskip, nullIfEmpty(ev.Traceparent), c.tenants)
	if err != nil {
		return false, fmt.Errorf("insert event %s: %w", ev.ID, err)
	}
	return tag.RowsAffected() == int64(len(effects)), nil
}

// carriedEffect is an effect as an event carries it until its row is
// written (outbox_events.effects, migration 00040).
type carriedEffect struct {
	Kind      string          `json:"kind"`
	Provider  string          `json:"provider"`
	Payload   json.RawMessage `json:"payload"`
	NotBefore *time.Time      `json:"not_before,omitempty"`
}

// Carriable says whether effects can ride in their event's row
// (InsertEventCarryingEffects): those with an ordering key or a tenant
// take their place in a chain or a tenant's queue when their rows are
// written, so they are written with the event.
func Carriable(effects []NewEffect) bool {
	for _, e := range effects {
		if e.OrderingKey != "" || e.Tenant != "" {
			return false
		}
	}
	return len(effects) > 0
}

// InsertEventCarryingEffects inserts a new event with its effects in its
// own row and the event's row in outbox_event_intake, for a dispatcher to
// write the effects' rows and their jobs (outbox.EffectsByDispatcher).
// When an event with that id exists already it inserts nothing and
// reports inserted=false, as InsertEventWithEffects. effects must be
// Carriable.
func (s *Store) InsertEventCarryingEffects(ctx context.Context, db DB, ev NewEvent, effects []NewEffect) (inserted bool, err error) {
	carried := make([]carriedEffect, len(effects))
	for i, e := range effects {
		carried[i] = carriedEffect{Kind: e.Kind, Provider: e.Provider, Payload: e.Payload, NotBefore: e.NotBefore}
	}
	list, err := json.Marshal(carried)
	if err != nil {
		return false, fmt.Errorf("insert event %s: %w", ev.ID, err)
	}
	tag, err := db.Exec(ctx, s.sql(sqlInsertEventCarryingEffects), ev.ID, ev.AggregateType, ev.AggregateID, ev.Type, ev.Payload,
		list, nullIfEmpty(ev.Traceparent))
	if err != nil {
		return false, fmt.Errorf("insert event %s: %w", ev.ID, err)
	}
	return tag.RowsAffected() == 1, nil
}

// WriteOutEvent writes, in tx, the rows of the effects event id still
// carries (none once a dispatcher has), each queued in the intake, and
// returns how many it wrote: a replay compares with them, a cancel
// finds them.
func (s *Store) WriteOutEvent(ctx context.Context, tx pgx.Tx, id uuid.UUID) (int, error) {
	var n int
	if err := tx.QueryRow(ctx, s.sql(sqlWriteOutEvent), id).Scan(&n); err != nil {
		return 0, fmt.Errorf("write out the effects of event %s: %w", id, err)
	}
	return n, nil
}

// ExistingEffect says whether an effect of an event exists and matches.
type ExistingEffect struct {
	Kind   string
	Exists bool
	// ID is the existing row's id: the derived one (EffectID), or, for a
	// row written before ids were derived from keys, its own.
	ID uuid.UUID
	// Same is true when the existing row has the same provider and payload.
	Same bool
}

// CompareEffects reports, in order, whether each effect of event sourceID
// already exists and whether it matches.
func (s *Store) CompareEffects(ctx context.Context, db DB, sourceID uuid.UUID, effects []NewEffect) ([]ExistingEffect, error) {
	c := columnsOf(sourceID, effects)
	rows, err := db.Query(ctx, s.sql(sqlCompareEffects), sourceID, c.kinds, c.providers, c.payloads, c.notBefore, c.okeys, c.oskip)
	if err != nil {
		return nil, fmt.Errorf("compare effects of event %s: %w", sourceID, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ExistingEffect, error) {
		var e ExistingEffect
		var id *uuid.UUID
		err := r.Scan(&e.Kind, &id, &e.Same)
		if id != nil {
			e.Exists, e.ID = true, *id
		}
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("compare effects of event %s: %w", sourceID, err)
	}
	return out, nil
}

// CancelUnfired cancels, in the caller's transaction, the effect of kind of
// event eventID if it has never fired, with an audit row naming actor and
// reason. It reports the state it found, whether it had fired, and whether
// it cancelled it now; ErrNotFound when no such effect exists.
func (s *Store) CancelUnfired(ctx context.Context, tx pgx.Tx, eventID uuid.UUID, kind, actor, reason string) (from outboxtype.State, fired, cancelled bool, err error) {
	if _, err := s.WriteOutEvent(ctx, tx, eventID); err != nil {
		return "", false, false, err
	}
	var id uuid.UUID
	if err := tx.QueryRow(ctx, s.sql(sqlCancelUnfired), eventID, kind).Scan(&id, &from, &fired, &cancelled); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return "", false, false, ErrNotFound
		}
		return "", false, false, fmt.Errorf("cancel effect %s of event %s: %w", kind, eventID, err)
	}
	if cancelled {
		if err := s.audit(ctx, tx, id, outboxtype.ActionCancel, actor, reason, from, outboxtype.StateCancelled, map[string]any{"before_first_fire": true}); err != nil {
			return from, fired, cancelled, err
		}
	}
	return from, fired, cancelled, nil
}

// LockOrderingKeys takes, in tx, the advisory locks that serialise
// enqueues on each of keys (see migrations 00016 and 00023), in one global
// order.
func (s *Store) LockOrderingKeys(ctx context.Context, tx pgx.Tx, keys []string) error {
	if _, err := tx.Exec(ctx, sqlLockOrderingKeys, keys, s.name); err != nil {
		return fmt.Errorf("lock ordering keys: %w", err)
	}
	return nil
}
