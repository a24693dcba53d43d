package idempotency

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outboxd/outboxd/pgschema"
)

// Key is a stored idempotency key as an operator sees it (outboxctl keys).
type Key struct {
	ID     uuid.UUID `json:"id"`
	Scope  string    `json:"scope"`
	Method string    `json:"method"`
	Route  string    `json:"route"`
	Key    string    `json:"key"`
	// State is in_progress, completed or failed.
	State       string     `json:"state"`
	Status      *int       `json:"status,omitempty"`
	Error       string     `json:"error,omitempty"`
	BodyBytes   int        `json:"body_bytes"`
	Fingerprint string     `json:"fingerprint"`
	CreatedAt   time.Time  `json:"created_at"`
	UpdatedAt   time.Time  `json:"updated_at"`
	LockedUntil *time.Time `json:"locked_until,omitempty"`
	// ExpiresAt is nil for a key kept forever.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// AuditEntry is one operator action on a key.
type AuditEntry struct {
	Action    string    `json:"action"`
	Actor     string    `json:"actor"`
	Reason    string    `json:"reason"`
	FromState string    `json:"from_state"`
	ToState   string    `json:"to_state"`
	CreatedAt time.Time `json:"created_at"`
}

// Filter selects keys for Keys.List; zero fields match everything.
type Filter struct {
	State, Scope, Route, Key string
	// After continues a listing after this id (keyset pagination, newest
	// first).
	After *uuid.UUID
	Limit int
}

// Keys is the operator's view of stored keys.
type Keys struct {
	pool  *pgxpool.Pool
	table string
	audit string
}

// NewKeys returns the operator API over the keys in schema ("" uses
// search_path).
func NewKeys(pool *pgxpool.Pool, schema string) (*Keys, error) {
	cfg, err := Config{Schema: schema, Unscoped: true}.withDefaults() // only the table names are used
	if err != nil {
		return nil, err
	}
	return &Keys{pool: pool, table: cfg.table(), audit: pgschema.Table(schema, "idempotency_key_audit")}, nil
}

const keyColumns = `id, scope, method, route, key, state, status, error, coalesce(octet_length(response_body), 0),
	fingerprint, created_at, updated_at, locked_until, expires_at`

func scanKey(r pgx.Row) (*Key, error) {
	var k Key
	err := r.Scan(&k.ID, &k.Scope, &k.Method, &k.Route, &k.Key, &k.State, &k.Status, &k.Error, &k.BodyBytes,
		&k.Fingerprint, &k.CreatedAt, &k.UpdatedAt, &k.LockedUntil, &k.ExpiresAt)
	return &k, err
}

// States returns the states a key can be in, for Filter.State.
func States() []string { return []string{stateInProgress, stateCompleted, stateFailed} }

// List returns keys matching f, newest first.
func (k *Keys) List(ctx context.Context, f Filter) ([]*Key, error) {
	if f.State != "" && !slices.Contains(States(), f.State) {
		return nil, fmt.Errorf("state %q: use one of %s", f.State, strings.Join(States(), ", "))
	}
	if f.Limit <= 0 {
		f.Limit = 50
	}
	var after any
	if f.After != nil {
		after = *f.After
	}
	rows, err := k.pool.Query(ctx, `SELECT `+keyColumns+` FROM `+k.table+`
		WHERE ($1 = '' OR state = $1) AND ($2 = '' OR scope = $2) AND ($3 = '' OR route = $3) AND ($4 = '' OR key = $4)
		AND ($5::uuid IS NULL OR (created_at, id) < (SELECT created_at, id FROM `+k.table+` WHERE id = $5))
		ORDER BY created_at DESC, id DESC LIMIT $6`, f.State, f.Scope, f.Route, f.Key, after, f.Limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (*Key, error) { return scanKey(r) })
}

// ErrNotFound reports a key id that is not stored (never, or purged).
var ErrNotFound = errors.New("no such idempotency key (never stored, or expired and purged)")

// Get returns one key with its audit trail.
func (k *Keys) Get(ctx context.Context, id uuid.UUID) (*Key, []AuditEntry, error) {
	key, err := scanKey(k.pool.QueryRow(ctx, `SELECT `+keyColumns+` FROM `+k.table+` WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil, ErrNotFound
	}
	if err != nil {
		return nil, nil, err
	}
	rows, err := k.pool.Query(ctx, `SELECT action, actor, reason, from_state, to_state, created_at FROM `+k.audit+`
		WHERE key_id = $1 ORDER BY id`, id)
	if err != nil {
		return nil, nil, err
	}
	audit, err := pgx.CollectRows(rows, pgx.RowToStructByPos[AuditEntry])
	return key, audit, err
}

// CompleteOpts are the response an operator records with Complete, and why.
type CompleteOpts struct {
	Actor, Reason string
	// Status is the HTTP status retries will receive: below 500, as the
	// middleware never stores a 5xx.
	Status int
	// Headers and Body are the rest of the response retries receive.
	Headers http.Header
	Body    []byte
	// Force completes a key whose lock has not expired: its request may
	// still be running, and its own outcome is then lost.
	Force bool
	// RenewFor keeps the key this much longer from now. A key past its
	// retention is refused without it: the next request with it would
	// find no stored response once the key is removed, and run the
	// handler again.
	RenewFor time.Duration
}

// replayRefused are headers a completed key's stored response may not
// carry: replays would set them on every retry (cookies, hop-by-hop
// headers, security and cross-origin policy).
var replayRefused = []string{"Set-Cookie", "Set-Cookie2", "Connection", "Keep-Alive", "Proxy-Connection", "Transfer-Encoding",
	"Te", "Trailer", "Upgrade", "Content-Length", "Strict-Transport-Security", "Content-Security-Policy",
	"Access-Control-Allow-Origin", "Access-Control-Allow-Credentials", "Access-Control-Allow-Headers", "Access-Control-Allow-Methods",
	"Access-Control-Expose-Headers", "WWW-Authenticate", "Proxy-Authenticate", "Alt-Svc", "Clear-Site-Data"}

// MaxCompleteBody bounds the response body Complete stores.
const MaxCompleteBody = 1 << 20

// OptionError is a request to the key store refused until one of its
// options is given or changed: Option names the field of CompleteOpts or
// ReleaseOpts (Reason, Actor, Force, RenewFor), for the caller to name it
// as its users set it (a flag, a form's field).
type OptionError struct {
	Option string
	Msg    string
}

func (e *OptionError) Error() string { return e.Msg + " (" + e.Option + ")" }

// Complete records, for an in_progress or failed key, the response of a
// request that did succeed although the middleware never stored it (a
// crash between the handler's commit and the response's, in three-phase
// mode): retries with the key then get that response, and the handler does
// not run again. It audits who did it and why. Without Force it refuses a
// key whose lock deadline has not passed.
func (k *Keys) Complete(ctx context.Context, id uuid.UUID, o CompleteOpts) (*Key, error) {
	switch {
	case strings.TrimSpace(o.Reason) == "":
		return nil, &OptionError{Option: "Reason", Msg: "a reason is required: say how you know the request succeeded"}
	case o.Actor == "":
		return nil, &OptionError{Option: "Actor", Msg: "an actor is required"}
	case o.Status < 100 || o.Status >= 500:
		return nil, fmt.Errorf("status %d: give the status the request answered, 100 to 499 (a 5xx is never stored: retries run again)", o.Status)
	case len(o.Body) > MaxCompleteBody:
		return nil, fmt.Errorf("body of %d bytes, over the limit of %d", len(o.Body), MaxCompleteBody)
	case o.RenewFor < 0:
		return nil, fmt.Errorf("renew for %s: give a positive duration", o.RenewFor)
	}
	for name := range o.Headers {
		for _, refused := range replayRefused {
			if strings.EqualFold(name, refused) {
				return nil, fmt.Errorf("header %s: a stored response may not set it (every replay would); leave it out", name)
			}
		}
	}
	headers, err := json.Marshal(o.Headers)
	if err != nil {
		return nil, err
	}
	var out *Key
	err = pgx.BeginFunc(ctx, k.pool, func(tx pgx.Tx) error {
		key, err := scanKey(tx.QueryRow(ctx, `SELECT `+keyColumns+` FROM `+k.table+` WHERE id = $1 FOR UPDATE`, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		if key.State == stateCompleted {
			return fmt.Errorf("key %s is completed already: its stored response (%s) is what retries get", id, statusText(key.Status))
		}
		if !o.Force && key.LockedUntil != nil && key.LockedUntil.After(time.Now()) {
			return &OptionError{Option: "Force", Msg: fmt.Sprintf("key %s is locked until %s: its request may still be running and store its own response; wait, or force it",
				id, key.LockedUntil.UTC().Format(time.RFC3339))}
		}
		if o.RenewFor == 0 && key.ExpiresAt != nil && !key.ExpiresAt.After(time.Now()) {
			return &OptionError{Option: "RenewFor", Msg: fmt.Sprintf("key %s is past its retention (it expired at %s): it is removed at the next cleanup, and a retry then runs the handler again; "+
				"to keep the response for retries, renew it for a while (24h, say)", id, key.ExpiresAt.UTC().Format(time.RFC3339))}
		}
		var renew *time.Time
		if o.RenewFor > 0 {
			t := time.Now().Add(o.RenewFor)
			renew = &t
		}
		if err := tx.QueryRow(ctx, `UPDATE `+k.table+` SET state = 'completed', locked_until = NULL, error = '',
			status = $2, response_headers = $3, response_body = $4, expires_at = coalesce($5, expires_at), updated_at = now()
			WHERE id = $1 RETURNING expires_at`, id, o.Status, headers, o.Body, renew).Scan(&key.ExpiresAt); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+k.audit+` (key_id, action, actor, reason, from_state, to_state)
			VALUES ($1, 'complete', $2, $3, $4, 'completed')`, id, o.Actor, o.Reason, key.State); err != nil {
			return err
		}
		status := o.Status
		key.State, key.Error, key.LockedUntil, key.Status, key.BodyBytes = stateCompleted, "", nil, &status, len(o.Body)
		out = key
		return nil
	})
	return out, err
}

func statusText(s *int) string {
	if s == nil {
		return "no status"
	}
	return fmt.Sprintf("HTTP %d", *s)
}

// ReleaseOpts are the operator's reasons for Release.
type ReleaseOpts struct {
	Actor, Reason string
	// Force releases a key whose lock has not expired: its request may
	// still be running, and a retry then runs the handler a second time.
	Force bool
}

// Release marks an in_progress key failed, so that the next request with
// it runs the handler again, and audits who did it and why. Without Force
// it refuses a key whose lock deadline has not passed.
func (k *Keys) Release(ctx context.Context, id uuid.UUID, o ReleaseOpts) (*Key, error) {
	if strings.TrimSpace(o.Reason) == "" {
		return nil, &OptionError{Option: "Reason", Msg: "a reason is required: say why the key is released"}
	}
	if o.Actor == "" {
		return nil, &OptionError{Option: "Actor", Msg: "an actor is required"}
	}
	var out *Key
	err := pgx.BeginFunc(ctx, k.pool, func(tx pgx.Tx) error {
		key, err := scanKey(tx.QueryRow(ctx, `SELECT `+keyColumns+` FROM `+k.table+` WHERE id = $1 FOR UPDATE`, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		if key.State != stateInProgress {
			return fmt.Errorf("key %s is %s, not in_progress: only a stuck claim can be released", id, key.State)
		}
		if !o.Force && key.LockedUntil != nil && key.LockedUntil.After(time.Now()) {
			return &OptionError{Option: "Force", Msg: fmt.Sprintf("key %s is locked until %s: its request may still be running, and releasing it lets a retry run the handler again; wait, or force it",
				id, key.LockedUntil.UTC().Format(time.RFC3339))}
		}
		msg := fmt.Sprintf("released by %s: %s", o.Actor, o.Reason)
		if _, err := tx.Exec(ctx, `UPDATE `+k.table+` SET state = 'failed', locked_until = NULL, error = $2, updated_at = now() WHERE id = $1`, id, msg); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+k.audit+` (key_id, action, actor, reason, from_state, to_state)
			VALUES ($1, 'release', $2, $3, $4, 'failed')`, id, o.Actor, o.Reason, key.State); err != nil {
			return err
		}
		key.State, key.Error, key.LockedUntil = stateFailed, msg, nil
		out = key
		return nil
	})
	return out, err
}
