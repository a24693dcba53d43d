// Package outbox records domain events and the side effects they imply,
// inside the application's own Postgres transaction.
//
// Enqueue writes an outbox_events row, one side_effects row per effect and
// one River job per new effect, all through the caller's pgx.Tx: they commit
// or roll back with the caller's own writes. outboxd's workers then fire each
// effect with an idempotency key derived from the event id and the kind, so
// retries never become second actions.
//
// Enqueue is safe to repeat. The same event id with the same content is a
// no-op reported as a duplicate (no second job); the same id with different
// content is rejected with ErrConflict. Derive event ids from the command
// being handled with EventID so that a retried command replays instead of
// creating a new event.
package outbox
