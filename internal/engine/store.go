package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/outboxd/outboxd/pgschema"
)

// DB is what Store needs from a connection: a pgx.Tx, *pgx.Conn or
// *pgxpool.Pool.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// ErrNotFound is returned when no effect has the given id or key.
var ErrNotFound = errors.New("side effect not found")

// Store runs outboxd's SQL against the tables of one schema.
type Store struct {
	schema *strings.Replacer
	// stmts caches each statement with the schema filled in, by its text.
	stmts sync.Map
}

// NewStore returns a Store for the tables in schema ("" uses search_path).
func NewStore(schema string) *Store {
	return &Store{schema: strings.NewReplacer("/*schema*/", pgschema.Table(schema, ""))}
}

// sql is a statement of queries.go, where each is declared once, with
// /*schema*/ replaced by the store's schema; the result is kept for the
// next call.
func (s *Store) sql(statement string) string {
	if q, ok := s.stmts.Load(statement); ok {
		return q.(string)
	}
	q := s.schema.Replace(statement)
	s.stmts.Store(statement, q)
	return q
}

// NewEvent is an outbox_events row to insert.
type NewEvent struct {
	ID            uuid.UUID
	AggregateType string
	AggregateID   string
	Type          string
	Payload       json.RawMessage
}

// InsertEvent inserts ev. It reports inserted=false when a row with that id
// exists already, and then whether that row has identical columns.
func (s *Store) InsertEvent(ctx context.Context, db DB, ev NewEvent) (inserted, same bool, err error) {
	tag, err := db.Exec(ctx, s.sql(sqlInsertEvent), ev.ID, ev.AggregateType, ev.AggregateID, ev.Type, ev.Payload)
	if err != nil {
		return false, false, fmt.Errorf("insert event %s: %w", ev.ID, err)
	}
	if tag.RowsAffected() == 1 {
		return true, true, nil
	}
	if err := db.QueryRow(ctx, s.sql(sqlEventMatches), ev.ID, ev.AggregateType, ev.AggregateID, ev.Type, ev.Payload).Scan(&same); err != nil {
		return false, false, fmt.Errorf("compare event %s: %w", ev.ID, err)
	}
	return false, same, nil
}

// NewEffect is a side_effects row to insert.
type NewEffect struct {
	Kind     string
	Provider string
	Payload  json.RawMessage
}

// effectArrays are new effects as the column arrays the unnest-based
// statements take.
type effectArrays struct {
	ids       []uuid.UUID
	kinds     []string
	providers []string
	payloads  []json.RawMessage
}

func columnsOf(sourceID uuid.UUID, effects []NewEffect) effectArrays {
	c := effectArrays{
		ids:       make([]uuid.UUID, len(effects)),
		kinds:     make([]string, len(effects)),
		providers: make([]string, len(effects)),
		payloads:  make([]json.RawMessage, len(effects)),
	}
	for i, e := range effects {
		c.ids[i], c.kinds[i], c.providers[i], c.payloads[i] = EffectID(sourceID, e.Kind), e.Kind, e.Provider, e.Payload
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
	rows, err := db.Query(ctx, sql, sourceID, c.ids, c.kinds, c.providers, c.payloads)
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
		c.ids, c.kinds, c.providers, c.payloads)
	if err != nil {
		return false, fmt.Errorf("insert event %s: %w", ev.ID, err)
	}
	return tag.RowsAffected() == int64(len(effects)), nil
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
	rows, err := db.Query(ctx, s.sql(sqlCompareEffects), sourceID, c.kinds, c.providers, c.payloads)
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

// Get returns the effect with the given id.
func (s *Store) Get(ctx context.Context, db DB, id uuid.UUID) (*Effect, error) {
	return s.getOne(ctx, db, s.sql(sqlGetEffect), id)
}

// GetByKey returns the effect with the given idempotency key.
func (s *Store) GetByKey(ctx context.Context, db DB, key string) (*Effect, error) {
	return s.getByKey(ctx, db, s.sql(sqlGetEffectByKey), key)
}

func (s *Store) getByKey(ctx context.Context, db DB, sql, key string) (*Effect, error) {
	id, ok := KeyEffectID(key)
	if !ok {
		return nil, fmt.Errorf("%w: %v", ErrNotFound, key)
	}
	return s.getOne(ctx, db, sql, key, id)
}

func (s *Store) getOne(ctx context.Context, db DB, sql string, args ...any) (*Effect, error) {
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	e, err := pgx.CollectExactlyOneRow(rows, rowToEffect)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: %v", ErrNotFound, args[0])
	}
	return e, err
}

// rowToEffect scans a row of effectColumns and derives its key.
func rowToEffect(row pgx.CollectableRow) (*Effect, error) {
	e, err := pgx.RowToAddrOfStructByName[Effect](row)
	if err != nil {
		return nil, err
	}
	e.IdempotencyKey = Key(e.SourceID, e.Kind)
	return e, nil
}

// ClaimFirstMany moves the effects in ids to fired that are pending, were
// never fired and belong to one of providers: the common first attempt,
// for many effects in one statement. It returns the effects it claimed, by
// id.
func (s *Store) ClaimFirstMany(ctx context.Context, db DB, ids []uuid.UUID, providers []string) (map[uuid.UUID]*Effect, error) {
	rows, err := db.Query(ctx, s.sql(sqlClaimFirstMany), ids, providers)
	if err != nil {
		return nil, fmt.Errorf("claim %d effects: %w", len(ids), err)
	}
	es, err := pgx.CollectRows(rows, rowToEffect)
	if err != nil {
		return nil, fmt.Errorf("claim %d effects: %w", len(ids), err)
	}
	out := make(map[uuid.UUID]*Effect, len(es))
	for _, e := range es {
		out[e.ID] = e
	}
	return out, nil
}

// Ack is a provider's acknowledgement of one effect.
type Ack struct {
	ID       uuid.UUID
	Ref      string
	Replayed bool
}

// ConfirmedFrom is the state an effect left when its acknowledgement was
// recorded (see Confirm), with the error the confirmation cleared.
type ConfirmedFrom struct {
	State     State
	LastError *string
}

// ConfirmMany records the providers' acknowledgements of many effects in
// one statement: each moves to confirmed from fired, or from pending or
// failed when an operator acted while its call was in flight. It returns,
// by id, the state each confirmed effect left and the error it cleared; an
// acknowledged effect missing from the result was cancelled, confirmed or
// deleted meanwhile, and nothing changed.
func (s *Store) ConfirmMany(ctx context.Context, db DB, acks []Ack) (map[uuid.UUID]ConfirmedFrom, error) {
	// Rows are updated in id order, so that batches never wait on each
	// other in a cycle.
	acks = slices.SortedFunc(slices.Values(acks), func(a, b Ack) int { return bytes.Compare(a.ID[:], b.ID[:]) })
	ids, refs, replayed := ackColumns(acks)
	rows, err := db.Query(ctx, s.sql(sqlConfirmFiredMany), ids, refs, replayed)
	if err != nil {
		return nil, fmt.Errorf("confirm %d effects: %w", len(acks), err)
	}
	out := make(map[uuid.UUID]ConfirmedFrom, len(acks))
	var id uuid.UUID
	_, err = pgx.ForEachRow(rows, []any{&id}, func() error {
		out[id] = ConfirmedFrom{State: StateFired}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("confirm %d effects: %w", len(acks), err)
	}
	if len(out) == len(acks) {
		return out, nil
	}
	// The rest were not fired: an operator acted while their calls were
	// in flight, or they are gone.
	rest := slices.DeleteFunc(acks, func(a Ack) bool { _, done := out[a.ID]; return done })
	ids, refs, replayed = ackColumns(rest)
	rows, err = db.Query(ctx, s.sql(sqlConfirmMany), ids, refs, replayed)
	if err != nil {
		return nil, fmt.Errorf("confirm %d effects: %w", len(rest), err)
	}
	var cf ConfirmedFrom
	_, err = pgx.ForEachRow(rows, []any{&id, &cf.State, &cf.LastError}, func() error {
		out[id] = cf
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("confirm %d effects: %w", len(rest), err)
	}
	return out, nil
}

func ackColumns(acks []Ack) (ids []uuid.UUID, refs []string, replayed []bool) {
	ids = make([]uuid.UUID, len(acks))
	refs = make([]string, len(acks))
	replayed = make([]bool, len(acks))
	for i, a := range acks {
		ids[i], refs[i], replayed[i] = a.ID, a.Ref, a.Replayed
	}
	return ids, refs, replayed
}

// Claim moves effect id from the state from (pending or fired) to fired and
// counts the attempt. It returns nil and no error when the effect is no
// longer in state from.
func (s *Store) Claim(ctx context.Context, db DB, id uuid.UUID, from State) (*Effect, error) {
	return s.transitionReturning(ctx, db, "claim", s.sql(sqlClaim), id, from)
}

// transitionReturning runs a guarded transition that returns a row: the
// effect after (or, for operator transitions, before) the change, or nil
// when the transition no longer applies.
func (s *Store) transitionReturning(ctx context.Context, db DB, what, sql string, id uuid.UUID, args ...any) (*Effect, error) {
	rows, err := db.Query(ctx, sql, append([]any{id}, args...)...)
	if err != nil {
		return nil, fmt.Errorf("%s effect %s: %w", what, id, err)
	}
	e, err := pgx.CollectExactlyOneRow(rows, rowToEffect)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s effect %s: %w", what, id, err)
	}
	return e, nil
}

// RecordLateAck keeps an acknowledgement that arrived after the effect was
// cancelled or confirmed by an operator: the ref goes on the row if it has
// none, and an audit row (action late_ack) says what happened. It reports
// whether the effect still exists.
func (s *Store) RecordLateAck(ctx context.Context, db DB, id uuid.UUID, ref string, details map[string]any, note string) (bool, error) {
	var refArg *string
	if ref != "" {
		refArg = &ref
	}
	d, err := json.Marshal(details)
	if err != nil {
		return false, err
	}
	return s.exec(ctx, db, "record late acknowledgement", s.sql(sqlLateAck), id, refArg, d, note)
}

// liveJobStates are the states of a River job not finalized yet.
var liveJobStates = []string{"available", "pending", "retryable", "running", "scheduled"}

// jobIn returns the id of the newest dispatch job of effect id in one of
// states, or 0.
func (s *Store) jobIn(ctx context.Context, db DB, id uuid.UUID, states ...string) (int64, error) {
	var job int64
	if err := db.QueryRow(ctx, s.sql(sqlJobIn), id, states).Scan(&job); err != nil {
		return 0, fmt.Errorf("dispatch job of effect %s: %w", id, err)
	}
	return job, nil
}

// audit writes one side_effect_audit row.
func (s *Store) audit(ctx context.Context, db DB, id uuid.UUID, action, actor, reason string, from, to State, details map[string]any) error {
	d, err := json.Marshal(details)
	if err != nil {
		return err
	}
	if _, err := db.Exec(ctx, s.sql(sqlInsertAudit), id, action, actor, reason, string(from), string(to), d); err != nil {
		return fmt.Errorf("audit %s of effect %s: %w", action, id, err)
	}
	return nil
}

// Unclaim undoes a claim whose request was never made: the effect goes
// back to before (its state and the columns a claim sets), and the attempt
// does not count.
func (s *Store) Unclaim(ctx context.Context, db DB, before *Effect) (bool, error) {
	return s.exec(ctx, db, "unclaim", s.sql(sqlUnclaim), before.ID, before.State, before.InDoubt,
		before.FiredAt, before.FirstFiredAt, before.KeyWindowFrom, before.NextAttemptAt)
}

// Release moves effect id from fired back to pending after an attempt the
// provider did not act on.
// inDoubt says whether an earlier request with the key may have been
// applied: the proof covers this attempt only.
func (s *Store) Release(ctx context.Context, db DB, id uuid.UUID, lastError string, next time.Time, inDoubt bool) (bool, error) {
	return s.exec(ctx, db, "release", s.sql(sqlRelease), id, lastError, next, inDoubt)
}

// RecordInDoubt keeps effect id fired and records why its last attempt is in
// doubt.
func (s *Store) RecordInDoubt(ctx context.Context, db DB, id uuid.UUID, lastError string, next time.Time) (bool, error) {
	return s.exec(ctx, db, "record in-doubt", s.sql(sqlRecordInDoubt), id, lastError, next)
}

// Fail moves a pending or fired effect to failed with reason.
func (s *Store) Fail(ctx context.Context, db DB, id uuid.UUID, reason string) (bool, error) {
	return s.exec(ctx, db, "fail", s.sql(sqlFail), id, reason)
}

// FailProven moves effect id to failed after an attempt the provider proved
// it did not act on (a refusal, or retries exhausted on such answers):
// in doubt only when an earlier request with the key may have been applied.
func (s *Store) FailProven(ctx context.Context, db DB, id uuid.UUID, reason string, inDoubt bool) (bool, error) {
	return s.exec(ctx, db, "fail", s.sql(sqlFailProven), id, reason, inDoubt)
}

func (s *Store) exec(ctx context.Context, db DB, what, sql string, id uuid.UUID, args ...any) (bool, error) {
	tag, err := db.Exec(ctx, sql, append([]any{id}, args...)...)
	if err != nil {
		return false, fmt.Errorf("%s effect %s: %w", what, id, err)
	}
	return tag.RowsAffected() == 1, nil
}
