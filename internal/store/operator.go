package store

import (
	"context"
	"encoding/json"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/outboxtype"
)

// The operator's transitions: each returns the effect before the change,
// or nil when the transition no longer applies.

// Redrive moves effect id back to pending for a new attempt (force: from
// any state an operator may retry; clearsDoubt and restartsKeyWindow as
// the retry's check decided; replay the paced replay retrying it, 0 for
// an operator's own retry).
func (s *Store) Redrive(ctx context.Context, db DB, id uuid.UUID, force, clearsDoubt, restartsKeyWindow bool, replay int64) (*outboxtype.Effect, error) {
	var r *int64
	if replay != 0 {
		r = &replay
	}
	return s.transitionReturning(ctx, db, outboxtype.ActionRetry, s.sql(sqlRedrive), id, force, clearsDoubt, restartsKeyWindow, r)
}

// EditPayload replaces failed effect id's payload and moves it back to
// pending.
func (s *Store) EditPayload(ctx context.Context, db DB, id uuid.UUID, payload json.RawMessage) (*outboxtype.Effect, error) {
	if _, err := db.Exec(ctx, s.sql(sqlEditPayload), id, payload); err != nil {
		return nil, err
	}
	return s.transitionReturning(ctx, db, outboxtype.ActionEditPayload, s.sql(sqlRedrive), id, false, false, false, nil)
}

// SamePayload reports whether a and b are the same payload as Postgres
// stores them (jsonb: key order and spacing aside).
func (s *Store) SamePayload(ctx context.Context, db DB, a, b []byte) (bool, error) {
	var same bool
	err := db.QueryRow(ctx, sqlSamePayload, a, b).Scan(&same)
	return same, err
}

// Acknowledge marks failed effect id as reviewed.
func (s *Store) Acknowledge(ctx context.Context, db DB, id uuid.UUID) (*outboxtype.Effect, error) {
	return s.transitionReturning(ctx, db, outboxtype.ActionAcknowledge, s.sql(sqlAcknowledge), id)
}

// ReleaseChain lets the effects behind effect id in its ordering key go on.
func (s *Store) ReleaseChain(ctx context.Context, db DB, id uuid.UUID) (*outboxtype.Effect, error) {
	return s.transitionReturning(ctx, db, outboxtype.ActionRelease, s.sql(sqlReleaseChain), id)
}

// Cancel cancels effect id.
func (s *Store) Cancel(ctx context.Context, db DB, id uuid.UUID) (*outboxtype.Effect, error) {
	return s.transitionReturning(ctx, db, outboxtype.ActionCancel, s.sql(sqlCancel), id)
}

// ResolveConfirmed confirms effect id by hand with the provider's ref.
func (s *Store) ResolveConfirmed(ctx context.Context, db DB, id uuid.UUID, ref string) (*outboxtype.Effect, error) {
	return s.transitionReturning(ctx, db, outboxtype.ActionConfirm, s.sql(sqlResolveConfirmed), id, ref)
}

// LockEffect reads effect id and locks it for the rest of tx; nil when it
// does not exist.
func (s *Store) LockEffect(ctx context.Context, tx pgx.Tx, id uuid.UUID) (*outboxtype.Effect, error) {
	return s.transitionReturning(ctx, tx, "lock", s.sql(sqlGetEffectForUpdate), id)
}

// RunningJob returns the id of effect id's dispatch job that is running
// now, or 0.
func (s *Store) RunningJob(ctx context.Context, db DB, id uuid.UUID) (int64, error) {
	return s.jobIn(ctx, db, id, "running")
}

// LiveJob returns the id of effect id's newest dispatch job not finalized
// yet, or 0.
func (s *Store) LiveJob(ctx context.Context, db DB, id uuid.UUID) (int64, error) {
	return s.jobIn(ctx, db, id, liveJobStates...)
}

// RecordAudit writes one audit row of effect id: action by actor for
// reason, from one state to another, with details.
func (s *Store) RecordAudit(ctx context.Context, db DB, id uuid.UUID, action, actor, reason string, from, to outboxtype.State, details map[string]any) error {
	return s.audit(ctx, db, id, action, actor, reason, from, to, details)
}
