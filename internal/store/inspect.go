package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/outboxtype"
)

func nullable[T comparable](v T) *T {
	var zero T
	if v == zero {
		return nil
	}
	return &v
}

// List returns the effects matching f, newest first.
func (s *Store) List(ctx context.Context, db DB, f outboxtype.Filter) ([]*outboxtype.Effect, error) {
	var states []string
	for _, st := range f.States {
		states = append(states, string(st))
	}
	var afterAt *time.Time
	var afterID *uuid.UUID
	if f.After != nil {
		afterAt, afterID = &f.After.CreatedAt, &f.After.ID
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	sql := s.sql(sqlListEffects)
	if len(states) == 1 && states[0] == string(outboxtype.StateFailed) {
		sql = s.sql(sqlListFailed)
		if f.Kind != "" {
			sql = s.sql(sqlListFailedKind)
		}
	}
	rows, err := db.Query(ctx, sql, states, nullable(f.Kind), nullable(f.Provider), nullable(f.Source),
		nullable(f.Since), nullable(f.Before), afterAt, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("list effects: %w", err)
	}
	return pgx.CollectRows(rows, rowToEffect)
}

// ByProviderRef returns the effects whose provider reference is ref (a
// Stripe object id, a SendGrid message id, what a manual confirmation
// recorded), newest first, at most limit. A SendGrid event's sg_message_id
// is the message id followed by a dot and the recipient's part: when ref
// finds nothing and has a dot, the part before it is looked up too.
func (s *Store) ByProviderRef(ctx context.Context, db DB, ref string, limit int) ([]*outboxtype.Effect, error) {
	find := func(ref string) ([]*outboxtype.Effect, error) {
		rows, err := db.Query(ctx, s.sql(sqlEffectsByProviderRef), ref, limit)
		if err != nil {
			return nil, fmt.Errorf("effects by provider reference: %w", err)
		}
		return pgx.CollectRows(rows, rowToEffect)
	}
	out, err := find(ref)
	if err != nil || len(out) > 0 {
		return out, err
	}
	if head, _, ok := strings.Cut(ref, "."); ok && head != "" {
		return find(head)
	}
	return nil, nil
}

// WaitingBehind returns the effects after id on its ordering key that have
// not ended, in the order they go out once it is released: what a release
// of id sends (at most limit).
func (s *Store) WaitingBehind(ctx context.Context, db DB, id uuid.UUID, limit int) ([]*outboxtype.Effect, error) {
	rows, err := db.Query(ctx, s.sql(sqlWaitingBehind), id, limit)
	if err != nil {
		return nil, fmt.Errorf("effects behind %s: %w", id, err)
	}
	return pgx.CollectRows(rows, rowToEffect)
}

// ByKeyPrefix returns the effects whose idempotency key begins with prefix
// (at least 12 lowercase hex digits, as outboxctl prints keys), at most
// limit: found on the primary key, since an effect's id is its key's first
// 16 bytes with the version and variant set (migration 00012). Effects
// recorded before ids were derived are not found this way.
func (s *Store) ByKeyPrefix(ctx context.Context, db DB, prefix string, limit int) ([]*outboxtype.Effect, error) {
	if len(prefix) < 12 || len(prefix) > 64 {
		return nil, fmt.Errorf("key prefix %q: give 12 to 64 hex digits", prefix)
	}
	// The first 12 digits of the id are the key's; search the ids that
	// begin with them, then keep the keys that begin with all of prefix.
	lo := prefix[:8] + "-" + prefix[8:12] + "-0000-0000-000000000000"
	hi := prefix[:8] + "-" + prefix[8:12] + "-ffff-ffff-ffffffffffff"
	rows, err := db.Query(ctx, s.sql(sqlEffectsInIDRange), lo, hi, max(limit*4, limit+16))
	if err != nil {
		return nil, fmt.Errorf("effects by key prefix: %w", err)
	}
	all, err := pgx.CollectRows(rows, rowToEffect)
	if err != nil {
		return nil, fmt.Errorf("effects by key prefix: %w", err)
	}
	out := all[:0]
	for _, e := range all {
		if strings.HasPrefix(e.IdempotencyKey, prefix) && len(out) < limit {
			out = append(out, e)
		}
	}
	return out, nil
}

// Stuck returns live effects not updated since notSince and failed ones,
// oldest first.
func (s *Store) Stuck(ctx context.Context, db DB, notSince time.Time, limit int) ([]outboxtype.StuckEffect, error) {
	if limit <= 0 {
		limit = 100
	}
	var out []outboxtype.StuckEffect
	err := fewJobsPlan(ctx, db, func(db DB) error {
		rows, err := db.Query(ctx, s.sql(sqlStuck), notSince, limit)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, scanStuck)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("stuck effects: %w", err)
	}
	return out, nil
}

// fewJobsPlan runs fn in a transaction of db's (a savepoint in one) set to
// plan a read that looks up a page of effects' River jobs. River's GIN
// index on river_job.args finds an effect's one or two jobs at once, but
// the planner guesses thousands of rows for each lookup: below some
// hundred thousand jobs it reads all of river_job for each effect
// instead, and above it the guessed cost passes jit_above_cost, so the
// read spends 50-90 ms compiling a plan that runs in 10. SET LOCAL keeps
// both settings to this transaction (and works behind a transaction
// pooler); the side_effects parts of these reads use their indexes anyway.
func fewJobsPlan(ctx context.Context, db DB, fn func(DB) error) error {
	b, ok := db.(interface {
		Begin(context.Context) (pgx.Tx, error)
	})
	if !ok {
		return fn(db)
	}
	return pgx.BeginFunc(ctx, b, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL jit = off; SET LOCAL enable_seqscan = off"); err != nil {
			return err
		}
		return fn(tx)
	})
}

func scanStuck(r pgx.CollectableRow) (outboxtype.StuckEffect, error) {
	e := &outboxtype.Effect{}
	st := outboxtype.StuckEffect{Effect: e}
	err := r.Scan(&e.ID, &e.SourceID, &e.Kind, &e.Provider, &e.Payload, &e.State, &e.Attempts,
		&e.LastError, &e.ProviderRef, &e.Replayed, &e.NextAttemptAt, &e.CreatedAt, &e.UpdatedAt, &e.FiredAt,
		&e.FirstFiredAt, &e.ConfirmedAt, &e.InDoubt, &e.TotalAttempts, &e.Redrives, &e.KeyWindowFrom, &e.AcknowledgedAt, &e.NotBefore,
		&e.OrderingKey, &e.OrderingSeq, &e.OrderingSkipFailed, &e.OrderingReleasedAt, &e.WaitingFor, &e.WaitingSince, &e.Tenant, &e.ReplayID,
		&st.JobID, &st.JobState, &st.JobScheduledAt, &st.JobHeldBy, &st.BlockedBehind)
	e.IdempotencyKey = Key(e.SourceID, e.Kind)
	return st, err
}

// StuckGroups groups the stuck effects (live ones unchanged since
// notSince, failures since failedSince) by cause, newest incident first,
// at most limit groups.
func (s *Store) StuckGroups(ctx context.Context, db DB, notSince, failedSince time.Time, limit int) ([]outboxtype.StuckGroup, error) {
	rows, err := db.Query(ctx, s.sql(sqlStuckGroups), notSince, limit, failedSince)
	if err != nil {
		return nil, fmt.Errorf("stuck groups: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[outboxtype.StuckGroup])
}

// Event returns the event with the given id.
func (s *Store) Event(ctx context.Context, db DB, id uuid.UUID) (*outboxtype.Event, error) {
	var ev outboxtype.Event
	err := db.QueryRow(ctx, s.sql(sqlEventOf), id).Scan(&ev.ID, &ev.AggregateType, &ev.AggregateID, &ev.Type, &ev.Payload, &ev.CreatedAt)
	if err != nil {
		return nil, fmt.Errorf("event %s: %w", id, err)
	}
	return &ev, nil
}

// EventsByID returns the events with the given ids, by id, in one
// statement; an id with no event is missing from the map.
func (s *Store) EventsByID(ctx context.Context, db DB, ids []uuid.UUID) (map[uuid.UUID]*outboxtype.Event, error) {
	rows, err := db.Query(ctx, s.sql(sqlEventsOf), uuidArray(ids))
	if err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	out := make(map[uuid.UUID]*outboxtype.Event, len(ids))
	var ev outboxtype.Event
	_, err = pgx.ForEachRow(rows, []any{&ev.ID, &ev.AggregateType, &ev.AggregateID, &ev.Type, &ev.Payload, &ev.CreatedAt}, func() error {
		e := ev
		out[e.ID] = &e
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	return out, nil
}

// Events lists events, newest first, with their effects.
func (s *Store) Events(ctx context.Context, db DB, f outboxtype.EventFilter) ([]outboxtype.EventEffects, error) {
	if f.Limit <= 0 {
		f.Limit = 50
	}
	var since *time.Time
	if !f.Since.IsZero() {
		since = &f.Since
	}
	var id *uuid.UUID
	if f.ID != uuid.Nil {
		id = &f.ID
	}
	rows, err := db.Query(ctx, s.sql(sqlEvents), nullable(f.Type), nullable(f.AggregateType), nullable(f.AggregateID),
		nullable(f.MissingKind), since, id, f.Limit)
	if err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	return collectEventEffects(rows)
}

func collectEventEffects(rows pgx.Rows) ([]outboxtype.EventEffects, error) {
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (outboxtype.EventEffects, error) {
		var ev outboxtype.EventEffects
		var effects []byte
		if err := r.Scan(&ev.ID, &ev.AggregateType, &ev.AggregateID, &ev.Type, &ev.Payload, &ev.CreatedAt, &effects); err != nil {
			return ev, err
		}
		return ev, json.Unmarshal(effects, &ev.Effects)
	})
}

// Jobs returns every River job that dispatched (or will dispatch) effect id.
func (s *Store) Jobs(ctx context.Context, db DB, id uuid.UUID) ([]outboxtype.Job, error) {
	rows, err := db.Query(ctx, s.sql(sqlJobsOf), id)
	if err != nil {
		return nil, fmt.Errorf("jobs of %s: %w", id, err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (outboxtype.Job, error) {
		var j outboxtype.Job
		var errs [][]byte
		if err := r.Scan(&j.ID, &j.State, &j.Queue, &j.Attempt, &j.MaxAttempts, &j.CreatedAt, &j.ScheduledAt, &j.FinalizedAt, &errs, &j.HeldBy); err != nil {
			return j, err
		}
		for _, raw := range errs {
			var ae outboxtype.JobError
			if err := json.Unmarshal(raw, &ae); err == nil {
				j.Errors = append(j.Errors, ae)
			}
		}
		return j, nil
	})
}

// Audit returns the operator actions taken on effect id, oldest first.
func (s *Store) Audit(ctx context.Context, db DB, id uuid.UUID) ([]outboxtype.AuditEntry, error) {
	rows, err := db.Query(ctx, s.sql(sqlListAudit), id)
	if err != nil {
		return nil, fmt.Errorf("audit of %s: %w", id, err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (outboxtype.AuditEntry, error) {
		var a outboxtype.AuditEntry
		err := r.Scan(&a.ID, &a.EffectID, &a.Action, &a.Actor, &a.Reason, &a.FromState, &a.ToState, &a.Details, &a.CreatedAt)
		return a, err
	})
}
