package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/outboxtype"
)

// BlockedChains is what waits on ordering keys: how many keys have an
// effect blocked behind an earlier one, how many effects are blocked, and
// how old the oldest of them is.
type BlockedChains = outboxtype.BlockedChains

// BlockedChains counts the effects blocked behind an earlier effect of
// their ordering key, and their keys.
func (s *Store) BlockedChains(ctx context.Context, db DB) (BlockedChains, error) {
	var b BlockedChains
	var age float64
	if err := db.QueryRow(ctx, s.sql(sqlBlockedChains)).Scan(&b.Keys, &b.Effects, &age); err != nil {
		return b, fmt.Errorf("blocked chains: %w", err)
	}
	b.OldestAge = time.Duration(age * float64(time.Second))
	return b, nil
}

// Carried returns the effect with id that its event still carries
// (outbox.EffectsByDispatcher), or ErrNotFound. It reads every event that
// carries effects: for an operator looking up one effect, never for a hot
// path.
func (s *Store) Carried(ctx context.Context, db DB, id uuid.UUID) (*outboxtype.CarriedEffect, error) {
	c := outboxtype.CarriedEffect{ID: id}
	err := db.QueryRow(ctx, s.sql(sqlCarriedEffect), id).Scan(&c.EventID, &c.Kind, &c.Since)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("carried effect %s: %w", id, err)
	}
	return &c, nil
}

// StateGauges reads the live and failed effects by state and kind from the
// partial indexes, with the effects events still carry as pending.
func (s *Store) StateGauges(ctx context.Context, db DB) ([]outboxtype.StateGauge, error) {
	rows, err := db.Query(ctx, s.sql(sqlStateGauges))
	if err != nil {
		return nil, fmt.Errorf("state gauges: %w", err)
	}
	defer rows.Close()
	var out []outboxtype.StateGauge
	for rows.Next() {
		var g outboxtype.StateGauge
		var age float64
		if err := rows.Scan(&g.State, &g.Kind, &g.Count, &age); err != nil {
			return nil, fmt.Errorf("state gauges: %w", err)
		}
		g.OldestAge = time.Duration(age * float64(time.Second))
		out = append(out, g)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("state gauges: %w", err)
	}
	return out, nil
}
