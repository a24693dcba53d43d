package idempotency

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/outboxtype"
)

// Middleware guards handlers with idempotency keys. Build it with New; it
// is safe for concurrent use.
type Middleware struct {
	pool *pgxpool.Pool
	cfg  Config
	q    queries
	// table is the keys' table, part of each key's advisory lock id.
	table string
}

// New validates cfg and returns the middleware. The schema must be
// migrated (migrations.Up, or `outboxd migrate`).
func New(pool *pgxpool.Pool, cfg Config) (*Middleware, error) {
	if pool == nil {
		return nil, errors.New("idempotency: pool is nil")
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Middleware{pool: pool, cfg: cfg, q: newQueries(cfg.table()), table: cfg.table()}, nil
}

type txKey struct{}

// Tx returns the transaction the transactional middleware opened for this
// request: write the domain rows and call outbox.Enqueue on it. Do not
// commit or roll it back (both return an error): the middleware commits
// once, with the stored response, or rolls back on a 5xx or a panic.
// Savepoints (tx.Begin) work as usual.
func Tx(ctx context.Context) (pgx.Tx, bool) {
	tx, ok := ctx.Value(txKey{}).(pgx.Tx)
	return tx, ok
}

// ErrTxOwned is returned by Commit and Rollback of the transaction Tx
// returns.
var ErrTxOwned = errors.New("idempotency: the middleware commits this transaction; return a response instead (a 5xx rolls it back)")

// ownedTx is the request's transaction as the handler sees it.
type ownedTx struct{ pgx.Tx }

func (ownedTx) Commit(context.Context) error   { return ErrTxOwned }
func (ownedTx) Rollback(context.Context) error { return ErrTxOwned }

// Transactional runs next inside a transaction that also claims the key
// and stores the response; see the package documentation.
func (m *Middleware) Transactional(next http.Handler) http.Handler {
	return m.guard(next, m.serveTransactional)
}

func (m *Middleware) serveTransactional(w http.ResponseWriter, r *http.Request, req *request, next http.Handler) {
	ctx := r.Context()
	tx, err := m.pool.Begin(ctx)
	if err != nil {
		m.unavailable(w, "begin", err)
		return
	}
	// Rolls back whatever was not committed: on a refusal, a 5xx, a panic.
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit

	claimed, existing, err := m.claim(ctx, tx, req, time.Time{}, uuid.New())
	switch {
	case isHeld(err):
		m.inFlight(w)
		return
	case err != nil:
		m.unavailable(w, "claim", err)
		return
	case !claimed:
		_ = tx.Rollback(ctx)
		m.answer(ctx, w, req, existing)
		return
	}

	rec := newRecorder()
	m.run(rec, r.WithContext(context.WithValue(ctx, txKey{}, pgx.Tx(ownedTx{tx}))), next, nil)
	status := rec.code()
	if status >= 500 || !m.cfg.StoreStatus(status) {
		_ = tx.Rollback(ctx)
		m.observe(RolledBack)
		rec.send(w)
		return
	}
	if err := m.complete(ctx, tx, req, rec, uuid.Nil); err != nil {
		m.commitFailed(w, err)
		return
	}
	if err := tx.Commit(ctx); err != nil {
		m.commitFailed(w, err)
		return
	}
	m.observe(Executed)
	rec.send(w)
}

// run calls next; after a panic it records the outcome with onPanic (if
// any) and panics again, so the server's own recovery and logging apply.
func (m *Middleware) run(w http.ResponseWriter, r *http.Request, next http.Handler, onPanic func(any)) {
	defer func() {
		if p := recover(); p != nil {
			m.observe(RolledBack)
			if onPanic != nil {
				onPanic(p)
			}
			panic(p)
		}
	}()
	next.ServeHTTP(w, r)
}

// ThreePhase claims the key in a transaction of its own (committed as
// in_progress with a lock deadline of LockTimeout), runs next with no
// transaction of the middleware's and a context cancelled at the deadline,
// then stores the outcome: completed with the response, or failed (a 5xx, a
// panic, a status not stored), which lets a retry run again. A retry after
// the deadline reclaims a key whose request never finished. Use it only
// for handlers that must call something synchronously.
func (m *Middleware) ThreePhase(next http.Handler) http.Handler {
	return m.guard(next, m.serveThreePhase)
}

// guard serves protected requests with serve, after checking the key and
// reading the body; others go to next untouched.
func (m *Middleware) guard(next http.Handler, serve func(http.ResponseWriter, *http.Request, *request, http.Handler)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, ok := m.prepare(w, r)
		if !ok {
			return
		}
		if req == nil {
			next.ServeHTTP(w, r)
			return
		}
		serve(w, r, req, next)
	})
}

func (m *Middleware) serveThreePhase(w http.ResponseWriter, r *http.Request, req *request, next http.Handler) {
	ctx := r.Context()
	token := uuid.New()
	lockedUntil := time.Now().Add(m.cfg.LockTimeout)
	giveUp := time.Now().Add(m.cfg.InFlightWait)
	var existing *row
	for {
		var claimed bool
		err := pgx.BeginFunc(ctx, m.pool, func(tx pgx.Tx) error {
			var err error
			claimed, existing, err = m.claim(ctx, tx, req, lockedUntil, token)
			return err
		})
		if err != nil && !isHeld(err) {
			m.unavailable(w, "claim", err)
			return
		}
		if claimed {
			break
		}
		// Held by a request still running: wait up to InFlightWait.
		if err == nil && (existing.State != stateInProgress || !req.sameAs(existing.Fingerprint, existing.Parts)) {
			m.answer(ctx, w, req, existing)
			return
		}
		if time.Now().After(giveUp) || ctx.Err() != nil {
			m.inFlight(w)
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(min(50*time.Millisecond, time.Until(giveUp))):
		}
	}

	// Phase two: the handler, bounded by the claim's deadline.
	hctx, cancel := context.WithDeadline(ctx, lockedUntil)
	defer cancel()
	rec := newRecorder()
	done := context.WithoutCancel(ctx)
	m.run(rec, r.WithContext(hctx), next, func(p any) {
		m.fail(done, req, token, fmt.Sprintf("the handler panicked: %v", p))
	})

	// Phase three: the outcome.
	status := rec.code()
	if status >= 500 || !m.cfg.StoreStatus(status) {
		m.fail(done, req, token, fmt.Sprintf("HTTP %d, not stored: a retry runs again", status))
		m.observe(RolledBack)
		rec.send(w)
		return
	}
	err := pgx.BeginFunc(done, m.pool, func(tx pgx.Tx) error { return m.complete(done, tx, req, rec, token) })
	if errors.Is(err, errClaimLost) {
		m.cfg.Logger.Warn("idempotency: the claim passed its lock deadline and was taken over; this response was not stored",
			"route", req.route, "method", req.method, "status", status, "lock_timeout", m.cfg.LockTimeout)
	} else if err != nil {
		m.cfg.Logger.Error("idempotency: storing the response failed; a retry runs again", "route", req.route, "error", err)
	}
	m.observe(Executed)
	rec.send(w)
}

var errClaimLost = errors.New("claim lost")

// fail marks a three-phase claim failed, so that a retry runs again.
func (m *Middleware) fail(ctx context.Context, req *request, token uuid.UUID, reason string) {
	if _, err := m.pool.Exec(ctx, m.q.fail, req.scope, req.method, req.route, req.key, token, reason); err != nil {
		m.cfg.Logger.Error("idempotency: marking the key failed did not work; a retry runs again once its lock expires",
			"route", req.route, "error", err)
	}
}

// answer responds to a request whose key someone else holds or completed.
func (m *Middleware) answer(ctx context.Context, w http.ResponseWriter, req *request, existing *row) {
	if !req.sameAs(existing.Fingerprint, existing.Parts) {
		m.mismatch(w, req.differs(existing.Parts))
		return
	}
	if existing.State != stateCompleted {
		m.inFlight(w)
		return
	}
	if m.cfg.Tracer != nil {
		_, span := m.cfg.Tracer.Start(ctx, outboxtype.SpanStart{Name: "idempotency.replay", Attrs: append(req.spanAttrs(),
			outboxtype.Attr{Key: "http.response.status_code", Value: existing.Response.Status})})
		defer span.End(nil)
	}
	existing.Response.replay(w)
	m.observe(Replayed)
}

func (m *Middleware) unavailable(w http.ResponseWriter, what string, err error) {
	m.cfg.Logger.Error("idempotency: "+what+" failed", "error", err)
	w.Header().Set("Retry-After", "1")
	m.refuse(w, http.StatusServiceUnavailable, "idempotency_unavailable",
		"the request could not be checked against its "+m.cfg.Header+"; nothing was done: retry with the same key", nil)
}

func (m *Middleware) commitFailed(w http.ResponseWriter, err error) {
	m.cfg.Logger.Error("idempotency: commit failed; nothing was stored", "error", err)
	m.refuse(w, http.StatusInternalServerError, "idempotency_commit_failed",
		"the request's changes could not be committed, so none was kept: retry with the same key", nil)
}

// isHeld reports a key held by a request still running: its advisory
// lock not released within the wait (55P03).
func isHeld(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03" // lock_not_available
}

// Key states.
const (
	stateInProgress = "in_progress"
	stateCompleted  = "completed"
	stateFailed     = "failed"
)

// row is a stored key as the middleware reads it.
type row struct {
	State       string
	Fingerprint string
	Parts       map[string]string
	Response    stored
}

// claim inserts the key, or takes over one that expired, failed or
// passed its lock deadline; the unique constraint decides between
// concurrent requests. A request holding the key uncommitted holds the
// key's transaction-level advisory lock too: a second request waits for it
// up to InFlightWait, or heldGrace if longer (lock_timeout), and then fails
// with 55P03. Only that wait is bounded: any other lock
// the insert meets (the table's extension, a VACUUM truncating it, a
// migration) is waited out, so a new key is never answered 409.
// Unclaimed, it returns the row that holds the key.
func (m *Middleware) claim(ctx context.Context, tx pgx.Tx, req *request, lockedUntil time.Time, token uuid.UUID) (bool, *row, error) {
	if m.cfg.Tracer == nil {
		return m.claimKey(ctx, tx, req, lockedUntil, token)
	}
	ctx, span := m.cfg.Tracer.Start(ctx, outboxtype.SpanStart{Name: "idempotency.claim", Attrs: req.spanAttrs()})
	claimed, existing, err := m.claimKey(ctx, tx, req, lockedUntil, token)
	spanErr := err
	switch {
	case claimed:
		span.SetAttrs(outboxtype.Attr{Key: "idempotency.outcome", Value: "claimed"})
	case isHeld(err):
		// Held by a request still running (its transaction uncommitted).
		span.SetAttrs(outboxtype.Attr{Key: "idempotency.outcome", Value: "held"}, outboxtype.Attr{Key: "idempotency.held_state", Value: stateInProgress})
		spanErr = nil
	case existing != nil:
		span.SetAttrs(outboxtype.Attr{Key: "idempotency.outcome", Value: "held"}, outboxtype.Attr{Key: "idempotency.held_state", Value: existing.State})
	}
	span.End(spanErr)
	return claimed, existing, err
}

func (m *Middleware) claimKey(ctx context.Context, tx pgx.Tx, req *request, lockedUntil time.Time, token uuid.UUID) (bool, *row, error) {
	var until *time.Time
	if !lockedUntil.IsZero() {
		until = &lockedUntil
	}
	var retention *float64
	if req.retention > 0 {
		s := req.retention.Seconds()
		retention = &s
	}
	parts, err := json.Marshal(req.parts)
	if err != nil {
		return false, nil, err
	}
	args := []any{req.scope, req.method, req.route, req.key, req.fingerprint, parts, token, until, retention}
	for i := range 2 {
		var inserted int64
		if i == 0 {
			inserted, err = m.lockAndInsert(ctx, tx, req, args)
		} else {
			var tag pgconn.CommandTag
			tag, err = tx.Exec(ctx, m.q.insert, args...)
			inserted = tag.RowsAffected()
		}
		if err != nil {
			return false, nil, err
		}
		if inserted == 1 {
			return true, nil, nil
		}
		existing, reclaimable, err := m.load(ctx, tx, req)
		if err != nil {
			return false, nil, err
		}
		if existing == nil { // purged in between: insert again
			continue
		}
		if !reclaimable {
			return false, existing, nil
		}
		tag, err := tx.Exec(ctx, m.q.reclaim, args...)
		if err != nil {
			return false, nil, err
		}
		if tag.RowsAffected() == 1 {
			return true, nil, nil
		}
		// Reclaimed by a concurrent request that committed: look again.
	}
	existing, _, err := m.load(ctx, tx, req)
	if err == nil && existing == nil {
		err = errors.New("the key row kept changing")
	}
	return false, existing, err
}

// heldGrace is how long a request waits for a key's lock when
// InFlightWait is shorter: a connection that just died (a crash before the
// commit) lets go of its key a moment after its client saw the error, and
// the client's retry must not be told the key is still in use.
const heldGrace = 50 * time.Millisecond

// lockAndInsert takes the key's transaction-level advisory lock, waiting
// for it at most InFlightWait, or heldGrace if that is longer
// (sqlKeyLockID), and inserts the key, in one round trip; it returns the
// rows inserted (0: the key exists). A lock not granted in time fails the
// batch with 55P03 before the insert runs.
func (m *Middleware) lockAndInsert(ctx context.Context, tx pgx.Tx, req *request, args []any) (int64, error) {
	b := &pgx.Batch{}
	b.Queue(fmt.Sprintf("SET LOCAL lock_timeout = '%dms'", max(heldGrace, m.cfg.InFlightWait).Milliseconds()))
	b.Queue(sqlLockKey, m.table, req.scope, req.method, req.route, req.key)
	b.Queue("SET LOCAL lock_timeout = DEFAULT")
	var inserted int64
	b.Queue(m.q.insert, args...).Exec(func(tag pgconn.CommandTag) error { inserted = tag.RowsAffected(); return nil })
	return inserted, tx.SendBatch(ctx, b).Close()
}

func (m *Middleware) load(ctx context.Context, tx pgx.Tx, req *request) (*row, bool, error) {
	var (
		r           row
		parts       []byte
		status      *int
		headers     []byte
		reclaimable bool
	)
	err := tx.QueryRow(ctx, m.q.load, req.scope, req.method, req.route, req.key).
		Scan(&r.State, &r.Fingerprint, &parts, &status, &headers, &r.Response.Body, &reclaimable)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	if err := json.Unmarshal(parts, &r.Parts); err != nil {
		return nil, false, fmt.Errorf("fingerprint parts: %w", err)
	}
	if status != nil {
		r.Response.Status = *status
	}
	if len(headers) > 0 {
		if err := json.Unmarshal(headers, &r.Response.Headers); err != nil {
			return nil, false, fmt.Errorf("stored headers: %w", err)
		}
	}
	return &r, reclaimable, nil
}

// complete stores the response of a claimed key. For a three-phase claim
// (token set) only if the claim is still this request's.
func (m *Middleware) complete(ctx context.Context, tx pgx.Tx, req *request, rec *recorder, token uuid.UUID) error {
	headers, err := json.Marshal(m.selectHeaders(rec.header))
	if err != nil {
		return err
	}
	var tok *uuid.UUID
	if token != uuid.Nil {
		tok = &token
	}
	tag, err := tx.Exec(ctx, m.q.complete, req.scope, req.method, req.route, req.key, tok, rec.code(), headers, rec.body.Bytes())
	if err != nil {
		return err
	}
	if tag.RowsAffected() != 1 {
		return errClaimLost
	}
	return nil
}

type queries struct {
	insert, reclaim, load, complete, fail string
}

func newQueries(table string) queries {
	r := strings.NewReplacer("/*table*/", table)
	return queries{
		insert:   r.Replace(sqlInsert),
		reclaim:  r.Replace(sqlReclaim),
		load:     r.Replace(sqlLoad),
		complete: r.Replace(sqlComplete),
		fail:     r.Replace(sqlFail),
	}
}

// A key may be taken over when it expired, failed, or (three-phase) its
// claim passed its lock deadline.
const reclaimableCond = `(k.expires_at <= now() OR k.state = 'failed' OR (k.state = 'in_progress' AND k.locked_until < now()))`

const (
	// sqlLockKey locks a key for its transaction, on a
	// 64-bit hash of the table ($1: two schemas' middlewares never wait
	// for each other) and the key's scope, method, route and key,
	// separated by 0x1f so that ("a", "bc") and ("ab", "c") differ; the
	// prefix sets them apart from the ordering keys' locks and from an
	// application's own.
	sqlLockKey   = `SELECT pg_advisory_xact_lock(` + sqlKeyLockID + `)`
	sqlKeyLockID = `hashtextextended('outboxd idempotency ' || $1 || E'\x1f' || $2 || E'\x1f' || $3 || E'\x1f' || $4 || E'\x1f' || $5, 0)`

	sqlInsert = `
INSERT INTO /*table*/ (scope, method, route, key, state, fingerprint, fingerprint_parts, claim_token, locked_until, expires_at)
VALUES ($1, $2, $3, $4, 'in_progress', $5, $6, $7, $8, now() + make_interval(secs => $9::float8))
ON CONFLICT ON CONSTRAINT idempotency_keys_scope_key DO NOTHING`

	sqlReclaim = `
UPDATE /*table*/ AS k
SET state = 'in_progress', fingerprint = $5, fingerprint_parts = $6, claim_token = $7, locked_until = $8,
	expires_at = now() + make_interval(secs => $9::float8), status = NULL, response_headers = NULL, response_body = NULL,
	error = '', created_at = now(), updated_at = now()
WHERE scope = $1 AND method = $2 AND route = $3 AND key = $4 AND ` + reclaimableCond

	sqlLoad = `
SELECT state, fingerprint, fingerprint_parts, status, response_headers, response_body, ` + reclaimableCond + `
FROM /*table*/ AS k WHERE scope = $1 AND method = $2 AND route = $3 AND key = $4`

	sqlComplete = `
UPDATE /*table*/
SET state = 'completed', locked_until = NULL, status = $6, response_headers = $7, response_body = $8, updated_at = now()
WHERE scope = $1 AND method = $2 AND route = $3 AND key = $4 AND state = 'in_progress'
	AND ($5::uuid IS NULL OR claim_token = $5)`

	sqlFail = `
UPDATE /*table*/
SET state = 'failed', locked_until = NULL, error = $6, updated_at = now()
WHERE scope = $1 AND method = $2 AND route = $3 AND key = $4 AND state = 'in_progress' AND claim_token = $5`
)
