package store

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// JobTarget is an effect to give a dispatch job.
type JobTarget struct {
	ID        uuid.UUID
	Provider  string
	NotBefore *time.Time
}

// SweepBatch is how many effects one sweep statement looks at.
const SweepBatch = 1000

// SweepCandidates returns up to SweepBatch pending or fired effects
// unchanged since notSince that have no live job, locked in tx.
func (s *Store) SweepCandidates(ctx context.Context, tx pgx.Tx, notSince time.Time) ([]JobTarget, error) {
	rows, err := tx.Query(ctx, s.sql(sqlSweep), notSince, SweepBatch)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, rowToJobTarget)
}

// rowToJobTarget scans a row of (id, provider, not_before).
func rowToJobTarget(r pgx.CollectableRow) (JobTarget, error) {
	var x JobTarget
	err := r.Scan(&x.ID, &x.Provider, &x.NotBefore)
	return x, err
}

// PurgeExpired deletes expired idempotency keys no request holds and
// expired inbox message ids, and returns how many of each.
func (s *Store) PurgeExpired(ctx context.Context, pool *pgxpool.Pool) (keys, messages int64, err error) {
	for _, p := range []struct {
		sql string
		n   *int64
	}{{s.sql(sqlPurgeExpiredKeys), &keys}, {s.sql(sqlPurgeExpiredInbox), &messages}} {
		for {
			tag, err := pool.Exec(ctx, p.sql, SweepBatch)
			if err != nil {
				return keys, messages, fmt.Errorf("purge expired keys and message ids: %w", err)
			}
			*p.n += tag.RowsAffected()
			if tag.RowsAffected() < SweepBatch {
				break
			}
		}
	}
	return keys, messages, nil
}

// sqlKeyWindowsClosing raises, once per key window, the operational event
// of each effect of provider $1 not ended whose window ($2 long, its
// margin deducted) closes within $3, when an endpoint listens for it.
const sqlKeyWindowsClosing = `
SELECT count(*) FROM (
	SELECT /*schema*/outboxd_emit('outboxd.effect.key_window_closing', 'side_effect', e.id::text,
		-- What stays the same for the window: raised again, the event
		-- is a duplicate, never a conflict.
		jsonb_build_object('effect_id', e.id, 'event_id', e.source_id, 'kind', e.kind, 'provider', e.provider,
			'tenant', e.tenant, 'closes_at', e.key_window_from + $2::interval),
		md5('outboxd.effect.key_window_closing:' || e.id || ':' || e.key_window_from)::uuid)
	FROM /*schema*/side_effects e
	WHERE /*schema*/outboxd_listened('outboxd.effect.key_window_closing')
		AND e.phase = 'live' AND e.provider = $1 AND e.key_window_from IS NOT NULL
		AND e.key_window_from + $2::interval BETWEEN now() AND now() + $3::interval
) raised`

// RaiseKeyWindowsClosing raises outboxd.effect.key_window_closing, once
// per window, for the effects of provider not ended whose key window
// (window, its margin deducted) closes within within.
func (s *Store) RaiseKeyWindowsClosing(ctx context.Context, db DB, provider string, window, within time.Duration) error {
	if _, err := db.Exec(ctx, s.sql(sqlKeyWindowsClosing), provider, window, within); err != nil {
		return fmt.Errorf("key windows closing (%s): %w", provider, err)
	}
	return nil
}
