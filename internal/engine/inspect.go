package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"
)

// Filter selects effects for listing and bulk actions. Zero fields match
// everything.
type Filter struct {
	States   []State
	Kind     string
	Provider string
	Source   uuid.UUID
	// Since and Before bound created_at: Since <= created_at < Before.
	Since  time.Time
	Before time.Time
	// After is the keyset cursor: the last effect of the previous page.
	After *Effect
	Limit int
}

func nullable[T comparable](v T) *T {
	var zero T
	if v == zero {
		return nil
	}
	return &v
}

// List returns the effects matching f, newest first.
func (s *Store) List(ctx context.Context, db DB, f Filter) ([]*Effect, error) {
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
	sql := s.q.listEffects
	if len(states) == 1 && states[0] == string(StateFailed) {
		sql = s.q.listFailed
	}
	rows, err := db.Query(ctx, sql, states, nullable(f.Kind), nullable(f.Provider), nullable(f.Source),
		nullable(f.Since), nullable(f.Before), afterAt, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("list effects: %w", err)
	}
	return pgx.CollectRows(rows, rowToEffect)
}

// StuckEffect is an effect that is not progressing, with its live River
// job, if it has one.
type StuckEffect struct {
	*Effect
	JobID          *int64     `json:"job_id"`
	JobState       *string    `json:"job_state"`
	JobScheduledAt *time.Time `json:"job_scheduled_at"`
}

// Stuck returns live effects not updated since notSince and failed ones,
// oldest first.
func (s *Store) Stuck(ctx context.Context, db DB, notSince time.Time, limit int) ([]StuckEffect, error) {
	if limit <= 0 {
		limit = 100
	}
	rows, err := db.Query(ctx, s.q.stuck, notSince, limit)
	if err != nil {
		return nil, fmt.Errorf("stuck effects: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (StuckEffect, error) {
		e := &Effect{}
		st := StuckEffect{Effect: e}
		err := r.Scan(&e.ID, &e.SourceID, &e.Kind, &e.Provider, &e.Payload, &e.State, &e.Attempts,
			&e.LastError, &e.ProviderRef, &e.Replayed, &e.NextAttemptAt, &e.CreatedAt, &e.UpdatedAt, &e.FiredAt,
			&e.FirstFiredAt, &e.ConfirmedAt, &e.InDoubt, &e.TotalAttempts, &e.Redrives, &e.KeyWindowFrom, &e.AcknowledgedAt,
			&st.JobID, &st.JobState, &st.JobScheduledAt)
		e.IdempotencyKey = Key(e.SourceID, e.Kind)
		return st, err
	})
}

// Event is an outbox_events row.
type Event struct {
	ID            uuid.UUID       `json:"id"`
	AggregateType string          `json:"aggregate_type"`
	AggregateID   string          `json:"aggregate_id"`
	Type          string          `json:"event_type"`
	Payload       json.RawMessage `json:"payload"`
	CreatedAt     time.Time       `json:"created_at"`
}

// Event returns the event with the given id.
func (s *Store) Event(ctx context.Context, db DB, id uuid.UUID) (*Event, error) {
	var ev Event
	err := db.QueryRow(ctx, s.q.eventOf, id).Scan(&ev.ID, &ev.AggregateType, &ev.AggregateID, &ev.Type, &ev.Payload, &ev.CreatedAt)
	if err != nil {
		return nil, fmt.Errorf("event %s: %w", id, err)
	}
	return &ev, nil
}

// EventFilter selects events for Events; zero fields match all.
type EventFilter struct {
	Type          string
	AggregateType string
	AggregateID   string
	// MissingKind keeps events that have no effect of this kind.
	MissingKind string
	Since       time.Time
	ID          uuid.UUID
	Limit       int
}

// EventEffects is an event with its effects' kinds and states.
type EventEffects struct {
	Event
	Effects []EventEffect `json:"effects"`
}

// EventEffect is one effect of an event, as Events lists it.
type EventEffect struct {
	ID    uuid.UUID `json:"id"`
	Kind  string    `json:"kind"`
	State State     `json:"state"`
}

// Events lists events, newest first, with their effects.
func (s *Store) Events(ctx context.Context, db DB, f EventFilter) ([]EventEffects, error) {
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
	rows, err := db.Query(ctx, s.q.events, nullable(f.Type), nullable(f.AggregateType), nullable(f.AggregateID),
		nullable(f.MissingKind), since, id, f.Limit)
	if err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	return collectEventEffects(rows)
}

func collectEventEffects(rows pgx.Rows) ([]EventEffects, error) {
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (EventEffects, error) {
		var ev EventEffects
		var effects []byte
		if err := r.Scan(&ev.ID, &ev.AggregateType, &ev.AggregateID, &ev.Type, &ev.Payload, &ev.CreatedAt, &effects); err != nil {
			return ev, err
		}
		return ev, json.Unmarshal(effects, &ev.Effects)
	})
}

// Job is a River dispatch job of an effect.
type Job struct {
	ID          int64                    `json:"id"`
	State       string                   `json:"state"`
	Queue       string                   `json:"queue"`
	Attempt     int                      `json:"attempt"`
	MaxAttempts int                      `json:"max_attempts"`
	CreatedAt   time.Time                `json:"created_at"`
	ScheduledAt time.Time                `json:"scheduled_at"`
	FinalizedAt *time.Time               `json:"finalized_at"`
	Errors      []rivertype.AttemptError `json:"errors"`
}

// Jobs returns every River job that dispatched (or will dispatch) effect id.
func (s *Store) Jobs(ctx context.Context, db DB, id uuid.UUID) ([]Job, error) {
	rows, err := db.Query(ctx, s.q.jobsOf, id)
	if err != nil {
		return nil, fmt.Errorf("jobs of %s: %w", id, err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Job, error) {
		var j Job
		var errs [][]byte
		if err := r.Scan(&j.ID, &j.State, &j.Queue, &j.Attempt, &j.MaxAttempts, &j.CreatedAt, &j.ScheduledAt, &j.FinalizedAt, &errs); err != nil {
			return j, err
		}
		for _, raw := range errs {
			var ae rivertype.AttemptError
			if err := json.Unmarshal(raw, &ae); err == nil {
				j.Errors = append(j.Errors, ae)
			}
		}
		return j, nil
	})
}

// AuditEntry is one recorded operator action.
type AuditEntry struct {
	ID        int64           `json:"id"`
	EffectID  uuid.UUID       `json:"effect_id"`
	Action    string          `json:"action"`
	Actor     string          `json:"actor"`
	Reason    string          `json:"reason"`
	FromState string          `json:"from_state"`
	ToState   string          `json:"to_state"`
	Details   json.RawMessage `json:"details"`
	CreatedAt time.Time       `json:"created_at"`
}

// Audit returns the operator actions taken on effect id, oldest first.
func (s *Store) Audit(ctx context.Context, db DB, id uuid.UUID) ([]AuditEntry, error) {
	rows, err := db.Query(ctx, s.q.listAudit, id)
	if err != nil {
		return nil, fmt.Errorf("audit of %s: %w", id, err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (AuditEntry, error) {
		var a AuditEntry
		err := r.Scan(&a.ID, &a.EffectID, &a.Action, &a.Actor, &a.Reason, &a.FromState, &a.ToState, &a.Details, &a.CreatedAt)
		return a, err
	})
}
