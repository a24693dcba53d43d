package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxd/outboxd/outboxtype"
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

// NewStore returns a Store for the tables in schema ("" uses search_path).
func NewStore(schema string) *Store {
	return &Store{name: schema, schema: strings.NewReplacer("/*schema*/", pgschema.Table(schema, ""))}
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

// Get returns the effect with the given id.
func (s *Store) Get(ctx context.Context, db DB, id uuid.UUID) (*outboxtype.Effect, error) {
	return s.getOne(ctx, db, s.sql(sqlGetEffect), id)
}

// GetByKey returns the effect with the given idempotency key.
func (s *Store) GetByKey(ctx context.Context, db DB, key string) (*outboxtype.Effect, error) {
	return s.getByKey(ctx, db, s.sql(sqlGetEffectByKey), key)
}

func (s *Store) getByKey(ctx context.Context, db DB, sql, key string) (*outboxtype.Effect, error) {
	id, ok := KeyEffectID(key)
	if !ok {
		return nil, fmt.Errorf("%w: %v", ErrNotFound, key)
	}
	return s.getOne(ctx, db, sql, key, id)
}

func (s *Store) getOne(ctx context.Context, db DB, sql string, args ...any) (*outboxtype.Effect, error) {
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
func rowToEffect(row pgx.CollectableRow) (*outboxtype.Effect, error) {
	e, err := pgx.RowToAddrOfStructByName[outboxtype.Effect](row)
	if err != nil {
		return nil, err
	}
	e.IdempotencyKey = Key(e.SourceID, e.Kind)
	return e, nil
}

// transitionReturning runs a guarded transition that returns a row: the
// effect after (or, for operator transitions, before) the change, or nil
// when the transition no longer applies.
func (s *Store) transitionReturning(ctx context.Context, db DB, what, sql string, id uuid.UUID, args ...any) (*outboxtype.Effect, error) {
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
func (s *Store) audit(ctx context.Context, db DB, id uuid.UUID, action, actor, reason string, from, to outboxtype.State, details map[string]any) error {
	d, err := json.Marshal(details)
	if err != nil {
		return err
	}
	if _, err := db.Exec(ctx, s.sql(sqlInsertAudit), id, action, actor, reason, string(from), string(to), d); err != nil {
		return fmt.Errorf("audit %s of effect %s: %w", action, id, err)
	}
	return nil
}

func (s *Store) exec(ctx context.Context, db DB, what, sql string, id uuid.UUID, args ...any) (bool, error) {
	tag, err := db.Exec(ctx, sql, append([]any{id}, args...)...)
	if err != nil {
		return false, fmt.Errorf("%s effect %s: %w", what, id, err)
	}
	return tag.RowsAffected() == 1, nil
}

// Store runs outboxd's SQL against the tables of one schema.
type Store struct {
	// name is the schema's name as given ("" for search_path).
	name   string
	schema *strings.Replacer
	// stmts caches each statement with the schema filled in, by its text.
	stmts sync.Map
}

// uuidArray is ids as pgx encodes a uuid[] parameter directly. A
// uuid.UUID is a driver.Valuer that gives a string, which pgx's binary
// encoding refuses: it then formats an error, parses the string back and
// encodes that, for every element (5 µs of a dispatcher's CPU an effect
// in the claims and confirmations).
func uuidArray(ids []uuid.UUID) [][16]byte {
	out := make([][16]byte, len(ids))
	for i, id := range ids {
		out[i] = id
	}
	return out
}
