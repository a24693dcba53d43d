package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/outboxd/outboxd/internal/store"
	"github.com/riverqueue/river"
)

// Enqueuer is the one home of the enqueue protocol: a new event and its
// effects in one statement; a replay compared inside a savepoint so that a
// conflict leaves the caller's transaction as it was, and compared again
// when a racing transaction inserted some of the effects meanwhile; the
// conflict rule; then the River jobs in the transaction, or the intake
// (and, when asked, a NOTIFY that wakes the dispatchers). Package outbox
// validates the input and hands it here; outboxd_enqueue (SQL) follows the
// same protocol, checked against it by the outbox package's tests.
type Enqueuer struct {
	store *store.Store
	// river inserts the jobs in the transaction; nil when the effects go
	// to the intake instead.
	river *river.Client[pgx.Tx]
	// carry lets a new event carry its effects in its own row, for the
	// dispatchers to write their rows (outbox.EffectsByDispatcher).
	carry  bool
	notify bool
	schema string
	// lastNotify is when this process last woke the dispatchers in a
	// caller's transaction, lastWake after one (unix ns).
	lastNotify, lastWake atomic.Int64
}

// NewEnqueuer returns an Enqueuer for schema: with a River client, the
// jobs are inserted in the caller's transaction; without one, the effects
// are queued in the intake, or with carry (and no ordering key or tenant)
// carried in their new event's row for the dispatchers to write out, and
// notify wakes the dispatchers (at most every millisecond per process).
func NewEnqueuer(schema string, rc *river.Client[pgx.Tx], carry, notify bool) *Enqueuer {
	return &Enqueuer{store: store.NewStore(schema), river: rc, carry: carry && rc == nil, notify: notify, schema: schema}
}

// EnqueuedEffect is what happened to one effect of an Enqueue call.
type EnqueuedEffect struct {
	ID        uuid.UUID
	Kind      string
	Key       string
	Duplicate bool
}

// Enqueued is what an Enqueue call did.
type Enqueued struct {
	EventExisted bool
	Effects      []EnqueuedEffect
}

// EnqueueConflict is the conflict rule's answer: what is stored under the
// event's id (Kind ""), or its effect of Kind, differs from the call's; or
// the effect's derived id is held by another event's effect (IDHeld).
type EnqueueConflict struct {
	Kind   string
	IDHeld bool
}

func (c *EnqueueConflict) Error() string {
	return fmt.Sprintf("enqueue conflict (kind %q, id held %t)", c.Kind, c.IDHeld)
}

// Enqueue writes ev and effects (validated) through tx. Each effect's id
// and key are derived here, once, when the caller left them empty.
func (q *Enqueuer) Enqueue(ctx context.Context, tx pgx.Tx, ev store.NewEvent, effects []store.NewEffect) (*Enqueued, error) {
	effects, err := q.fanOut(ctx, tx, ev, effects)
	if err != nil {
		return nil, err
	}
	res := &Enqueued{Effects: make([]EnqueuedEffect, len(effects))}
	for i := range effects {
		e := &effects[i]
		if e.ID == uuid.Nil {
			e.ID, e.Key = store.EffectIDAndKey(ev.ID, e.Kind)
		}
		res.Effects[i] = EnqueuedEffect{ID: e.ID, Kind: e.Kind, Key: e.Key, Duplicate: true}
	}
	if err := q.lockOrderingKeys(ctx, tx, effects); err != nil {
		return nil, err
	}
	if len(effects) > 0 {
		// The common case, a new event: event and effects in one statement.
		inserted, err := q.insertNew(ctx, tx, ev, effects)
		if err != nil {
			if kind, ok := heldID(err, res.Effects); ok {
				return nil, &EnqueueConflict{Kind: kind, IDHeld: true}
			}
			return nil, err
		}
		if inserted {
			all := make(map[uuid.UUID]bool, len(effects))
			for _, e := range effects {
				all[e.ID] = true
			}
			return res, q.insertJobs(ctx, tx, effects, all, res)
		}
	}
	inserted, same, carried, err := q.store.InsertEvent(ctx, tx, ev)
	if err != nil {
		return nil, err
	}
	if !inserted && !same {
		return nil, &EnqueueConflict{}
	}
	res.EventExisted = !inserted
	if len(effects) == 0 {
		return res, nil
	}

	// A replayed event: compare before writing so a conflict writes nothing,
	// inside a savepoint so a conflict found mid-way leaves tx as it was.
	sp, err := tx.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("savepoint: %w", err)
	}
	defer sp.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	// Effects the recorded event still carries are compared as rows. Only
	// then: an event's effects, once written out, are never carried again,
	// so a replay of any other event runs no update (nor needs the right
	// to one on outbox_events).
	if carried {
		if _, err := q.store.WriteOutEvent(ctx, sp, ev.ID); err != nil {
			return nil, err
		}
	}
	existing, err := q.store.CompareEffects(ctx, sp, ev.ID, effects)
	if err != nil {
		return nil, err
	}
	var missing []store.NewEffect
	for i, x := range existing {
		if x.Exists && !x.Same {
			return nil, &EnqueueConflict{Kind: x.Kind}
		}
		if x.Exists {
			// An effect enqueued before ids were derived from keys keeps
			// its own id.
			res.Effects[i].ID = x.ID
		} else {
			missing = append(missing, effects[i])
		}
	}
	if err := q.insertEffects(ctx, sp, ev.ID, missing, res); err != nil {
		return nil, err
	}
	if err := sp.Commit(ctx); err != nil {
		return nil, fmt.Errorf("release savepoint: %w", err)
	}
	return res, nil
}

// insertNew inserts ev with its effects, if ev is new: carried in its row
// for the dispatchers to write out (carry), or as rows. A carried
// effect's derived id is checked when it is written out, where one held
// by another event's effect (a 2^-122 chance) is left unwritten, as a
// random UUID that collides would be.
func (q *Enqueuer) insertNew(ctx context.Context, tx pgx.Tx, ev store.NewEvent, effects []store.NewEffect) (bool, error) {
	if q.carry && store.Carriable(effects) {
		return q.store.InsertEventCarryingEffects(ctx, tx, ev, effects)
	}
	return q.store.InsertEventWithEffects(ctx, tx, ev, effects, q.river == nil)
}

// fanOut replaces the call's subscribers effect, if any, by one effect per
// endpoint it reaches, in its place: the endpoints subscribed now for a
// new event, the ones it reached then for a recorded one (the rule is
// outboxd_subscribers', which outboxd_enqueue follows too).
func (q *Enqueuer) fanOut(ctx context.Context, tx pgx.Tx, ev store.NewEvent, effects []store.NewEffect) ([]store.NewEffect, error) {
	at := slices.IndexFunc(effects, func(e store.NewEffect) bool { return e.Subscribers })
	if at < 0 {
		return effects, nil
	}
	marker := effects[at]
	found, err := q.store.Subscribers(ctx, tx, ev.ID, ev.Type, marker.Tenant)
	if err != nil {
		return nil, err
	}
	subs := make([]store.NewEffect, 0, len(found))
	for _, sub := range found {
		e := marker
		e.Subscribers = false
		e.Kind, e.Provider, e.Payload = sub.Kind, sub.Provider, sub.Payload
		if e.OrderingKey != "" {
			e.OrderingKey += "@" + sub.Endpoint.String()
		}
		subs = append(subs, e)
	}
	return slices.Concat(effects[:at], subs, effects[at+1:]), nil
}

// lockOrderingKeys takes the locks of the call's ordering keys in one
// order when it has several, so that two calls naming the same keys in
// different orders cannot deadlock. (The insert takes each key's lock
// itself; with one key there is nothing to order.)
func (q *Enqueuer) lockOrderingKeys(ctx context.Context, tx pgx.Tx, effects []store.NewEffect) error {
	var keys []string
	for _, e := range effects {
		if e.OrderingKey != "" && !slices.Contains(keys, e.OrderingKey) {
			keys = append(keys, e.OrderingKey)
		}
	}
	if len(keys) < 2 {
		return nil
	}
	return q.store.LockOrderingKeys(ctx, tx, keys)
}

// insertEffects inserts effects of event id and a dispatch job for each one
// actually inserted, marking those in res as not duplicate.
func (q *Enqueuer) insertEffects(ctx context.Context, tx pgx.Tx, id uuid.UUID, effects []store.NewEffect, res *Enqueued) error {
	if len(effects) == 0 {
		return nil
	}
	inserted, err := q.store.InsertEffects(ctx, tx, id, effects, q.river == nil)
	if err != nil {
		return err
	}
	if len(inserted) < len(effects) {
		// Another transaction added some of these effects after our
		// comparison; compare again so a difference is still a conflict.
		existing, err := q.store.CompareEffects(ctx, tx, id, effects)
		if err != nil {
			return err
		}
		for i, x := range existing {
			if !inserted[effects[i].ID] && !x.Same {
				return &EnqueueConflict{Kind: x.Kind}
			}
		}
	}
	return q.insertJobs(ctx, tx, effects, inserted, res)
}

// heldID reports the kind of the effect whose id err (from inserting
// effects) says another row already holds: a row of another event, since a
// new event has none of its own.
func heldID(err error, effects []EnqueuedEffect) (string, bool) {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23505" || pgErr.ConstraintName != "side_effects_pkey" {
		return "", false
	}
	for _, e := range effects {
		if strings.Contains(pgErr.Detail, e.ID.String()) {
			return e.Kind, true
		}
	}
	return "", true
}

// insertJobs inserts a dispatch job for each effect in inserted (or wakes
// the dispatchers, for effects in the intake) and marks it not duplicate
// in res.
func (q *Enqueuer) insertJobs(ctx context.Context, tx pgx.Tx, effects []store.NewEffect, inserted map[uuid.UUID]bool, res *Enqueued) error {
	for i := range res.Effects {
		if inserted[res.Effects[i].ID] {
			res.Effects[i].Duplicate = false
		}
	}
	if q.river == nil {
		// The effects are in the intake already; wake the dispatchers
		// if asked to, at most every millisecond from this process (a
		// notification is delivered on commit; the dispatchers poll).
		if len(inserted) == 0 || !q.notify || !q.mayNotify() {
			return nil
		}
		return q.store.WakeIntake(ctx, tx)
	}
	params := make([]river.InsertManyParams, 0, len(inserted))
	for _, e := range effects {
		// An effect with an ordering key gets its job from a dispatcher
		// when it is first in its chain; one with a tenant when its
		// tenant's turn comes (fair shares).
		if inserted[e.ID] && e.OrderingKey == "" && !e.Queued() {
			params = append(params, JobParams(e.ID, e.Provider, e.NotBefore))
		}
	}
	if len(params) == 0 {
		return nil
	}
	if _, err := q.river.InsertManyTx(ctx, tx, params); err != nil {
		return fmt.Errorf("insert dispatch jobs: %w", err)
	}
	return nil
}

// mayNotify reports whether this process may wake the dispatchers now: at
// most once a millisecond.
func (q *Enqueuer) mayNotify() bool {
	now := time.Now().UnixNano()
	last := q.lastNotify.Load()
	return now-last >= int64(time.Millisecond) && q.lastNotify.CompareAndSwap(last, now)
}

// Execer runs a statement: a pool, a connection.
type Execer = store.Execer

// wakeEvery is how often at most Wake sends a wake-up from this process.
// A dispatcher that found effects in the last intakeActive (100ms) reads
// the intake every millisecond anyway: a wake-up matters to one that may
// have gone back to its idle poll, and each costs a commit that Postgres
// serialises with every other notifying commit (at 1,000/s, one per
// effect doubled the commit-to-call p99 of the intake alone).
const wakeEvery = 50 * time.Millisecond

// Wake wakes the dispatchers with a NOTIFY in a statement of its own on
// db, after the caller's transaction committed, at most every wakeEvery
// from this process. Without the intake (jobs in the transaction) it does
// nothing: River's insert notified them.
func (q *Enqueuer) Wake(ctx context.Context, db Execer) error {
	if q.river != nil {
		return nil
	}
	now := time.Now().UnixNano()
	last := q.lastWake.Load()
	if now-last < int64(wakeEvery) || !q.lastWake.CompareAndSwap(last, now) {
		return nil
	}
	return q.store.WakeIntake(ctx, db)
}
