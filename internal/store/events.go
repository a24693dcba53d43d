package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/providers"
)

// ApplyProviderEvent applies a verified provider event in tx: confirm the
// effect it proves done (pending, fired, or failed in doubt), record the
// mail's delivery status, and record drift. An event without an outboxd key
// does nothing.
func (s *Store) ApplyProviderEvent(ctx context.Context, tx pgx.Tx, ev providers.EventReport) (outboxtype.EventResult, error) {
	var res outboxtype.EventResult
	if ev.Key == "" {
		return res, nil
	}
	e, err := s.getByKey(ctx, tx, s.sql(sqlGetEffectByKeyForUpdate), ev.Key)
	if errors.Is(err, ErrNotFound) {
		return res, s.drift(ctx, tx, &res, ev, nil, outboxtype.DriftUnknownKey, fmt.Sprintf(
			"no effect has key %s: purged after --retention, in another schema or database, or the key was copied; check %s at %s and whether your records expect it",
			ev.Key, orNone(ev.ObjectID), ev.Provider))
	}
	if err != nil {
		return res, err
	}
	res.Effect = e
	// An event proves something only about an effect of its own provider,
	// and of an operation that creates the kind of object it is about:
	// keys are computable by anyone who knows an event id, so a signed
	// event of one provider must not close an effect of another.
	if e.Provider != ev.Provider {
		return res, s.drift(ctx, tx, &res, ev, e, outboxtype.DriftOtherProvider, fmt.Sprintf(
			"a %s event (%s) names the key of %s, a %s effect: it proves nothing about it; check where %s got that key",
			ev.Provider, ev.Type, e.ID, e.Provider, orNone(ev.ObjectID)))
	}
	if ev.Operations != nil {
		if op := payloadOperation(e.Payload); !slices.Contains(ev.Operations, op) {
			return res, s.drift(ctx, tx, &res, ev, e, outboxtype.DriftOtherOperation, fmt.Sprintf(
				"%s event %s (%s) names the key of %s, whose operation is %s: that object is not what it creates; check %s",
				ev.Provider, ev.EventID, ev.Type, e.ID, orNone(op), orNone(ev.ObjectID)))
		}
	}
	if ev.Target != nil {
		// The key is in metadata an event's sender controls: only the
		// object the effect acts on speaks for it.
		if want := ev.Target(e.Payload); want != "" && want != ev.ObjectID {
			return res, s.drift(ctx, tx, &res, ev, e, outboxtype.DriftOtherObject, fmt.Sprintf(
				"%s event %s (%s) about %s names the key of %s, which acts on %s: it proves nothing about it; check where %s got that key",
				ev.Provider, ev.EventID, ev.Type, orNone(ev.ObjectID), e.ID, want, orNone(ev.ObjectID)))
		}
	}
	if ev.Delivery != "" {
		if _, err := tx.Exec(ctx, s.sql(sqlRecordDelivery), e.ID, ev.Delivery, ev.Detail, ev.EventID, cmpTime(ev.At)); err != nil {
			return res, fmt.Errorf("record delivery of effect %s: %w", e.ID, err)
		}
	}
	if ev.Outcome == providers.EventInformational {
		return res, nil
	}
	switch {
	case e.State == outboxtype.StatePending || e.State == outboxtype.StateFired || (e.State == outboxtype.StateFailed && e.InDoubt):
		before, err := s.transitionReturning(ctx, tx, outboxtype.ActionEventConfirm, s.sql(sqlEventConfirm), e.ID, ev.ObjectID)
		if err != nil {
			return res, err
		}
		if before != nil {
			res.Confirmed = true
			if err := s.audit(ctx, tx, e.ID, outboxtype.ActionEventConfirm, "provider:"+ev.Provider,
				fmt.Sprintf("confirmed by provider event %s (%s)", ev.EventID, ev.Type), before.State, outboxtype.StateConfirmed,
				map[string]any{"event_id": ev.EventID, "event_type": ev.Type, "object": ev.ObjectID, "last_error": before.LastError}); err != nil {
				return res, err
			}
		}
	case e.State == outboxtype.StateFailed:
		if err := s.drift(ctx, tx, &res, ev, e, outboxtype.DriftActedWhileFailed, fmt.Sprintf(
			"%s acted on %s although outboxd failed it (%s): check %s; if it stands, confirm %s with reference %s, else undo it at %s",
			ev.Provider, e.ID, deref(e.LastError), orNone(ev.ObjectID), e.ID, orNone(ev.ObjectID), ev.Provider)); err != nil {
			return res, err
		}
	case e.State == outboxtype.StateCancelled:
		if err := s.drift(ctx, tx, &res, ev, e, outboxtype.DriftActedWhileCancelled, fmt.Sprintf(
			"%s acted on %s although it was cancelled: check %s and undo it at %s if it must not stand",
			ev.Provider, e.ID, orNone(ev.ObjectID), ev.Provider)); err != nil {
			return res, err
		}
	case e.State == outboxtype.StateConfirmed && e.ProviderRef != nil && *e.ProviderRef != "" && ev.ObjectID != "" && *e.ProviderRef != ev.ObjectID:
		if err := s.drift(ctx, tx, &res, ev, e, outboxtype.DriftTwoObjects, fmt.Sprintf(
			"%s holds two objects for key %s: %s (confirmed) and %s: the request was applied twice; check both and undo one",
			ev.Provider, ev.Key, *e.ProviderRef, ev.ObjectID)); err != nil {
			return res, err
		}
	}
	if ev.Outcome == providers.EventUndone && e.State != outboxtype.StateCancelled {
		if err := s.drift(ctx, tx, &res, ev, e, outboxtype.DriftUndone, fmt.Sprintf(
			"%s reports %s of %s as %s (%s) after it was applied: the effect is confirmed but did not stand; decide whether to enqueue it anew",
			ev.Provider, orNone(ev.ObjectID), e.ID, ev.Type, orNone(ev.Detail))); err != nil {
			return res, err
		}
	}
	return res, nil
}

// driftLimitKey holds, in a context, how many more drift rows the delivery
// it serves may record (*atomic.Int64).
type driftLimitKey struct{}

// WithDriftLimit returns a context in which ApplyProviderEvent records at
// most n drift rows, however many events are applied with it: one signed
// delivery (a SendGrid batch holds up to thousands of events) cannot fill
// the table. Drift past the limit is still reported in EventResult.Drift,
// and counted in DriftNotRecorded.
func WithDriftLimit(ctx context.Context, n int64) context.Context {
	var left atomic.Int64
	left.Store(n)
	return context.WithValue(ctx, driftLimitKey{}, &left)
}

func (s *Store) drift(ctx context.Context, tx pgx.Tx, res *outboxtype.EventResult, ev providers.EventReport, e *outboxtype.Effect, reason, hint string) error {
	res.Drift = append(res.Drift, reason)
	if left, ok := ctx.Value(driftLimitKey{}).(*atomic.Int64); ok && left.Add(-1) < 0 {
		res.DriftNotRecorded++
		return nil
	}
	var (
		id    *uuid.UUID
		kind  string
		state string
	)
	if e != nil {
		id, kind, state = &e.ID, e.Kind, string(e.State)
	}
	details := map[string]any{}
	for k, v := range map[string]string{"status": ev.Status, "currency": ev.Currency, "detail": ev.Detail} {
		if v != "" {
			details[k] = v
		}
	}
	if ev.Amount != nil {
		details["amount"] = *ev.Amount
	}
	if !ev.At.IsZero() {
		details["event_at"] = ev.At.UTC()
	}
	if _, err := tx.Exec(ctx, s.sql(sqlInsertDrift), reason, ev.Provider, kind, id, state, ev.Key, ev.EventID, ev.Type, ev.ObjectID, hint, details); err != nil {
		return fmt.Errorf("record drift: %w", err)
	}
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func cmpTime(t time.Time) time.Time {
	if t.IsZero() {
		return time.Now()
	}
	return t
}

// Delivery returns effect id's delivery status, nil when no event told one.
func (s *Store) Delivery(ctx context.Context, db DB, id uuid.UUID) (*outboxtype.Delivery, error) {
	var d outboxtype.Delivery
	err := db.QueryRow(ctx, s.sql(sqlGetDelivery), id).Scan(&d.Status, &d.Detail, &d.EventID, &d.EventAt, &d.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return &d, err
}

// Drift lists drift records, newest first.
func (s *Store) Drift(ctx context.Context, db DB, f outboxtype.DriftFilter) ([]outboxtype.DriftRecord, error) {
	if f.Limit <= 0 {
		f.Limit = 100
	}
	rows, err := db.Query(ctx, s.sql(sqlListDrift), f.Since, f.Reason, f.EffectID, f.Limit, f.Acknowledged || f.EffectID != nil)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[outboxtype.DriftRecord])
}

// AckDrift records that drift records ids were reviewed, by actor for
// reason, and returns those it acknowledged now (others were already, or
// do not exist).
func (s *Store) AckDrift(ctx context.Context, db DB, ids []int64, actor, reason string) ([]int64, error) {
	if strings.TrimSpace(reason) == "" {
		return nil, errors.New("a reason is required: say what you checked")
	}
	if actor == "" {
		return nil, errors.New("an actor is required for the audit trail")
	}
	rows, err := db.Query(ctx, s.sql(sqlAckDrift), ids, actor, reason)
	if err != nil {
		return nil, fmt.Errorf("acknowledge drift: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}

// UnacknowledgedDrift counts the drift records nobody acknowledged.
func (s *Store) UnacknowledgedDrift(ctx context.Context, db DB) (int64, error) {
	var n int64
	err := db.QueryRow(ctx, s.sql(sqlUnacknowledgedDrift)).Scan(&n)
	return n, err
}

// payloadOperation is the "operation" of an effect's payload ("" if none).
func payloadOperation(payload json.RawMessage) string {
	var p struct {
		Operation string `json:"operation"`
	}
	_ = json.Unmarshal(payload, &p)
	return p.Operation
}
