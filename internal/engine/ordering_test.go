package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/engine"
	"github.com/outboxd/outboxd/internal/fakes"
	"github.com/outboxd/outboxd/internal/store"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/webhook"
)

// orderedEffect is a webhook effect to /<key> whose body carries n, on
// ordering key key.
func (b *workerBundle) orderedEffect(kind, key string, n int, policy outbox.FailurePolicy) outbox.Effect {
	e := outbox.EffectOf(kind, webhook.Payload{URL: b.recv.URL + "/" + key, Body: json.RawMessage(fmt.Sprintf(`{"n": %d}`, n))})
	e.OrderingKey, e.OnFailure = key, policy
	return e
}

// enqueueOrdered enqueues effects under one new event, in one transaction.
func (b *workerBundle) enqueueOrdered(t *testing.T, effects ...outbox.Effect) []outbox.EffectResult {
	t.Helper()
	ctx := context.Background()
	var res *outbox.Result
	require.NoError(t, pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
		var err error
		res, err = b.ob.Enqueue(ctx, tx, outbox.Event{ID: uuid.New(), Type: "subscription.changed"}, effects...)
		return err
	}))
	return res.Effects
}

// accepted returns the n of each request to /key that the receiver
// accepted, in the order it accepted them.
func (b *workerBundle) accepted(t *testing.T, key string) []int {
	t.Helper()
	var out []int
	for _, d := range b.recv.Deliveries() {
		if d.Path != "/"+key || d.Status != http.StatusNoContent {
			continue
		}
		var body struct{ N int }
		require.NoError(t, json.Unmarshal(d.Body, &body))
		out = append(out, body.N)
	}
	return out
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// TestOrderedEffectsFireInCommitOrder: effects sharing an ordering key
// reach the provider one after the other, in the order their transactions
// committed and in call order within one, across three dispatchers, with
// retries on the way; many keys go in parallel. Without ordering, the
// three dispatchers deliver each key's effects in whatever order they
// claim them.
func TestOrderedEffectsFireInCommitOrder(t *testing.T) {
	t.Parallel()
	for name, jobs := range map[string]outbox.JobInsertion{"jobs in tx": outbox.JobsInTransaction, "jobs by dispatcher": outbox.JobsByDispatcher} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setupWorker(t, workerOpts{})
			ob, err := outbox.New(outbox.Config{Schema: b.db.Schema, Jobs: jobs, WebhookAllowedNetworks: loopback})
			require.NoError(t, err)
			b.ob = ob
			const keys, perKey = 8, 12
			// Some requests fail once and are retried: the effects behind
			// them must wait for the retry.
			for k := range keys {
				b.recv.Respond(fmt.Sprintf("/sub_%d", k), fakes.Status(http.StatusInternalServerError))
			}
			for range 3 {
				b.start(t)
			}
			var wg sync.WaitGroup
			for k := range keys {
				wg.Add(1)
				go func() {
					defer wg.Done()
					key := fmt.Sprintf("sub_%d", k)
					for n := 0; n < perKey; n += 2 {
						// Two effects of the key in one transaction, and one
						// unordered effect beside them.
						b.enqueueOrdered(t,
							b.orderedEffect("webhook.first", key, n, outbox.BlockKey),
							b.orderedEffect("webhook.second", key, n+1, outbox.BlockKey),
							outbox.EffectOf("webhook.audit", webhook.Payload{URL: b.recv.URL + "/audit", Body: json.RawMessage(`{}`)}))
					}
				}()
			}
			wg.Wait()
			require.Eventually(t, func() bool {
				for k := range keys {
					if len(b.accepted(t, fmt.Sprintf("sub_%d", k))) < perKey {
						return false
					}
				}
				return true
			}, 60*time.Second, 20*time.Millisecond)
			for k := range keys {
				require.Equal(t, seq(perKey), b.accepted(t, fmt.Sprintf("sub_%d", k)), "key sub_%d", k)
			}
			require.Len(t, b.accepted(t, "audit"), keys*perKey/2)
		})
	}
}

// TestAFailedHeadBlocksOnlyItsKey: a refused effect blocks the effects
// after it on its key (the default policy) and nothing else; "blocked
// behind" names it; releasing it lets them go, in order. With SkipFailed,
// the chain goes on by itself.
func TestAFailedHeadBlocksOnlyItsKey(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	ctx := context.Background()
	b.recv.Respond("/blocked", fakes.Status(http.StatusGone))
	b.recv.Respond("/skipping", fakes.Status(http.StatusGone))
	b.start(t)

	head := b.enqueueOrdered(t, b.orderedEffect("webhook.capture", "blocked", 0, outbox.BlockKey))[0]
	var behind []outbox.EffectResult
	for n := 1; n <= 3; n++ {
		behind = append(behind, b.enqueueOrdered(t, b.orderedEffect("webhook.refund", "blocked", n, outbox.BlockKey))[0])
	}
	b.enqueueOrdered(t, b.orderedEffect("webhook.notify", "skipping", 0, outbox.SkipFailed))
	for n := 1; n <= 2; n++ {
		b.enqueueOrdered(t, b.orderedEffect("webhook.notify", "skipping", n, outbox.SkipFailed))
	}
	for n := range 3 {
		b.enqueueOrdered(t, b.orderedEffect("webhook.other", "healthy", n, outbox.BlockKey))
	}

	b.waitFor(t, head.ID, outboxtype.StateFailed)
	require.Eventually(t, func() bool { return len(b.accepted(t, "healthy")) == 3 }, 30*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool { return len(b.accepted(t, "skipping")) == 2 }, 30*time.Second, 20*time.Millisecond)
	require.Equal(t, []int{1, 2}, b.accepted(t, "skipping"), "a failed SkipFailed effect lets the chain go on")
	require.Equal(t, seq(3), b.accepted(t, "healthy"))

	// The blocked chain waits, each effect behind the failed head, never
	// fired; the head's failure is what an operator sees.
	for _, e := range behind {
		got := b.effect(t, e.ID)
		require.Equal(t, outboxtype.StatePending, got.State)
		require.Nil(t, got.FirstFiredAt)
		blocker, err := b.store.BlockedBehind(ctx, b.db.Pool, e.ID)
		require.NoError(t, err)
		require.NotNil(t, blocker)
		require.Equal(t, head.ID, *blocker)
	}
	require.Empty(t, b.accepted(t, "blocked"))
	chains, err := b.store.BlockedChains(ctx, b.db.Pool)
	require.NoError(t, err)
	require.Equal(t, 1, chains.Keys, "one key waits")
	require.Equal(t, 3, chains.Effects)
	require.Positive(t, chains.OldestAge)

	// An operator releases the chain past the head: the rest go, in
	// order; the head stays failed.
	op := b.operator(t)
	dry, err := op.Release(ctx, []uuid.UUID{head.ID}, outboxtype.ActionOpts{Actor: "alice", Reason: "settled by bank transfer", DryRun: true})
	require.NoError(t, err)
	require.True(t, dry[0].Applied)
	require.Empty(t, b.accepted(t, "blocked"), "a dry run releases nothing")
	chs, err := op.Release(ctx, []uuid.UUID{head.ID}, outboxtype.ActionOpts{Actor: "alice", Reason: "settled by bank transfer"})
	require.NoError(t, err)
	require.True(t, chs[0].Applied, chs[0].Skipped)
	require.Eventually(t, func() bool { return len(b.accepted(t, "blocked")) == 3 }, 30*time.Second, 20*time.Millisecond)
	require.Equal(t, []int{1, 2, 3}, b.accepted(t, "blocked"))
	chains, err = b.store.BlockedChains(ctx, b.db.Pool)
	require.NoError(t, err)
	require.Zero(t, chains.Keys)
	got := b.effect(t, head.ID)
	require.Equal(t, outboxtype.StateFailed, got.State)
	require.NotNil(t, got.OrderingReleasedAt)
	audit := b.audit(t, head.ID)
	require.Equal(t, outboxtype.ActionRelease, audit[len(audit)-1].Action)
	require.Equal(t, "alice", audit[len(audit)-1].Actor)

	// Releasing twice, or an effect without a key, changes nothing.
	again, err := op.Release(ctx, []uuid.UUID{head.ID, behind[0].ID}, outboxtype.ActionOpts{Actor: "alice", Reason: "again"})
	require.NoError(t, err)
	require.Contains(t, again[0].Skipped, "released already")
	require.Contains(t, again[1].Skipped, "confirmed effects cannot be released")
}

// TestRedrivingAHeadThenTheChain: retrying a failed head fires it first,
// then the effects behind it; cancelling a scheduled head lets the chain go
// at once.
func TestRedrivingAHeadThenTheChain(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	ctx := context.Background()
	b.recv.Respond("/redrive", fakes.Status(http.StatusGone))
	b.start(t)
	head := b.enqueueOrdered(t, b.orderedEffect("webhook.capture", "redrive", 0, outbox.BlockKey))[0]
	next := b.enqueueOrdered(t, b.orderedEffect("webhook.refund", "redrive", 1, outbox.BlockKey))[0]
	b.waitFor(t, head.ID, outboxtype.StateFailed)
	b.waitForJob(t, head.ID, "cancelled")
	chs, err := b.operator(t).Retry(ctx, []uuid.UUID{head.ID}, outboxtype.ActionOpts{Actor: "alice", Reason: "receiver fixed"})
	require.NoError(t, err)
	require.True(t, chs[0].Applied, chs[0].Skipped)
	b.waitFor(t, next.ID, outboxtype.StateConfirmed)
	require.Equal(t, []int{0, 1}, b.accepted(t, "redrive"))

	// A head scheduled for tomorrow holds its key; the application
	// cancels it, and the effect behind it fires.
	later := b.orderedEffect("webhook.reminder", "scheduled", 0, outbox.BlockKey)
	later.NotBefore = time.Now().Add(24 * time.Hour)
	ev := uuid.New()
	require.NoError(t, pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
		_, err := b.ob.Enqueue(ctx, tx, outbox.Event{ID: ev, Type: "order.placed"}, later)
		return err
	}))
	after := b.enqueueOrdered(t, b.orderedEffect("webhook.shipped", "scheduled", 1, outbox.BlockKey))[0]
	time.Sleep(200 * time.Millisecond) // give a wrong dispatch the chance to happen
	require.Equal(t, outboxtype.StatePending, b.effect(t, after.ID).State, "waits behind the scheduled head")
	require.Equal(t, outbox.Cancelled, b.cancel(t, ev, "webhook.reminder"))
	b.waitFor(t, after.ID, outboxtype.StateConfirmed)
	require.Equal(t, []int{1}, b.accepted(t, "scheduled"))
}

// TestAJobForABlockedEffectWaits: a job that reaches an effect still
// blocked (an operator's requeue, a sweep) fires nothing and waits; when
// the chain moves, it runs at once.
func TestAJobForABlockedEffectWaits(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	ctx := context.Background()
	b.recv.Respond("/early", fakes.Status(http.StatusGone))
	b.start(t)
	head := b.enqueueOrdered(t, b.orderedEffect("webhook.capture", "early", 0, outbox.BlockKey))[0]
	next := b.enqueueOrdered(t, b.orderedEffect("webhook.refund", "early", 1, outbox.BlockKey))[0]
	b.waitFor(t, head.ID, outboxtype.StateFailed)
	chs, err := b.operator(t).Requeue(ctx, []uuid.UUID{next.ID}, outboxtype.ActionOpts{Actor: "alice", Reason: "try"})
	require.NoError(t, err)
	require.True(t, chs[0].Applied, chs[0].Skipped)
	// River snoozes the job: back to available or scheduled, due later.
	require.Eventually(t, func() bool {
		var st string
		var due bool
		err := b.db.Pool.QueryRow(ctx, `SELECT state, scheduled_at > now() FROM `+b.db.Schema+`.river_job
			WHERE args->>'effect_id' = $1`, next.ID.String()).Scan(&st, &due)
		return err == nil && st != "running" && due
	}, 30*time.Second, 10*time.Millisecond)
	got := b.effect(t, next.ID)
	require.Equal(t, outboxtype.StatePending, got.State)
	require.Nil(t, got.FirstFiredAt, "a blocked effect is never fired")

	chs, err = b.operator(t).Cancel(ctx, []uuid.UUID{head.ID}, outboxtype.ActionOpts{Actor: "alice", Reason: "void"})
	require.NoError(t, err)
	require.True(t, chs[0].Applied, chs[0].Skipped)
	b.waitFor(t, next.ID, outboxtype.StateConfirmed)
	require.Equal(t, []int{1}, b.accepted(t, "early"))
}

// TestOrderingKeyIsPartOfTheEffect: a replay with the same key is a
// duplicate; another key or policy under the same event and kind is a
// conflict; a bad key is refused before anything is written.
func TestOrderingKeyIsPartOfTheEffect(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	ctx := context.Background()
	ev := uuid.New()
	e := b.orderedEffect("webhook.capture", "k1", 0, outbox.BlockKey)
	enq := func(e outbox.Effect) (*outbox.Result, error) {
		var res *outbox.Result
		err := pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
			var err error
			res, err = b.ob.Enqueue(ctx, tx, outbox.Event{ID: ev, Type: "x"}, e)
			return err
		})
		return res, err
	}
	_, err := enq(e)
	require.NoError(t, err)
	res, err := enq(e)
	require.NoError(t, err)
	require.True(t, res.Replay())
	other := e
	other.OrderingKey = "k2"
	_, err = enq(other)
	require.ErrorIs(t, err, outbox.ErrConflict)
	skip := e
	skip.OnFailure = outbox.SkipFailed
	_, err = enq(skip)
	require.ErrorIs(t, err, outbox.ErrConflict)

	long := b.orderedEffect("webhook.other", "k3", 0, outbox.BlockKey)
	long.OrderingKey = fmt.Sprintf("%0300d", 1)
	_, err = enq(long)
	var ve *outbox.ValidationError
	require.ErrorAs(t, err, &ve)
	require.Equal(t, "effects[0].ordering_key", ve.Field)

	// An event's key applies to its effects that name none.
	ev2 := uuid.New()
	plain := outbox.EffectOf("webhook.plain", webhook.Payload{URL: b.recv.URL + "/p", Body: json.RawMessage(`{}`)})
	var r2 *outbox.Result
	require.NoError(t, pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
		r2, err = b.ob.Enqueue(ctx, tx, outbox.Event{ID: ev2, Type: "x", OrderingKey: "order:42"}, plain)
		return err
	}))
	got := b.effect(t, r2.Effects[0].ID)
	require.NotNil(t, got.OrderingKey)
	require.Equal(t, "order:42", *got.OrderingKey)
	require.NotNil(t, got.OrderingSeq)
}

// TestAConfirmationThatMovesItsChainLeavesNoWake: a dispatcher's
// confirmation that gives the next effect its job in the same transaction
// tells the end trigger so (no wake row for the intake to read again);
// any other confirmation, an operator's say, leaves the wake. Claims of
// ordered effects stay HOT updates.
func TestAConfirmationThatMovesItsChainLeavesNoWake(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	ctx := context.Background()
	for _, chained := range []bool{true, false} {
		key := fmt.Sprintf("chained-%v", chained)
		first := b.enqueueOrdered(t, b.orderedEffect("webhook.a", key, 0, outbox.BlockKey))[0]
		b.enqueueOrdered(t, b.orderedEffect("webhook.b", key, 1, outbox.BlockKey))
		_, err := b.db.Pool.Exec(ctx, `DELETE FROM `+b.db.Schema+`.outbox_order_wake`)
		require.NoError(t, err)
		require.NoError(t, pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
			var all0, hot0 int64
			require.NoError(t, tx.QueryRow(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables
				WHERE schemaname = $1 AND relname = 'side_effects'`, b.db.Schema).Scan(&all0, &hot0))
			e, err := b.store.Claim(ctx, tx, first.ID, outboxtype.StatePending)
			require.NoError(t, err)
			require.NotNil(t, e, "the first of its key may fire")
			var all, hot int64
			require.NoError(t, tx.QueryRow(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables
				WHERE schemaname = $1 AND relname = 'side_effects'`, b.db.Schema).Scan(&all, &hot))
			require.Equal(t, all-all0, hot-hot0, "the claim of an ordered effect is a HOT update (before: %d/%d)", all0, hot0)
			confirmed, err := b.store.ConfirmMany(ctx, tx, []store.Ack{{ID: first.ID}}, chained)
			require.NoError(t, err)
			require.Contains(t, confirmed, first.ID)
			return nil
		}))
		var wakes int
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM `+b.db.Schema+`.outbox_order_wake WHERE ordering_key = $1`, key).Scan(&wakes))
		if chained {
			require.Zero(t, wakes, "the confirming transaction moved the chain itself")
		} else {
			require.Equal(t, 1, wakes, "the end trigger woke the chain")
		}
		// The setting lasts for its transaction only.
		var flag *string
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT current_setting('outboxd.chain_moved', true)`).Scan(&flag))
		require.True(t, flag == nil || *flag == "", "flag leaked out of its transaction: %v", flag)
	}
}

// TestAFailedConfirmSaysWhatHappensNext: the warning for an acknowledged
// effect whose confirmation failed says what its policy will do, not a
// re-fire for an at_most_once effect.
func TestAFailedConfirmSaysWhatHappensNext(t *testing.T) {
	t.Parallel()
	once := engine.ConfirmFailedNote(providers.AtMostOnce)
	require.Contains(t, once, "parks it in doubt")
	require.NotContains(t, once, "will re-fire")
	require.Contains(t, engine.ConfirmFailedNote(providers.AtLeastOnce), "will re-fire with the same key")
}

// TestRetentionKeepsAHeadThatHoldsItsChain: a failed effect that blocks
// the effects after it on its key is not purged with the rest of the old
// failures: deleting it would release them without anyone deciding so.
func TestRetentionKeepsAHeadThatHoldsItsChain(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	ctx := context.Background()
	b.recv.Respond("/held", fakes.Status(http.StatusGone))
	b.recv.Respond("/alone", fakes.Status(http.StatusGone))
	b.start(t)
	head := b.enqueueOrdered(t, b.orderedEffect("webhook.capture", "held", 0, outbox.BlockKey))[0]
	next := b.enqueueOrdered(t, b.orderedEffect("webhook.refund", "held", 1, outbox.BlockKey))[0]
	alone := b.enqueueOrdered(t, b.orderedEffect("webhook.capture", "alone", 0, outbox.BlockKey))[0]
	b.waitFor(t, head.ID, outboxtype.StateFailed)
	b.waitFor(t, alone.ID, outboxtype.StateFailed)

	res, err := b.store.Purge(ctx, b.db.Pool, time.Now().Add(time.Hour), false)
	require.NoError(t, err)
	require.EqualValues(t, 1, res.Effects, "only the failure that holds nothing")
	require.Equal(t, outboxtype.StateFailed, b.effect(t, head.ID).State, "kept")
	require.Equal(t, outboxtype.StatePending, b.effect(t, next.ID).State, "still waiting behind it")
	_, err = b.store.Get(ctx, b.db.Pool, alone.ID)
	require.ErrorIs(t, err, store.ErrNotFound)
}

// TestTheNextEffectOfAKeyIsDueAtOnceInEveryInterleaving: an effect
// enqueued on a key while its predecessor's confirming transaction is
// open is not seen by that transaction (it began first), and a dispatcher
// that reads the key's wake before that transaction commits still sees the
// predecessor fired. The wake must survive for a look after the commit;
// otherwise the effect waits for the sweeper (a minute by default).
func TestTheNextEffectOfAKeyIsDueAtOnceInEveryInterleaving(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	ctx := context.Background()
	client, err := river.NewClient(riverpgxv5.New(b.db.Pool), &river.Config{Schema: b.db.Schema})
	require.NoError(t, err)
	wake := func() {
		require.NoError(t, pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
			_, err := engine.WakeChains(ctx, b.store, tx, client, 100)
			return err
		}))
	}
	first := b.enqueueOrdered(t, b.orderedEffect("webhook.step1", "sub:9", 1, outbox.BlockKey))[0]
	wake() // its job, and the key's wake taken
	require.Equal(t, 1, b.jobCount(t, first.ID))
	// A worker claimed it and the provider acknowledged it: the
	// confirming transaction moves the chain itself (there is none yet).
	_, err = b.db.Pool.Exec(ctx, `UPDATE `+b.db.Schema+`.side_effects SET state = 'fired', attempts = 1 WHERE id = $1`, first.ID)
	require.NoError(t, err)
	confirming, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer confirming.Rollback(ctx) //nolint:errcheck // committed below
	_, err = b.store.ConfirmMany(ctx, confirming, []store.Ack{{ID: first.ID}}, true)
	require.NoError(t, err)
	require.NoError(t, engine.NextInChains(ctx, b.store, confirming, client, []string{"sub:9"}))

	// Meanwhile the next effect of the key commits, and a dispatcher
	// reads its wake while the first still reads as fired.
	second := b.enqueueOrdered(t, b.orderedEffect("webhook.step2", "sub:9", 2, outbox.BlockKey))[0]
	wake()
	require.NoError(t, confirming.Commit(ctx))

	wake() // the next look, after the commit
	require.Equal(t, 1, b.jobCount(t, second.ID), "the next effect of the key has its job at once")
}

func (b *workerBundle) jobCount(t *testing.T, id uuid.UUID) int {
	t.Helper()
	var n int
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM `+b.db.Schema+`.river_job
		WHERE kind = 'outboxd.dispatch' AND args->>'effect_id' = $1::text`, id).Scan(&n))
	return n
}

// TestAWakeTakenAsItsHeadIsConfirmedIsKept: an effect enqueued on a key
// while its predecessor's confirming transaction is open is not seen by
// that transaction; its wake must then survive until a look that sees the
// predecessor ended, in every interleaving. Here the intake's look takes
// its snapshot while the predecessor is still fired, and the confirmation
// commits before the look reaches the predecessor's row (a trigger the
// test adds holds the look at the wake's delete until then): the look
// must keep the wake (or give the job), not drop it and leave the effect
// without a job until the sweeper.
func TestAWakeTakenAsItsHeadIsConfirmedIsKept(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	ctx := context.Background()
	client := insertClient(t, b.db.Pool, b.db.Schema)
	const key = "sub_race"
	head := b.enqueueOrdered(t, b.orderedEffect("webhook.a", key, 0, outbox.BlockKey))[0]
	fired, err := b.store.Claim(ctx, b.db.Pool, head.ID, outboxtype.StatePending)
	require.NoError(t, err)
	require.NotNil(t, fired)
	// The head's own wake was taken when it got its job.
	_, err = b.db.Pool.Exec(ctx, `DELETE FROM `+b.db.Schema+`.outbox_order_wake`)
	require.NoError(t, err)
	// A trigger of the test's own holds a delete of a wake while the
	// gate is locked.
	const gateLock = 734_221
	_, err = b.db.Pool.Exec(ctx, fmt.Sprintf(`
CREATE FUNCTION %[1]s.test_hold_wake() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM pg_advisory_xact_lock_shared(%[2]d); RETURN OLD; END $$;
CREATE TRIGGER test_hold_wake BEFORE DELETE ON %[1]s.outbox_order_wake FOR EACH ROW EXECUTE FUNCTION %[1]s.test_hold_wake();`,
		b.db.Schema, gateLock))
	require.NoError(t, err)

	// The dispatcher's confirming transaction: it confirms the head and
	// looks for the next effect before there is one.
	confirm, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer confirm.Rollback(ctx) //nolint:errcheck
	confirmed, err := b.store.ConfirmMany(ctx, confirm, []store.Ack{{ID: head.ID}}, true)
	require.NoError(t, err)
	require.Contains(t, confirmed, head.ID)
	require.NoError(t, engine.NextInChains(ctx, b.store, confirm, client, []string{key}))

	// The next effect commits meanwhile, with its wake.
	next := b.enqueueOrdered(t, b.orderedEffect("webhook.b", key, 1, outbox.BlockKey))[0]

	// The intake's look, held at the wake's delete (after its snapshot).
	gate, err := b.db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer gate.Release()
	_, err = gate.Exec(ctx, `SELECT pg_advisory_lock($1)`, gateLock)
	require.NoError(t, err)
	looked := make(chan error, 1)
	go func() {
		looked <- pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
			_, err := engine.WakeChains(ctx, b.store, tx, client, 10)
			return err
		})
	}()
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks
			WHERE locktype = 'advisory' AND NOT granted AND objid = $1`, gateLock).Scan(&n))
		return n == 1
	}, 10*time.Second, 5*time.Millisecond, "the look reaches the wake")
	require.NoError(t, confirm.Commit(ctx))
	_, err = gate.Exec(ctx, `SELECT pg_advisory_unlock($1)`, gateLock)
	require.NoError(t, err)
	require.NoError(t, <-looked)

	jobs := func() int {
		var n int
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM `+b.db.Schema+`.river_job WHERE args @> $1`,
			fmt.Sprintf(`{"effect_id": %q}`, next.ID)).Scan(&n))
		return n
	}
	var wakes int
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM `+b.db.Schema+`.outbox_order_wake WHERE ordering_key = $1`, key).Scan(&wakes))
	require.True(t, jobs() == 1 || wakes == 1, "the next effect has neither a job nor a wake: it waits for the sweeper")
	// The next look (no hold) gives it its job.
	require.NoError(t, pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
		_, err := engine.WakeChains(ctx, b.store, tx, client, 10)
		return err
	}))
	require.Equal(t, 1, jobs(), "the next effect's job")
}

// TestAChainGoesOnWhenItsHeadIsFixed: an effect behind a failed head has
// a job of its own that snoozed behind it (five minutes: the effect is an
// hour old); once an operator fixes the head's payload and it is
// confirmed, the next effect goes at once, not when that snooze ends.
func TestAChainGoesOnWhenItsHeadIsFixed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupWorker(t, workerOpts{})
	b.start(t)
	src := b.enqueue(t, "/ok")
	b.waitFor(t, src.ID, outboxtype.StateConfirmed)
	head, next := uuid.New(), uuid.New()
	for _, e := range []struct {
		id  uuid.UUID
		seq int
		url string
	}{{head, 1, strings.Replace(b.recv.URL, "http://", "ftp://", 1) + "/refund"}, {next, 2, b.recv.URL + "/receipt"}} {
		_, err := b.db.Pool.Exec(ctx, `INSERT INTO `+b.db.Schema+`.side_effects (id, source_id, kind, provider, payload, ordering_key, ordering_seq, created_at)
			SELECT $2, source_id, $3, 'webhook', $4, 'pay_77', $5, now() - interval '1 hour' FROM `+b.db.Schema+`.side_effects WHERE id = $1`,
			src.ID, e.id, fmt.Sprintf("webhook.step_%d", e.seq), `{"url": "`+e.url+`", "body": {}}`, e.seq)
		require.NoError(t, err)
	}
	op := b.operator(t)
	_, err := op.Requeue(ctx, []uuid.UUID{head, next}, outboxtype.ActionOpts{Actor: "backfill", Reason: "written by SQL"})
	require.NoError(t, err)
	b.waitFor(t, head, outboxtype.StateFailed)
	require.Eventually(t, func() bool {
		var at time.Time
		err := b.db.Pool.QueryRow(ctx, `SELECT scheduled_at FROM `+b.db.Schema+`.river_job WHERE args->>'effect_id' = $1::text`, next).Scan(&at)
		return err == nil && time.Until(at) > time.Minute
	}, 20*time.Second, 20*time.Millisecond, "the next effect's job snoozed behind its head")

	_, err = op.EditPayload(ctx, head, json.RawMessage(`{"url": "`+b.recv.URL+`/refund", "body": {}}`), webhook.Schema{AllowedNetworks: loopback},
		outboxtype.ActionOpts{Actor: "oncall", Reason: "the backfill wrote ftp://"})
	require.NoError(t, err)
	b.waitFor(t, head, outboxtype.StateConfirmed)
	b.waitFor(t, next, outboxtype.StateConfirmed)
}
