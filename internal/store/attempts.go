package store

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/outboxtype"
)

// RecordAttempt records a failed attempt.
func (s *Store) RecordAttempt(ctx context.Context, db DB, a outboxtype.Attempt) error {
	if _, err := db.Exec(ctx, s.sql(sqlRecordAttempt), a.EffectID, a.Attempt, a.StartedAt, a.Duration.Milliseconds(), a.Outcome, a.Error, a.Host); err != nil {
		return fmt.Errorf("record attempt of effect %s: %w", a.EffectID, err)
	}
	return nil
}

// Attempts lists the failed attempts of effect id, oldest first.
func (s *Store) Attempts(ctx context.Context, db DB, id uuid.UUID) ([]outboxtype.Attempt, error) {
	rows, err := db.Query(ctx, s.sql(sqlAttemptsOf), id)
	if err != nil {
		return nil, fmt.Errorf("attempts of effect %s: %w", id, err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (outboxtype.Attempt, error) {
		var a outboxtype.Attempt
		var ms int64
		err := r.Scan(&a.EffectID, &a.Attempt, &a.StartedAt, &ms, &a.Outcome, &a.Error, &a.Host)
		a.Duration = time.Duration(ms) * time.Millisecond
		return a, err
	})
}

// DelayBounded raises outboxd.provider.delay_bounded: the provider's
// answer to effect e asked outboxd to wait asked, and it waits bound
// (limitKey is the limit it paused, "" for none).
func (s *Store) DelayBounded(ctx context.Context, db DB, e *outboxtype.Effect, limitKey string, asked, bound time.Duration) error {
	if _, err := db.Exec(ctx, s.sql(sqlDelayBounded), e.ID, e.Kind, e.Provider, limitKey, asked.Seconds(), bound.Seconds(), e.Tenant); err != nil {
		return fmt.Errorf("record the bounded delay of effect %s: %w", e.ID, err)
	}
	return nil
}
