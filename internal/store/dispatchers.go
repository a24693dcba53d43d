package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/outboxtype"
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

// RecordGuarantees records what each of provs promises about repeated
// requests, as dispatcher id runs it: an operator reads it for a provider
// its own settings do not know (ProviderGuarantees).
func (s *Store) RecordGuarantees(ctx context.Context, db DB, id string, provs []providers.Provider) error {
	names := make([]string, len(provs))
	windows, margins := make([]int64, len(provs)), make([]int64, len(provs))
	inDoubt := make([]string, len(provs))
	for i, p := range provs {
		g := p.Guarantees()
		names[i], windows[i], margins[i], inDoubt[i] = p.Name(), g.KeyWindow.Milliseconds(), g.KeyWindowMargin.Milliseconds(), string(g.InDoubt)
	}
	if _, err := db.Exec(ctx, s.sql(sqlRecordGuarantees), names, windows, margins, inDoubt, id); err != nil {
		return fmt.Errorf("record provider guarantees: %w", err)
	}
	return nil
}

// AllProviderGuarantees returns every provider's guarantees as the
// dispatchers last recorded them.
func (s *Store) AllProviderGuarantees(ctx context.Context, db DB) (map[string]providers.Guarantees, error) {
	rows, err := db.Query(ctx, s.sql(sqlAllProviderGuarantees))
	if err != nil {
		return nil, fmt.Errorf("provider guarantees: %w", err)
	}
	out := map[string]providers.Guarantees{}
	for rows.Next() {
		var name, inDoubt string
		var window, margin int64
		if err := rows.Scan(&name, &window, &margin, &inDoubt); err != nil {
			rows.Close()
			return nil, fmt.Errorf("provider guarantees: %w", err)
		}
		out[name] = providers.Guarantees{KeyWindow: time.Duration(window) * time.Millisecond,
			KeyWindowMargin: time.Duration(margin) * time.Millisecond, InDoubt: providers.InDoubtPolicy(inDoubt)}
	}
	return out, rows.Err()
}

// ProviderGuarantees returns provider's guarantees as a dispatcher last
// recorded them, and false when none did.
func (s *Store) ProviderGuarantees(ctx context.Context, db DB, provider string) (providers.Guarantees, bool, error) {
	var window, margin int64
	var inDoubt string
	err := db.QueryRow(ctx, s.sql(sqlProviderGuarantees), provider).Scan(&window, &margin, &inDoubt)
	if errors.Is(err, pgx.ErrNoRows) {
		return providers.Guarantees{}, false, nil
	}
	if err != nil {
		return providers.Guarantees{}, false, fmt.Errorf("provider guarantees: %w", err)
	}
	return providers.Guarantees{KeyWindow: time.Duration(window) * time.Millisecond, KeyWindowMargin: time.Duration(margin) * time.Millisecond,
		InDoubt: providers.InDoubtPolicy(inDoubt)}, true, nil
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
func (s *Store) Dispatchers(ctx context.Context, db DB, limit int) ([]outboxtype.DispatcherRecord, error) {
	rows, err := db.Query(ctx, s.sql(sqlDispatchers), limit)
	if err != nil {
		return nil, fmt.Errorf("dispatchers: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (outboxtype.DispatcherRecord, error) {
		var d outboxtype.DispatcherRecord
		err := r.Scan(&d.ID, &d.Host, &d.PID, &d.StartedAt, &d.SeenAt, &d.StoppedAt, &d.Settings, &d.Destinations)
		return d, err
	})
}

// RunningJobs counts the dispatch jobs River marks running, by the
// dispatcher (River client) that holds them.
func (s *Store) RunningJobs(ctx context.Context, db DB) ([]outboxtype.RunningJobs, error) {
	rows, err := db.Query(ctx, s.sql(sqlRunningJobs))
	if err != nil {
		return nil, fmt.Errorf("running jobs: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[outboxtype.RunningJobs])
}
