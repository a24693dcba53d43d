package outbox

import (
	"errors"
	"fmt"

	"github.com/google/uuid"
)

// ErrInvalid matches every *ValidationError with errors.Is.
var ErrInvalid = errors.New("outbox: invalid input")

// ValidationError reports input rejected before anything was written; the
// caller's transaction is untouched and still usable.
type ValidationError struct {
	// Field names the offending input, for example "effects[1].kind".
	Field string
	// Problem says what is wrong and how to fix it.
	Problem string
}

func (e *ValidationError) Error() string {
	return fmt.Sprintf("outbox: invalid %s: %s", e.Field, e.Problem)
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalid }

// ErrConflict matches every *ConflictError with errors.Is.
var ErrConflict = errors.New("outbox: conflict")

// ConflictError reports an event id, or an effect of an event, that exists
// already with different content. Neither version is silently kept: nothing
// of the rejected call was written, and the caller decides.
type ConflictError struct {
	EventID uuid.UUID
	// Kind is the conflicting effect's kind, or "" when the event itself
	// differs.
	Kind string
	// IDHeld is true when the effect's derived id is held by another
	// event's effect (a row written by hand or another tool): the caller's
	// transaction then holds the failed insert and must be rolled back.
	IDHeld bool
}

func (e *ConflictError) Error() string {
	if e.IDHeld {
		return fmt.Sprintf("outbox: conflict: effect %q of event %s: its id is held by another event's effect", e.Kind, e.EventID)
	}
	if e.Kind == "" {
		return fmt.Sprintf("outbox: conflict: event %s exists with a different type, aggregate or payload", e.EventID)
	}
	return fmt.Sprintf("outbox: conflict: effect %q of event %s exists with a different provider or payload", e.Kind, e.EventID)
}

// Is makes errors.Is(err, ErrConflict) true.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }
