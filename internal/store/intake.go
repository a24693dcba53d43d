package store

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// IntakeWatch reads the last number drawn from the intake's watch
// sequence: it moves when an effect, an ordering key's wake or a tenant's
// queued effect is written, whether or not that has committed yet.
func (s *Store) IntakeWatch(ctx context.Context, db DB) (int64, error) {
	var v int64
	if err := db.QueryRow(ctx, s.sql(sqlIntakeWatch)).Scan(&v); err != nil {
		return 0, fmt.Errorf("intake: watch: %w", err)
	}
	return v, nil
}

// IntakeWaiting says, in one round trip and without a transaction, whether
// the intake holds effects and whether ordering keys wait for a wake, and
// the watch's last number (drawn before what a drain after it can see).
func (s *Store) IntakeWaiting(ctx context.Context, db DB) (queued, wakes bool, watch int64, err error) {
	err = db.QueryRow(ctx, s.sql(sqlIntakeWaiting)).Scan(&queued, &wakes, &watch)
	return queued, wakes, watch, err
}

// IntakeRow is an effect taken from the intake.
type IntakeRow struct {
	JobTarget
	// Ordered is true for an effect with an ordering key: it gets its job
	// when it is first in its chain.
	Ordered bool
}

// TakeIntake takes up to limit effects from the intake, in tx, and the
// effects of up to limit events that carry them, whose rows it writes.
func (s *Store) TakeIntake(ctx context.Context, tx pgx.Tx, limit int) ([]IntakeRow, error) {
	rows, err := tx.Query(ctx, s.sql(sqlTakeIntake), limit, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (IntakeRow, error) {
		var x IntakeRow
		err := r.Scan(&x.ID, &x.Provider, &x.NotBefore, &x.Ordered)
		return x, err
	})
}

// Unended returns the effects of ids that have not ended.
func (s *Store) Unended(ctx context.Context, db DB, ids []uuid.UUID) ([]JobTarget, error) {
	rows, err := db.Query(ctx, s.sql(sqlUnended), uuidArray(ids))
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, rowToJobTarget)
}

// Subscriber is an effect an event's subscribers effect stands for: one
// per endpoint it reaches.
type Subscriber struct {
	Endpoint uuid.UUID
	Kind     string
	Provider string
	Payload  []byte
}

// Subscribers returns the endpoints event id of type eventType reaches
// (tenant "" for every tenant's): for a new event the ones subscribed
// now, for a recorded one the ones it reached then (outboxd_subscribers).
func (s *Store) Subscribers(ctx context.Context, db DB, id uuid.UUID, eventType, tenant string) ([]Subscriber, error) {
	rows, err := db.Query(ctx, s.sql(sqlSubscribers), id, eventType, tenant)
	if err != nil {
		return nil, fmt.Errorf("subscribers: %w", err)
	}
	subs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Subscriber, error) {
		var x Subscriber
		err := r.Scan(&x.Endpoint, &x.Kind, &x.Provider, &x.Payload)
		return x, err
	})
	if err != nil {
		return nil, fmt.Errorf("subscribers: %w", err)
	}
	return subs, nil
}

// PurgeSummary deletes the minute summary's rows older than before.
func (s *Store) PurgeSummary(ctx context.Context, db DB, before time.Time) error {
	if _, err := db.Exec(ctx, s.sql(sqlPurgeSummary), before); err != nil {
		return fmt.Errorf("purge the summary's old minutes: %w", err)
	}
	return nil
}

// ForgetLimits deletes the limit keys with no rate of their own that have
// not been throttled for a day: they hold nothing worth keeping.
func (s *Store) ForgetLimits(ctx context.Context, db DB) error {
	_, err := db.Exec(ctx, s.sql(sqlLimitsForget))
	return err
}

// TenantsWaiting reports whether any tenant's effect is queued.
func (s *Store) TenantsWaiting(ctx context.Context, db DB) (bool, error) {
	var waiting bool
	err := db.QueryRow(ctx, s.sql(sqlTenantsWaiting)).Scan(&waiting)
	return waiting, err
}

// FeedTenants takes, if no other process is feeding this schema's tenants
// now, the tenants' queued effects that their windows allow (window
// places, tenants' weights), in tx.
func (s *Store) FeedTenants(ctx context.Context, tx pgx.Tx, window int, tenants []string, weights []float64) ([]JobTarget, error) {
	var mine bool
	if err := tx.QueryRow(ctx, sqlTenantsLock, s.name).Scan(&mine); err != nil || !mine {
		return nil, err
	}
	rows, err := tx.Query(ctx, s.sql(sqlFeedTenants), window, tenants, weights)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (JobTarget, error) {
		var x JobTarget
		err := r.Scan(&x.ID, &x.Provider)
		return x, err
	})
}

// Execer runs a statement: a pool, a connection, a transaction.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// IntakeChannel is the notification channel that wakes the dispatchers of
// a schema (the payload names it) when effects enter the intake.
const IntakeChannel = "outboxd_intake"

// WakeIntake notifies IntakeChannel for this store's schema: delivered
// when db's transaction commits (at once outside one).
func (s *Store) WakeIntake(ctx context.Context, db Execer) error {
	if _, err := db.Exec(ctx, "SELECT pg_notify($1, $2)", IntakeChannel, s.name); err != nil {
		return fmt.Errorf("wake dispatchers: %w", err)
	}
	return nil
}

// ListenIntake makes conn receive IntakeChannel's notifications.
func ListenIntake(ctx context.Context, conn Execer) error {
	_, err := conn.Exec(ctx, "LISTEN "+IntakeChannel)
	return err
}

// UnlistenIntake stops conn receiving IntakeChannel's notifications.
func UnlistenIntake(ctx context.Context, conn Execer) error {
	_, err := conn.Exec(ctx, "UNLISTEN "+IntakeChannel)
	return err
}
