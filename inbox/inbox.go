// Package inbox deduplicates incoming messages (webhooks, provider events)
// on Postgres: the consumer side of effectively-once. Senders deliver at
// least once; Claim records a message id in the caller's transaction and
// reports whether it is new, with the primary key as the arbiter, so the
// work a message causes and the record that it was done commit together.
//
// Handler does the whole receiving side of a webhook: verify the signature
// (Verifier), claim every message id of the delivery, run the
// application's function for the new ones in the same transaction, commit.
// A redelivery answers 2xx without running anything; a failure answers 5xx
// with nothing recorded, so the sender retries; a bad signature answers 400
// with nothing recorded.
//
// A message id is remembered for the source's retention, which must be no
// shorter than the sender's retry window (Stripe retries for up to 3 days),
// so that a late redelivery is still recognised; outboxd's dispatcher
// purges older ids.
package inbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outboxd/outboxd/pgschema"
)

// DefaultRetention keeps message ids 7 days: longer than Stripe's (3 days),
// SendGrid's (24 hours) and Svix's (about 5 days) retry windows.
const DefaultRetention = 7 * 24 * time.Hour

// DefaultMaxBodyBytes bounds a delivery's body.
const DefaultMaxBodyBytes = 5 << 20

// Config configures an Inbox.
type Config struct {
	// Schema holds outboxd's tables ("" uses search_path).
	Schema string
	// Retention is how long a message id is remembered, per source;
	// sources not listed keep DefaultRetention.
	Retention map[string]time.Duration
	// MaxBodyBytes bounds a delivery read by Handler (413 past it).
	// Default 5 MiB.
	MaxBodyBytes int64
	// Logger reports refused deliveries and failures. Default slog.Default().
	Logger *slog.Logger
	// Trace, if set, is called at each claim with its context, source
	// and message id; it returns the context the claim runs in and a
	// function told how it ended (a duplicate, an error). Package
	// outbox/outboxtrace's InboxTrace makes each claim a span
	// ("inbox.claim") for OpenTelemetry.
	Trace func(ctx context.Context, source, messageID string) (context.Context, func(duplicate bool, err error))
}

// Inbox records which messages were processed.
type Inbox struct {
	pool  *pgxpool.Pool
	cfg   Config
	claim string
}

// New validates cfg and returns the inbox.
func New(pool *pgxpool.Pool, cfg Config) (*Inbox, error) {
	if pool == nil {
		return nil, errors.New("inbox: pool is nil")
	}
	if err := pgschema.Check(cfg.Schema); err != nil {
		return nil, fmt.Errorf("inbox: Config.Schema: %w", err)
	}
	for _, src := range slices.Sorted(maps.Keys(cfg.Retention)) {
		if d := cfg.Retention[src]; d <= 0 {
			return nil, fmt.Errorf("inbox: Retention[%q] %s: must be positive", src, d)
		}
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Inbox{pool: pool, cfg: cfg, claim: `INSERT INTO ` + pgschema.Table(cfg.Schema, "inbox_messages") + ` (source, message_id, expires_at)
		VALUES ($1, $2, now() + make_interval(secs => $3::float8)) ON CONFLICT DO NOTHING`}, nil
}

// Retention is how long ids of source are remembered.
func (ib *Inbox) Retention(source string) time.Duration {
	if d, ok := ib.cfg.Retention[source]; ok {
		return d
	}
	return DefaultRetention
}

// Claim records messageID of source in tx and reports whether it is new. A
// concurrent claim of the same id waits for tx's outcome: if tx commits,
// the other reports false. Commit tx with the work the message caused.
func (ib *Inbox) Claim(ctx context.Context, tx pgx.Tx, source, messageID string) (bool, error) {
	if source == "" || messageID == "" {
		return false, fmt.Errorf("inbox: claim needs a source and a message id (got %q, %q)", source, messageID)
	}
	var end func(bool, error)
	if ib.cfg.Trace != nil {
		ctx, end = ib.cfg.Trace(ctx, source, messageID)
	}
	tag, err := tx.Exec(ctx, ib.claim, source, messageID, ib.Retention(source).Seconds())
	if err != nil {
		err = fmt.Errorf("inbox: claim %s message %s: %w", source, messageID, err)
	}
	isNew := err == nil && tag.RowsAffected() == 1
	if end != nil {
		end(err == nil && !isNew, err)
	}
	return isNew, err
}

// Message is one message of a verified delivery. A delivery may carry
// several (SendGrid batches its events).
type Message struct {
	// ID is the sender's id for the message, the same on every
	// redelivery: Stripe's event id, SendGrid's sg_event_id, the
	// webhook-id of Standard Webhooks.
	ID string
	// Type is the sender's event type, when it has one.
	Type string
	// Body is the message as sent (one event of a batch).
	Body []byte
}

// Verifier checks a delivery's signature and splits it into messages. An
// error means the delivery is not authentic or not understood: Handler
// answers 400 and records nothing.
type Verifier interface {
	Verify(header http.Header, body []byte) ([]Message, error)
	// RetryWindow is how long the sender retries a delivery; the source's
	// retention must not be shorter.
	RetryWindow() time.Duration
}

// Func processes one new message inside the delivery's transaction. An
// error rolls everything back, and Handler answers 500 so that the sender
// retries.
type Func func(ctx context.Context, tx pgx.Tx, m Message) error

// Handler receives deliveries from one source: verify, claim each message,
// run fn for the new ones, commit, answer 200. It returns an error when the
// source's retention is shorter than the verifier's retry window.
func (ib *Inbox) Handler(source string, v Verifier, fn Func) (http.Handler, error) {
	return ib.handler(source, v, func(ctx context.Context, msgs []Message) (fresh, dup int, err error) {
		err = pgx.BeginFunc(ctx, ib.pool, func(tx pgx.Tx) error {
			fresh, dup = 0, 0
			for _, m := range msgs {
				isNew, err := ib.handle(ctx, tx, source, m, fn)
				if err != nil {
					return err
				}
				if isNew {
					fresh++
				} else {
					dup++
				}
			}
			return nil
		})
		return fresh, dup, err
	})
}

// Route picks, for a verified message, the inbox (the database) that
// claims it and the Func that handles it in that inbox's transaction.
type Route func(ctx context.Context, m Message) (*Inbox, Func, error)

// RoutedHandler is Handler for a sender whose messages belong to several
// databases (an application's shards, one provider account for all):
// each message is claimed and handled in a transaction of the inbox route
// picks, one transaction per message, so that a redelivery is a duplicate
// in whichever database its message went to. When one fails it answers
// 500 (the messages before it stay committed; the sender's retry finds
// them as duplicates). Every inbox route picks should keep the source as
// long as ib does: ib's retention is the one checked against the
// sender's retry window.
func (ib *Inbox) RoutedHandler(source string, v Verifier, route Route) (http.Handler, error) {
	return ib.handler(source, v, func(ctx context.Context, msgs []Message) (fresh, dup int, err error) {
		for _, m := range msgs {
			owner, fn, err := route(ctx, m)
			if err != nil {
				return fresh, dup, fmt.Errorf("message %s (%s): %w", m.ID, m.Type, err)
			}
			var isNew bool
			if err := pgx.BeginFunc(ctx, owner.pool, func(tx pgx.Tx) error {
				isNew, err = owner.handle(ctx, tx, source, m, fn)
				return err
			}); err != nil {
				return fresh, dup, err
			}
			if isNew {
				fresh++
			} else {
				dup++
			}
		}
		return fresh, dup, nil
	})
}

// handle claims m in tx and, when it is new, runs fn for it.
func (ib *Inbox) handle(ctx context.Context, tx pgx.Tx, source string, m Message, fn Func) (isNew bool, err error) {
	if isNew, err = ib.Claim(ctx, tx, source, m.ID); err != nil || !isNew {
		return isNew, err
	}
	if err := fn(ctx, tx, m); err != nil {
		return true, fmt.Errorf("message %s (%s): %w", m.ID, m.Type, err)
	}
	return true, nil
}

// handler serves deliveries from source: POST only, the body bounded,
// verified, then process records the messages; 200 with the counts, or
// 500 so that the sender retries.
func (ib *Inbox) handler(source string, v Verifier, process func(context.Context, []Message) (fresh, dup int, err error)) (http.Handler, error) {
	if ret := ib.Retention(source); ret < v.RetryWindow() {
		return nil, fmt.Errorf("inbox: retention of %s (%s) is shorter than the sender's retry window (%s): a late redelivery would run again",
			source, ret, v.RetryWindow())
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "POST only", http.StatusMethodNotAllowed)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, ib.cfg.MaxBodyBytes))
		if err != nil {
			http.Error(w, "body too large or unreadable", http.StatusRequestEntityTooLarge)
			return
		}
		msgs, err := v.Verify(r.Header, body)
		if err != nil {
			ib.cfg.Logger.Warn("inbox: delivery refused", "source", source, "error", err)
			http.Error(w, "signature verification failed: "+err.Error(), http.StatusBadRequest)
			return
		}
		fresh, dup, err := process(r.Context(), msgs)
		if err != nil {
			ib.cfg.Logger.Error("inbox: processing failed; the sender will retry", "source", source, "error", err)
			http.Error(w, "processing failed; retry", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"processed": %d, "duplicates": %d}`+"\n", fresh, dup)
	}), nil
}
