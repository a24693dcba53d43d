package engine

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/providers"
)

// RecordDispatcher records (or refreshes) a running dispatcher's settings.
func (s *Store) RecordDispatcher(ctx context.Context, db DB, id, host string, pid int, settings any) error {
	raw, err := json.Marshal(settings)
	if err != nil {
		return err
	}
	if _, err := db.Exec(ctx, s.sql(sqlRecordDispatcher), id, host, pid, raw); err != nil {
		return fmt.Errorf("record dispatcher: %w", err)
	}
	return nil
}

// DispatcherSeen refreshes a dispatcher's seen_at, or with stopped set, marks
// it stopped.
func (s *Store) DispatcherSeen(ctx context.Context, db DB, id string, stopped bool) error {
	return s.DispatcherSeenWith(ctx, db, id, stopped, nil)
}

// DispatcherSeenWith is DispatcherSeen that also records what the
// dispatcher's per-destination gates hold back (nil: unchanged).
func (s *Store) DispatcherSeenWith(ctx context.Context, db DB, id string, stopped bool, destinations []providers.DestinationState) error {
	var raw []byte
	if destinations != nil {
		var err error
		if raw, err = json.Marshal(destinations); err != nil {
			return err
		}
	}
	if _, err := db.Exec(ctx, s.sql(sqlDispatcherSeen), id, stopped, raw); err != nil {
		return fmt.Errorf("dispatcher seen: %w", err)
	}
	return nil
}

// Dispatchers lists the recorded dispatchers, most recently seen first.
func (s *Store) Dispatchers(ctx context.Context, db DB, limit int) ([]DispatcherRecord, error) {
	rows, err := db.Query(ctx, s.sql(sqlDispatchers), limit)
	if err != nil {
		return nil, fmt.Errorf("dispatchers: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (DispatcherRecord, error) {
		var d DispatcherRecord
		err := r.Scan(&d.ID, &d.Host, &d.PID, &d.StartedAt, &d.SeenAt, &d.StoppedAt, &d.Settings, &d.Destinations)
		return d, err
	})
}

// RunningJobs counts the dispatch jobs River marks running, by the
// dispatcher (River client) that holds them.
func (s *Store) RunningJobs(ctx context.Context, db DB) ([]RunningJobs, error) {
	rows, err := db.Query(ctx, s.sql(sqlRunningJobs))
	if err != nil {
		return nil, fmt.Errorf("running jobs: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[RunningJobs])
}
