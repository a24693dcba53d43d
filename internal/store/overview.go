package store

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/outboxtype"
)

// FailureReasons groups the newest failed effects not acknowledged, at
// most of of them, by kind and reason, most frequent first, at most limit
// groups. Bounding the failures read keeps its cost flat however many
// failures history holds (their count by kind is StateGauges', from the
// index alone).
func (s *Store) FailureReasons(ctx context.Context, db DB, limit, of int) ([]outboxtype.ReasonCount, error) {
	rows, err := db.Query(ctx, s.sql(sqlFailureReasons), limit, of)
	if err != nil {
		return nil, fmt.Errorf("failure reasons: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[outboxtype.ReasonCount])
}

// Throughput counts effects confirmed and failed per minute since since
// (by the time they last changed), oldest first; minutes with neither are
// left out.
func (s *Store) Throughput(ctx context.Context, db DB, since time.Time) ([]outboxtype.MinuteCount, error) {
	rows, err := db.Query(ctx, s.sql(sqlThroughput), since)
	if err != nil {
		return nil, fmt.Errorf("throughput: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[outboxtype.MinuteCount])
}

// EventsOfAggregate returns the newest events of one aggregate with their
// effects.
// An empty aggType finds aggID under any type.
func (s *Store) EventsOfAggregate(ctx context.Context, db DB, aggType, aggID string, limit int) ([]outboxtype.EventEffects, error) {
	sql, args := s.sql(sqlEventsOfAggregate), []any{aggType, aggID, limit}
	if aggType == "" {
		sql, args = s.sql(sqlEventsOfAggregateID), []any{aggID, limit}
	}
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("events of %s %s: %w", aggType, aggID, err)
	}
	return collectEventEffects(rows)
}

// EffectsOfEvent returns every effect of event id.
func (s *Store) EffectsOfEvent(ctx context.Context, db DB, id uuid.UUID) ([]*outboxtype.Effect, error) {
	rows, err := db.Query(ctx, s.sql(sqlEffectsOfEvent), id)
	if err != nil {
		return nil, fmt.Errorf("effects of event %s: %w", id, err)
	}
	return pgx.CollectRows(rows, rowToEffect)
}
