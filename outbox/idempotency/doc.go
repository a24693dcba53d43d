// Package idempotency is net/http middleware for the Idempotency-Key
// header, on Postgres: a client that retries a mutating request after a
// timeout gets the first answer back, not a second order. With outboxd's
// outbox the whole path a request takes is effectively once: edge key,
// domain transaction, event id, effect key.
//
// Two modes:
//
//   - Transactional (the default to reach for): the middleware opens a
//     transaction, claims the key in it, hands it to the handler (Tx), and
//     stores the handler's response in the key's row before one commit. The
//     handler writes its domain rows and calls outbox.Enqueue on that same
//     transaction, so a crash at any point leaves everything (order, event,
//     effects, stored response) or nothing. External calls belong in the
//     outbox's effects, not in the handler.
//
//   - ThreePhase, for a handler that must call something synchronously: the
//     claim commits first as in_progress with a lock deadline, the handler
//     runs outside any transaction of the middleware's, and its outcome is
//     stored afterwards (completed, or failed so that a retry runs again). A
//     claim whose deadline passed can be reclaimed by a retry. Prefer the
//     transactional mode with outbox effects: a crash after the external call
//     and before the outcome is stored lets a retry call again.
//
// A key is scoped by the caller (Config.Scope), the method and the route;
// the table's unique constraint decides which of two requests runs. The
// same key with a different request (method, path, query, body, selected
// headers) answers 422 and never the old response. A 5xx, a panic or a failed commit
// stores nothing, so the client's retry runs the handler again. Keys expire
// after Config.Retention (24h by default; Forever for money movement); an
// expired key is new again, and outboxd's dispatcher purges expired keys.
package idempotency
