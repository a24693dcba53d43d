package sideeffects

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"
)

// Filter selects effects for listing and bulk actions. Zero fields match
// everything.
type Filter struct {
	States   []State
	Kind     string
	Provider string
	Source   uuid.UUID
	// Since and Before bound created_at: Since <= created_at < Before.
	Since  time.Time
	Before time.Time
	// After is the keyset cursor: the last effect of the previous page.
	After *Effect
	Limit int
}

func nullable[T comparable](v T) *T {
	var zero T
	if v == zero {
		return nil
	}
	return &v
}

// List returns the effects matching f, newest first.
func (s *Store) List(ctx context.Context, db DB, f Filter) ([]*Effect, error) {
	var states []string
	for _, st := range f.States {
		states = append(states, string(st))
	}
	var afterAt *time.Time
	var afterID *uuid.UUID
	if f.After != nil {
		afterAt, afterID = &f.After.CreatedAt, &f.After.ID
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	rows, err := db.Query(ctx, s.q.listEffects, states, nullable(f.Kind), nullable(f.Provider), nullable(f.Source),
		nullable(f.Since), nullable(f.Before), afterAt, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("list effects: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowToAddrOfStructByName[Effect])
}

// StuckEffect is an effect that is not progressing, with its live River
// job, if it has one.
type StuckEffect struct {
	*Effect
	JobID          *int64     `json:"job_id"`
	JobState       *string    `json:"job_state"`
	JobScheduledAt *time.Time `json:"job_scheduled_at"`
}

// Stuck returns live effects not updated since notSince and failed ones,
// oldest first.
func (s *Store) Stuck(ctx context.Context, db DB, notSince time.Time, limit int) ([]StuckEffect, error) {
	if limit <= 0 {
		limit = 100
	}
	rows, err := db.Query(ctx, s.q.stuck, notSince, limit)
	if err != nil {
		return nil, fmt.Errorf("stuck effects: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (StuckEffect, error) {
		e := &Effect{}
		st := StuckEffect{Effect: e}
		err := r.Scan(&e.ID, &e.SourceID, &e.Kind, &e.Provider, &e.IdempotencyKey, &e.Payload, &e.State, &e.Attempts,
			&e.LastError, &e.ProviderRef, &e.Replayed, &e.NextAttemptAt, &e.CreatedAt, &e.UpdatedAt, &e.FiredAt,
			&e.FirstFiredAt, &e.ConfirmedAt, &e.InDoubt, &e.TotalAttempts, &e.Redrives, &e.KeyWindowFrom, &e.AcknowledgedAt,
			&st.JobID, &st.JobState, &st.JobScheduledAt)
		return st, err
	})
}

// Diagnosis explains why a stuck effect is not progressing and what to do.
// firedBound is the crash-recovery bound; window the provider's key window
// minus margin (zero: none).
func (s StuckEffect) Diagnosis(now time.Time, firedBound, window time.Duration) string {
	e := s.Effect
	lastErr := ""
	if e.LastError != nil {
		lastErr = *e.LastError
	}
	if e.State == StateFailed {
		return "failed: " + strings.TrimRight(lastErr, ". ") + ". " + failedAdvice(e, lastErr)
	}
	if window > 0 && e.KeyWindowFrom != nil {
		if closes := e.KeyWindowFrom.Add(window); closes.Sub(now) < time.Hour {
			return fmt.Sprintf("key window closes %s (first request with the key %s): if it passes, the effect fails for reconciliation",
				relative(closes, now), relative(*e.KeyWindowFrom, now))
		}
	}
	if s.JobID == nil {
		return "no live River job: nothing will fire it. `outboxctl requeue` gives it one (the sweeper would, within --sweep-interval)"
	}
	if e.State == StateFired && e.FiredAt != nil && now.Sub(*e.FiredAt) > firedBound {
		return fmt.Sprintf("fired %s, beyond the crash-recovery bound (%s): the worker died mid-call and River has not rescued job %d (%s); is any outboxd running? "+
			"An outboxd that starts rescues it within seconds and re-fires it with the same key (at_least_once) or parks it for review (at_most_once). "+
			"To resolve it yourself: look up key %s at the provider, then `outboxctl confirm --ref` if done, or let it re-fire",
			relative(*e.FiredAt, now), firedBound, *s.JobID, *s.JobState, e.IdempotencyKey)
	}
	if e.Attempts > 0 && lastErr != "" {
		next := "unknown"
		if s.JobScheduledAt != nil {
			next = relative(*s.JobScheduledAt, now)
		}
		return fmt.Sprintf("retrying: %d attempts, last error: %s; next attempt %s", e.Attempts, lastErr, next)
	}
	if s.JobScheduledAt != nil && s.JobScheduledAt.Before(now) {
		return fmt.Sprintf("waiting for a worker: job %d %s since %s; is an outboxd serving queue %q?",
			*s.JobID, *s.JobState, relative(*s.JobScheduledAt, now), e.Provider)
	}
	return fmt.Sprintf("job %d %s", *s.JobID, *s.JobState)
}

// failedAdvice says, per failure class, which actions are safe for a
// failed effect and which one could cause a second real-world effect.
func failedAdvice(e *Effect, lastErr string) string {
	switch {
	case strings.HasPrefix(lastErr, ReasonUnqueueable):
		return "Fix the row's provider, then `outboxctl retry`; or `outboxctl cancel`."
	case strings.HasPrefix(lastErr, ReasonInDoubt) || e.InDoubt && !strings.HasPrefix(lastErr, ReasonKeyWindow):
		return fmt.Sprintf("An earlier request may have been delivered: look up key %s at the provider "+
			"(`outboxctl reconcile` asks Stripe for you; with provider events on, outboxd confirms it by itself when the provider's event arrives). "+
			"Done: `outboxctl confirm --ref`. Not done: `outboxctl retry` (with --allow-duplicate for at_most_once kinds: "+
			"a second delivery if it was done after all). Not wanted: `outboxctl cancel`.", e.IdempotencyKey)
	case strings.HasPrefix(lastErr, ReasonKeyWindow):
		return fmt.Sprintf("The provider may have forgotten key %s, so a re-fire could act twice: check at the provider. "+
			"Done: `outboxctl confirm --ref`. Not done: `outboxctl retry --force` (a new key window). Not wanted: `outboxctl cancel`.", e.IdempotencyKey)
	case strings.HasPrefix(lastErr, "retries exhausted"):
		return "The provider never acted (each failure proved it): `outboxctl retry` once the cause is fixed (same key, no duplicate), or `outboxctl cancel`."
	default:
		return "The provider refused it (permanent): `outboxctl cancel` if it should not happen, or fix the cause and `outboxctl retry` (same key)."
	}
}

func relative(t, now time.Time) string {
	d := now.Sub(t).Round(time.Second)
	if d >= 0 {
		return d.String() + " ago"
	}
	return "in " + (-d).String()
}

// Event is an outbox_events row.
type Event struct {
	ID            uuid.UUID       `json:"id"`
	AggregateType string          `json:"aggregate_type"`
	AggregateID   string          `json:"aggregate_id"`
	EventType     string          `json:"event_type"`
	Payload       json.RawMessage `json:"payload"`
	CreatedAt     time.Time       `json:"created_at"`
}

// Event returns the event with the given id.
func (s *Store) Event(ctx context.Context, db DB, id uuid.UUID) (*Event, error) {
	var ev Event
	err := db.QueryRow(ctx, s.q.eventOf, id).Scan(&ev.ID, &ev.AggregateType, &ev.AggregateID, &ev.EventType, &ev.Payload, &ev.CreatedAt)
	if err != nil {
		return nil, fmt.Errorf("event %s: %w", id, err)
	}
	return &ev, nil
}

// EventFilter selects events for Events; zero fields match all.
type EventFilter struct {
	Type          string
	AggregateType string
	AggregateID   string
	// MissingKind keeps events that have no effect of this kind.
	MissingKind string
	Since       time.Time
	ID          uuid.UUID
	Limit       int
}

// EventEffects is an event with its effects' kinds and states.
type EventEffects struct {
	Event
	Effects []EventEffect `json:"effects"`
}

// EventEffect is one effect of an event, as Events lists it.
type EventEffect struct {
	ID    uuid.UUID `json:"id"`
	Kind  string    `json:"kind"`
	State State     `json:"state"`
}

// Events lists events, newest first, with their effects.
func (s *Store) Events(ctx context.Context, db DB, f EventFilter) ([]EventEffects, error) {
	if f.Limit <= 0 {
		f.Limit = 50
	}
	var since *time.Time
	if !f.Since.IsZero() {
		since = &f.Since
	}
	var id *uuid.UUID
	if f.ID != uuid.Nil {
		id = &f.ID
	}
	rows, err := db.Query(ctx, s.q.events, nullable(f.Type), nullable(f.AggregateType), nullable(f.AggregateID),
		nullable(f.MissingKind), since, id, f.Limit)
	if err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	return collectEventEffects(rows)
}

func collectEventEffects(rows pgx.Rows) ([]EventEffects, error) {
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (EventEffects, error) {
		var ev EventEffects
		var effects []byte
		if err := r.Scan(&ev.ID, &ev.AggregateType, &ev.AggregateID, &ev.EventType, &ev.Payload, &ev.CreatedAt, &effects); err != nil {
			return ev, err
		}
		return ev, json.Unmarshal(effects, &ev.Effects)
	})
}

// Job is a River dispatch job of an effect.
type Job struct {
	ID          int64                    `json:"id"`
	State       string                   `json:"state"`
	Queue       string                   `json:"queue"`
	Attempt     int                      `json:"attempt"`
	MaxAttempts int                      `json:"max_attempts"`
	CreatedAt   time.Time                `json:"created_at"`
	ScheduledAt time.Time                `json:"scheduled_at"`
	FinalizedAt *time.Time               `json:"finalized_at"`
	Errors      []rivertype.AttemptError `json:"errors"`
}

// Jobs returns every River job that dispatched (or will dispatch) effect id.
func (s *Store) Jobs(ctx context.Context, db DB, id uuid.UUID) ([]Job, error) {
	rows, err := db.Query(ctx, s.q.jobsOf, id)
	if err != nil {
		return nil, fmt.Errorf("jobs of %s: %w", id, err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Job, error) {
		var j Job
		var errs [][]byte
		if err := r.Scan(&j.ID, &j.State, &j.Queue, &j.Attempt, &j.MaxAttempts, &j.CreatedAt, &j.ScheduledAt, &j.FinalizedAt, &errs); err != nil {
			return j, err
		}
		for _, raw := range errs {
			var ae rivertype.AttemptError
			if err := json.Unmarshal(raw, &ae); err == nil {
				j.Errors = append(j.Errors, ae)
			}
		}
		return j, nil
	})
}

// AuditEntry is one recorded operator action.
type AuditEntry struct {
	ID        int64           `json:"id"`
	EffectID  uuid.UUID       `json:"effect_id"`
	Action    string          `json:"action"`
	Actor     string          `json:"actor"`
	Reason    string          `json:"reason"`
	FromState string          `json:"from_state"`
	ToState   string          `json:"to_state"`
	Details   json.RawMessage `json:"details"`
	CreatedAt time.Time       `json:"created_at"`
}

// Audit returns the operator actions taken on effect id, oldest first.
func (s *Store) Audit(ctx context.Context, db DB, id uuid.UUID) ([]AuditEntry, error) {
	rows, err := db.Query(ctx, s.q.listAudit, id)
	if err != nil {
		return nil, fmt.Errorf("audit of %s: %w", id, err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (AuditEntry, error) {
		var a AuditEntry
		err := r.Scan(&a.ID, &a.EffectID, &a.Action, &a.Actor, &a.Reason, &a.FromState, &a.ToState, &a.Details, &a.CreatedAt)
		return a, err
	})
}

// Stats summarises the effects table.
type Stats struct {
	Window time.Duration `json:"-"`
	// WindowSeconds is Window in seconds, for scripts.
	WindowSeconds float64 `json:"window_seconds"`
	// Counts holds live and failed effects in full, confirmed and cancelled
	// ones updated within Window.
	Counts        []StateKindCount `json:"counts"`
	OldestPending *time.Time       `json:"oldest_pending_created_at"`
	OldestFired   *time.Time       `json:"oldest_fired_at"`
	Attempts      []AttemptsBucket `json:"attempts_of_confirmed"`
	Confirmed     int64            `json:"confirmed_in_window"`
	LatencyP50    float64          `json:"confirm_latency_p50_seconds"`
	LatencyP95    float64          `json:"confirm_latency_p95_seconds"`
	LatencyP99    float64          `json:"confirm_latency_p99_seconds"`
	// ConfirmedByHand counts effects confirmed by an operator in the
	// window; they are not in the latency percentiles.
	ConfirmedByHand int64     `json:"confirmed_by_hand_in_window"`
	CollectedAt     time.Time `json:"collected_at"`
}

// StateKindCount is the number of effects of one kind in one state.
type StateKindCount struct {
	State State  `json:"state"`
	Kind  string `json:"kind"`
	Count int64  `json:"count"`
}

// AttemptsBucket counts confirmed effects by the attempts they took.
type AttemptsBucket struct {
	Attempts string `json:"attempts"`
	Count    int64  `json:"count"`
}

// Stats computes Stats over the last window (zero: every row kept).
func (s *Store) Stats(ctx context.Context, db DB, window time.Duration) (*Stats, error) {
	var now time.Time
	if err := db.QueryRow(ctx, "SELECT now()").Scan(&now); err != nil {
		return nil, err
	}
	since := now.Add(-window)
	if window == 0 {
		since = time.Time{}
	}
	st := &Stats{Window: window, WindowSeconds: window.Seconds(), CollectedAt: now}
	rows, err := db.Query(ctx, s.q.statsCounts, since)
	if err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	st.Counts, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (StateKindCount, error) {
		var c StateKindCount
		err := r.Scan(&c.State, &c.Kind, &c.Count)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	if err := db.QueryRow(ctx, s.q.statsOldest).Scan(&st.OldestPending, &st.OldestFired); err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	rows, err = db.Query(ctx, s.q.statsAttempts, since)
	if err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	st.Attempts, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (AttemptsBucket, error) {
		var b AttemptsBucket
		err := r.Scan(&b.Attempts, &b.Count)
		return b, err
	})
	if err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	if err := db.QueryRow(ctx, s.q.statsByHand, since).Scan(&st.ConfirmedByHand); err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	if err := db.QueryRow(ctx, s.q.statsLatency, since).Scan(&st.Confirmed, &st.LatencyP50, &st.LatencyP95, &st.LatencyP99); err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	return st, nil
}

// PurgeResult counts what a purge deleted (or would delete).
type PurgeResult struct {
	Effects int64 `json:"effects"`
	Events  int64 `json:"events"`
}

// Purge deletes confirmed, failed and cancelled effects last updated before
// cutoff, with their audit rows, then events older than cutoff left without
// effects, in batches so no transaction holds many locks. Pending and fired
// effects are never touched. With dryRun it only counts.
func (s *Store) Purge(ctx context.Context, db DB, cutoff time.Time, dryRun bool) (PurgeResult, error) {
	const batch = 5000
	var res PurgeResult
	if dryRun {
		if err := db.QueryRow(ctx, s.q.purgeCount, cutoff).Scan(&res.Effects); err != nil {
			return res, fmt.Errorf("purge: %w", err)
		}
		err := db.QueryRow(ctx, s.q.purgeEventsCount, cutoff).Scan(&res.Events)
		if err != nil {
			return res, fmt.Errorf("purge: %w", err)
		}
		return res, nil
	}
	for _, step := range []struct {
		sql string
		n   *int64
	}{{s.q.purgeEffects, &res.Effects}, {s.q.purgeEvents, &res.Events}} {
		for {
			tag, err := db.Exec(ctx, step.sql, cutoff, batch)
			if err != nil {
				return res, fmt.Errorf("purge: %w", err)
			}
			*step.n += tag.RowsAffected()
			if tag.RowsAffected() < batch {
				break
			}
		}
	}
	return res, nil
}

// ExplainAdmin returns the JSON plans of the statements behind Stuck and
// Stats, keyed by name, so their index use can be checked at scale.
func (s *Store) ExplainAdmin(ctx context.Context, db DB, notSince, since time.Time) (map[string]string, error) {
	plans := map[string]string{}
	for name, q := range map[string]struct {
		sql  string
		args []any
	}{
		"stuck":          {s.q.stuck, []any{notSince, 100}},
		"stats.counts":   {s.q.statsCounts, []any{since}},
		"stats.oldest":   {s.q.statsOldest, nil},
		"stats.attempts": {s.q.statsAttempts, []any{since}},
		"stats.latency":  {s.q.statsLatency, []any{since}},
	} {
		var plan string
		if err := db.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+q.sql, q.args...).Scan(&plan); err != nil {
			return nil, fmt.Errorf("explain %s: %w", name, err)
		}
		plans[name] = plan
	}
	return plans, nil
}
