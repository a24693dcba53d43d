package engine

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
