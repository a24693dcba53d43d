package sideeffects

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
)

// Operator actions recorded in side_effect_audit.action.
const (
	ActionRetry   = "retry"
	ActionCancel  = "cancel"
	ActionConfirm = "confirm"
)

// Operator performs the transitions people make by hand, each in one
// transaction with its audit row (and, for retry, its new River job).
type Operator struct {
	pool       *pgxpool.Pool
	store      *Store
	river      *river.Client[pgx.Tx]
	keyWindows map[string]time.Duration
}

// NewOperator builds an Operator for the tables in schema. keyWindows maps a
// provider to its key window minus margin, for retry's warning.
func NewOperator(pool *pgxpool.Pool, schema string, keyWindows map[string]time.Duration) (*Operator, error) {
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Schema: schema})
	if err != nil {
		return nil, fmt.Errorf("operator: river client: %w", err)
	}
	return &Operator{pool: pool, store: NewStore(schema), river: rc, keyWindows: keyWindows}, nil
}

// Store is the operator's store, for reads.
func (o *Operator) Store() *Store { return o.store }

// ActionOpts describe who acts and why.
type ActionOpts struct {
	Actor  string
	Reason string
	// DryRun reports what would change and changes nothing.
	DryRun bool
	// Force lets retry move a fired effect back to pending.
	Force bool
	// Ref is the provider's reference, for confirm.
	Ref string
}

// Change is what an action did, or would do, to one effect.
type Change struct {
	Effect *Effect `json:"effect"`
	From   State   `json:"from"`
	To     State   `json:"to"`
	// Applied is true when the transition was (or, in a dry run, would be)
	// made; Skipped says why not otherwise.
	Applied bool   `json:"applied"`
	Skipped string `json:"skipped,omitempty"`
	// Warning is something the operator must know about an applied change.
	Warning string `json:"warning,omitempty"`
	// JobInserted is true when retry inserted a new River job (false when a
	// live job existed already).
	JobInserted bool `json:"job_inserted,omitempty"`
}

// Retry moves failed or cancelled effects (and, with Force, fired ones) back
// to pending with a fresh attempt count and key window, and inserts a River
// job for each. The idempotency key stays the same.
func (o *Operator) Retry(ctx context.Context, ids []uuid.UUID, opts ActionOpts) ([]Change, error) {
	allowed := []State{StateFailed, StateCancelled}
	if opts.Force {
		allowed = append(allowed, StateFired)
	}
	return o.each(ctx, ids, opts, ActionRetry, StatePending, allowed, func(ctx context.Context, tx pgx.Tx, e *Effect, ch *Change) (*Effect, error) {
		before, err := o.store.transitionReturning(ctx, tx, ActionRetry, o.store.q.redrive, e.ID, opts.Force)
		if err != nil || before == nil {
			return before, err
		}
		res, err := o.river.InsertManyTx(ctx, tx, []river.InsertManyParams{JobParams(e.ID, e.Provider)})
		if err != nil {
			return nil, fmt.Errorf("insert dispatch job for %s: %w", e.ID, err)
		}
		ch.JobInserted = len(res) == 1 && !res[0].UniqueSkippedAsDuplicate
		return before, nil
	})
}

// Cancel moves pending, fired or failed effects to cancelled: no worker will
// fire them again. A fired effect may have a call in flight.
func (o *Operator) Cancel(ctx context.Context, ids []uuid.UUID, opts ActionOpts) ([]Change, error) {
	return o.each(ctx, ids, opts, ActionCancel, StateCancelled, []State{StatePending, StateFired, StateFailed},
		func(ctx context.Context, tx pgx.Tx, e *Effect, _ *Change) (*Effect, error) {
			return o.store.transitionReturning(ctx, tx, ActionCancel, o.store.q.cancel, e.ID)
		})
}

// Confirm records that effect id was performed, as checked at the provider,
// with the provider's reference.
func (o *Operator) Confirm(ctx context.Context, id uuid.UUID, opts ActionOpts) (Change, error) {
	if opts.Ref == "" {
		return Change{}, errors.New("confirm needs the provider's reference (--ref)")
	}
	chs, err := o.each(ctx, []uuid.UUID{id}, opts, ActionConfirm, StateConfirmed,
		[]State{StatePending, StateFired, StateFailed, StateCancelled},
		func(ctx context.Context, tx pgx.Tx, e *Effect, _ *Change) (*Effect, error) {
			return o.store.transitionReturning(ctx, tx, ActionConfirm, o.store.q.resolveConfirmed, e.ID, opts.Ref)
		})
	if err != nil {
		return Change{}, err
	}
	return chs[0], nil
}

type applyFunc func(ctx context.Context, tx pgx.Tx, e *Effect, ch *Change) (before *Effect, err error)

// each applies one transition per effect, each in its own transaction with
// its audit row. An effect not in an allowed state is skipped, not changed.
func (o *Operator) each(ctx context.Context, ids []uuid.UUID, opts ActionOpts, action string, to State, allowed []State, apply applyFunc) ([]Change, error) {
	if opts.Actor == "" {
		return nil, errors.New("an actor is required for the audit trail")
	}
	out := make([]Change, 0, len(ids))
	for _, id := range ids {
		e, err := o.store.Get(ctx, o.pool, id)
		if err != nil {
			return out, err
		}
		ch := Change{Effect: e, From: e.State, To: to}
		if !stateIn(e.State, allowed) {
			ch.Skipped = fmt.Sprintf("%s effects cannot be %s", e.State, pastTense(action))
			if action == ActionRetry && e.State == StateFired {
				ch.Skipped += " without --force (a call may be in flight; River re-fires it by itself)"
			}
			out = append(out, ch)
			continue
		}
		if action == ActionRetry {
			ch.Warning = o.windowWarning(e)
		}
		if action == ActionCancel && e.State == StateFired {
			ch.Warning = "was fired: a call may be in flight and still reach the provider"
		}
		if opts.DryRun {
			ch.Applied = true
			out = append(out, ch)
			continue
		}
		err = pgx.BeginFunc(ctx, o.pool, func(tx pgx.Tx) error {
			before, err := apply(ctx, tx, e, &ch)
			if err != nil {
				return err
			}
			if before == nil {
				return errConcurrentChange
			}
			ch.Effect, ch.From = before, before.State
			details, _ := json.Marshal(map[string]any{
				"attempts": before.Attempts, "last_error": before.LastError, "first_fired_at": before.FirstFiredAt,
				"provider_ref": opts.Ref, "warning": ch.Warning, "job_inserted": ch.JobInserted,
			})
			_, err = tx.Exec(ctx, o.store.q.insertAudit, id, action, opts.Actor, opts.Reason, string(before.State), string(to), details)
			return err
		})
		switch {
		case errors.Is(err, errConcurrentChange):
			ch.Skipped = "changed state meanwhile; look again"
		case err != nil:
			return out, fmt.Errorf("%s effect %s: %w", action, id, err)
		default:
			ch.Applied = true
		}
		out = append(out, ch)
	}
	return out, nil
}

var errConcurrentChange = errors.New("state changed concurrently")

func (o *Operator) windowWarning(e *Effect) string {
	w := o.keyWindows[e.Provider]
	if w <= 0 || e.FirstFiredAt == nil || time.Since(*e.FirstFiredAt) < w {
		return ""
	}
	return fmt.Sprintf("key window passed: first fired %s ago, %s may no longer recognise the key; check the provider first, this re-fire starts a new window",
		time.Since(*e.FirstFiredAt).Round(time.Minute), e.Provider)
}

func stateIn(s State, set []State) bool {
	for _, x := range set {
		if s == x {
			return true
		}
	}
	return false
}

func pastTense(action string) string {
	switch action {
	case ActionRetry:
		return "retried"
	case ActionCancel:
		return "cancelled"
	default:
		return "confirmed"
	}
}
