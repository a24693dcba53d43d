package outbox

import (
	"context"
	"errors"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/internal/store"
	"github.com/outboxd/outboxd/outboxtype"
)

// CancelResult is what Cancel found.
type CancelResult string

// The results of Cancel.
const (
	// Cancelled: the effect will not fire; cancelled by this call, or
	// before it.
	Cancelled CancelResult = "cancelled"
	// AlreadyFired: the effect fired at least once (a request with its key
	// may have reached the provider), or was confirmed; it is not
	// cancelled. What it did must be undone, if at all, at the provider.
	AlreadyFired CancelResult = "already_fired"
	// Unknown: the event has no effect of that kind (never enqueued, or
	// purged after the retention).
	Unknown CancelResult = "unknown"
)

// CancelActor is the actor the audit trail names for Cancel.
const CancelActor = "application"

// Cancel takes back, in the caller's transaction, the effect of kind of
// event eventID if it has never fired: typically one scheduled with
// Effect.NotBefore ("remind in 24 h unless paid"), cancelled by the
// transaction that records the payment. It commits or rolls back with tx;
// it waits for a dispatcher claiming the effect at that moment, so the
// effect is either cancelled or fired, never both. reason goes to the
// effect's audit trail (outboxctl show).
func (o *Outbox) Cancel(ctx context.Context, tx pgx.Tx, eventID uuid.UUID, kind, reason string) (CancelResult, error) {
	switch {
	case tx == nil:
		return "", &ValidationError{Field: "tx", Problem: "nil: pass the application's open pgx.Tx"}
	case eventID == uuid.Nil:
		return "", &ValidationError{Field: "event.id", Problem: "required: the id the effect was enqueued with"}
	case kind == "":
		return "", &ValidationError{Field: "kind", Problem: "required: the kind the effect was enqueued with"}
	case reason == "":
		return "", &ValidationError{Field: "reason", Problem: "required: why, for the effect's audit trail"}
	}
	from, fired, cancelled, err := o.store.CancelUnfired(ctx, tx, eventID, kind, CancelActor, reason)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return Unknown, nil
	case err != nil:
		return "", err
	case cancelled, from == outboxtype.StateCancelled && !fired:
		return Cancelled, nil
	default:
		return AlreadyFired, nil
	}
}
