package store

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// ChainHead is the first effect of an ordering key that has not ended, as
// read for a wake: ID is nil when it is not pending (it has a job, or is
// being changed), HeldKey is the key when a transaction still changing
// that effect may not see what was enqueued behind it.
type ChainHead struct {
	ID        *uuid.UUID
	Provider  *string
	NotBefore *time.Time
	HeldKey   *string
}

// NextInChains returns the first effect of each of keys that has not
// ended, taking the keys' wakes; the commit notifies River's producers of
// the heads' queues (see sqlNextInChains).
func (s *Store) NextInChains(ctx context.Context, tx pgx.Tx, keys []string) ([]ChainHead, error) {
	rows, err := tx.Query(ctx, s.sql(sqlNextInChains), keys, s.name)
	if err != nil {
		return nil, fmt.Errorf("next in chains: %w", err)
	}
	var heads []ChainHead
	var h ChainHead
	if _, err := pgx.ForEachRow(rows, []any{&h.ID, &h.Provider, &h.NotBefore}, func() error {
		heads = append(heads, h)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("next in chains: %w", err)
	}
	return heads, nil
}

// TakeWakes takes up to limit keys whose chain may have moved (an effect
// of the key was inserted, ended or released) and returns the first effect
// of each that has not ended, one row per key taken.
func (s *Store) TakeWakes(ctx context.Context, tx pgx.Tx, limit int) ([]ChainHead, error) {
	rows, err := tx.Query(ctx, s.sql(sqlTakeWakes), limit)
	if err != nil {
		return nil, fmt.Errorf("wake chains: %w", err)
	}
	var heads []ChainHead
	var h ChainHead
	if _, err := pgx.ForEachRow(rows, []any{&h.ID, &h.Provider, &h.NotBefore, &h.HeldKey}, func() error {
		heads = append(heads, h)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("wake chains: %w", err)
	}
	return heads, nil
}

// WakeAgain writes the wakes of keys again, for the next look.
func (s *Store) WakeAgain(ctx context.Context, tx pgx.Tx, keys []string) error {
	if _, err := tx.Exec(ctx, s.sql(sqlWakeAgain), keys); err != nil {
		return fmt.Errorf("wake chains: %w", err)
	}
	return nil
}
