package engine

import "context"

// SetBeforeConfirm injects a failure point between the provider's
// acknowledgement and the confirming transaction.
func SetBeforeConfirm(d *Dispatcher, f func(ctx context.Context) error) { d.worker.beforeConfirm = f }

// ConfirmFailedNote is confirmFailedNote, for tests.
var ConfirmFailedNote = confirmFailedNote
