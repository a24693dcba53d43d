package engine_test

import (
	"context"
	"net/http"
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

// byDispatcher makes b's outbox leave the jobs to the dispatchers (the
// intake), whose effects due now share batch jobs.
func (b *workerBundle) byDispatcher(t *testing.T) {
	t.Helper()
	ob, err := outbox.New(outbox.Config{Schema: b.db.Schema, Jobs: outbox.JobsByDispatcher,
		Providers: []providers.Validator{webhook.Schema{AllowedNetworks: loopback}}})
	require.NoError(t, err)
	b.ob = ob
}

// jobs counts effect id's dispatch jobs: its own, and the batches it is in.
func (b *workerBundle) jobs(t *testing.T, id uuid.UUID) (own, batches int) {
	t.Helper()
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `
SELECT count(*) FILTER (WHERE kind = 'outboxd.dispatch' AND args->>'effect_id' = $1),
	count(*) FILTER (WHERE kind = 'outboxd.dispatch_batch' AND args->'effect_ids' ? $1)
FROM `+b.db.Schema+`.river_job`, id.String()).Scan(&own, &batches))
	return own, batches
}

// Effects the dispatcher finds in the intake share batch jobs: River
// inserts, fetches and completes one job for many effects, and each effect
// is delivered once with its own key.
func TestEffectsDueTogetherShareABatchJob(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	b.byDispatcher(t)
	// Committed before any dispatcher runs: its first look takes them all.
	var effects []outbox.EffectResult
	for range 30 {
		effects = append(effects, b.enqueue(t, "/orders"))
	}
	b.start(t)
	for _, e := range effects {
		b.waitFor(t, e.ID, outboxtype.StateConfirmed)
		require.Len(t, b.recv.ByID()[e.Key], 1, "delivered once, with its key")
		own, batches := b.jobs(t, e.ID)
		require.Equal(t, 0, own, "no job of its own")
		require.Equal(t, 1, batches, "in one batch job")
	}
	var n int
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM `+b.db.Schema+`.river_job
		WHERE kind = 'outboxd.dispatch_batch'`).Scan(&n))
	require.Equal(t, 1, n, "30 effects, one River job")
	require.Len(t, b.recv.Deliveries(), 30)
}

// An effect of a batch whose attempt must be retried goes on in a job of
// its own, with its attempts and key, while the rest of its batch is done.
func TestABatchHandsARetryToAJobOfItsOwn(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	b.byDispatcher(t)
	// A 500 (a 503 would also pause the host, whose other deliveries
	// would then wait in jobs of their own).
	b.recv.Respond("/flaky", fakes.Status(500))
	flaky := b.enqueue(t, "/flaky")
	var fine []outbox.EffectResult
	for range 4 {
		fine = append(fine, b.enqueue(t, "/orders"))
	}
	b.start(t)
	got := b.waitFor(t, flaky.ID, outboxtype.StateConfirmed)
	require.Equal(t, 2, got.Attempts)
	ds := b.recv.ByID()[flaky.Key]
	require.Len(t, ds, 2)
	require.Equal(t, []int{500, 204}, []int{ds[0].Status, ds[1].Status}, "the retry carries the same key")
	own, batches := b.jobs(t, flaky.ID)
	require.Equal(t, 1, own, "the retry is a job of its own")
	require.Equal(t, 1, batches)
	for _, e := range fine {
		b.waitFor(t, e.ID, outboxtype.StateConfirmed)
		require.Len(t, b.recv.ByID()[e.Key], 1)
		own, _ := b.jobs(t, e.ID)
		require.Zero(t, own)
	}
}

// A batch River runs a second time (its process died mid-batch and River
// rescued it) fires nothing itself: every effect of it that has not ended
// goes to a job of its own, where an effect left fired is re-fired with its
// key as any rescued effect is, and a confirmed one is never sent again.
func TestARescuedBatchHandsItsEffectsToJobsOfTheirOwn(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	b.byDispatcher(t)
	ctx := context.Background()
	confirmed, fired, pending := b.enqueue(t, "/orders"), b.enqueue(t, "/orders"), b.enqueue(t, "/orders")
	ids := []uuid.UUID{confirmed.ID, fired.ID, pending.ID}
	// What the dead process left: the intake taken into a batch job that
	// River had started (attempt 1) and the process's claims of two
	// effects, one confirmed.
	_, err := b.db.Pool.Exec(ctx, `DELETE FROM `+b.db.Schema+`.outbox_intake`)
	require.NoError(t, err)
	claimed, err := b.store.ClaimFirstMany(ctx, b.db.Pool, ids[:2], []string{webhook.Name})
	require.NoError(t, err)
	require.Len(t, claimed, 2)
	_, err = b.store.ConfirmMany(ctx, b.db.Pool, []store.Ack{{ID: confirmed.ID, Ref: ""}}, false)
	require.NoError(t, err)
	_, err = b.db.Pool.Exec(ctx, `
INSERT INTO `+b.db.Schema+`.river_job (state, attempt, max_attempts, attempted_at, scheduled_at, args, kind, queue)
VALUES ('retryable', 1, 100, now() - interval '5 minutes', now(), jsonb_build_object('effect_ids', $1::uuid[]), 'outboxd.dispatch_batch', 'webhook')`,
		ids)
	require.NoError(t, err)

	b.start(t)
	b.waitFor(t, fired.ID, outboxtype.StateConfirmed)
	b.waitFor(t, pending.ID, outboxtype.StateConfirmed)
	require.Empty(t, b.recv.ByID()[confirmed.Key], "a confirmed effect is never sent again")
	require.Len(t, b.recv.ByID()[fired.Key], 1, "re-fired once, with its key")
	require.Len(t, b.recv.ByID()[pending.Key], 1)
	for id, want := range map[uuid.UUID]int{confirmed.ID: 0, fired.ID: 1, pending.ID: 1} {
		own, _ := b.jobs(t, id)
		require.Equal(t, want, own, "jobs of its own of %s", id)
	}
	e, err := b.store.Get(ctx, b.db.Pool, fired.ID)
	require.NoError(t, err)
	require.Equal(t, 2, e.Attempts, "the crashed claim counts as an attempt")
}

// An effect in a live batch job has a job: the sweeper leaves it alone
// and an operator's requeue says so, so no second job ever works it.
func TestAnEffectInALiveBatchHasAJob(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	b.byDispatcher(t)
	ctx := context.Background()
	e := b.enqueue(t, "/orders")
	_, err := b.db.Pool.Exec(ctx, `DELETE FROM `+b.db.Schema+`.outbox_intake`)
	require.NoError(t, err)
	var job int64
	require.NoError(t, b.db.Pool.QueryRow(ctx, `
INSERT INTO `+b.db.Schema+`.river_job (state, attempt, max_attempts, scheduled_at, args, kind, queue)
VALUES ('available', 0, 100, now(), jsonb_build_object('effect_ids', ARRAY[gen_random_uuid(), $1::uuid]), 'outboxd.dispatch_batch', 'webhook')
RETURNING id`, e.ID).Scan(&job))

	swept := func() []uuid.UUID {
		var out []uuid.UUID
		require.NoError(t, pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
			found, err := b.store.SweepCandidates(ctx, tx, time.Now().Add(time.Hour))
			for _, x := range found {
				out = append(out, x.ID)
			}
			return err
		}))
		return out
	}
	require.NotContains(t, swept(), e.ID, "the sweeper leaves an effect in a live batch alone")
	chs, err := b.operator(t).Requeue(ctx, []uuid.UUID{e.ID}, outboxtype.ActionOpts{Actor: "alice", Reason: "stuck?"})
	require.NoError(t, err)
	require.False(t, chs[0].Applied)
	require.Contains(t, chs[0].Skipped, "live for it already")

	// Once the batch is over, an effect it left is the sweeper's.
	_, err = b.db.Pool.Exec(ctx, `UPDATE `+b.db.Schema+`.river_job SET state = 'completed', finalized_at = now() WHERE id = $1`, job)
	require.NoError(t, err)
	require.Contains(t, swept(), e.ID)
}

// holdFirst makes the receiver hold the next request to path: arrived is
// closed when it comes, and closing release answers it (204).
func (b *workerBundle) holdFirst(path string) (arrived, release chan struct{}) {
	arrived, release = make(chan struct{}), make(chan struct{})
	b.recv.Respond(path, func(w http.ResponseWriter, _ *http.Request) int {
		close(arrived)
		<-release
		w.WriteHeader(http.StatusNoContent)
		return http.StatusNoContent
	})
	return arrived, release
}

// insertBatch queues ids in one batch job by hand, as the intake would,
// once the intake's rows are gone.
func (b *workerBundle) insertBatch(t *testing.T, ids ...uuid.UUID) int64 {
	t.Helper()
	ctx := context.Background()
	_, err := b.db.Pool.Exec(ctx, `DELETE FROM `+b.db.Schema+`.outbox_intake`)
	require.NoError(t, err)
	var job int64
	require.NoError(t, b.db.Pool.QueryRow(ctx, `
INSERT INTO `+b.db.Schema+`.river_job (state, attempt, max_attempts, scheduled_at, args, kind, queue)
VALUES ('available', 0, 100, now(), jsonb_build_object('effect_ids', $1::uuid[]), 'outboxd.dispatch_batch', 'webhook')
RETURNING id`, ids).Scan(&job))
	return job
}

// An effect an operator cancelled and sent back while it waited in a batch
// is fired by its own job only, once: the batch it was in leaves it, so no
// two jobs ever work it (the second would take its call in flight for a
// crashed one and fire it again).
func TestAnEffectSentBackWhileInABatchIsFiredByItsOwnJobOnce(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	b.byDispatcher(t)
	ctx := context.Background()
	arrived, release := b.holdFirst("/slow")
	x, y := b.enqueue(t, "/slow"), b.enqueue(t, "/orders")
	b.insertBatch(t, x.ID, y.ID)
	op := b.operator(t)
	opts := outboxtype.ActionOpts{Actor: "alice", Reason: "wrong order"}
	_, err := op.Cancel(ctx, []uuid.UUID{x.ID}, opts)
	require.NoError(t, err)
	chs, err := op.Retry(ctx, []uuid.UUID{x.ID}, opts)
	require.NoError(t, err)
	require.True(t, chs[0].Applied, chs[0].Skipped)
	// Its own job runs a moment after the batch.
	_, err = b.db.Pool.Exec(ctx, `UPDATE `+b.db.Schema+`.river_job SET state = 'scheduled', scheduled_at = now() + interval '1 second'
		WHERE kind = 'outboxd.dispatch' AND args->>'effect_id' = $1`, x.ID.String())
	require.NoError(t, err)

	b.start(t)
	b.waitFor(t, y.ID, outboxtype.StateConfirmed)
	<-arrived
	var ownState string
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT state FROM `+b.db.Schema+`.river_job
		WHERE kind = 'outboxd.dispatch' AND args->>'effect_id' = $1`, x.ID.String()).Scan(&ownState))
	require.Equal(t, "running", ownState, "the effect sent back is fired by its own job, not by the batch it was in")
	close(release)
	b.waitFor(t, x.ID, outboxtype.StateConfirmed)
	require.Len(t, b.recv.ByID()[x.Key], 1, "delivered once")
}

// An effect a batch failed can be retried by an operator at once, while
// the batch still works its other effects: the batch never fires it again.
func TestAFailedEffectOfARunningBatchCanBeRetried(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	b.byDispatcher(t)
	ctx := context.Background()
	arrived, release := b.holdFirst("/slow")
	defer close(release)
	b.recv.Respond("/gone", fakes.Status(http.StatusGone))
	slow, gone := b.enqueue(t, "/slow"), b.enqueue(t, "/gone")
	job := b.insertBatch(t, slow.ID, gone.ID)
	b.start(t)
	b.waitFor(t, gone.ID, outboxtype.StateFailed)
	<-arrived
	var state string
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT state FROM `+b.db.Schema+`.river_job WHERE id = $1`, job).Scan(&state))
	require.Equal(t, "running", state, "the batch still works the slow effect")

	op := b.operator(t)
	chs, err := op.Retry(ctx, []uuid.UUID{gone.ID}, outboxtype.ActionOpts{Actor: "alice", Reason: "receiver fixed"})
	require.NoError(t, err)
	require.True(t, chs[0].Applied, chs[0].Skipped)
	// The slow effect's call is in flight: a forced retry of it is refused.
	chs, err = op.Retry(ctx, []uuid.UUID{slow.ID}, outboxtype.ActionOpts{Actor: "alice", Reason: "stuck?", Force: true})
	require.NoError(t, err)
	require.False(t, chs[0].Applied)
	require.True(t, chs[0].Transient)
	require.Contains(t, chs[0].Skipped, "is running for it")
	b.waitFor(t, gone.ID, outboxtype.StateConfirmed)
}

// A job of its own that finds its effect fired by a batch still running
// waits for the batch instead of firing it again: the batch's call may be
// in flight. (The two meet when two wakes of one ordering key are taken
// at once, or when an operator's requeue races the intake.)
func TestAnOwnJobWaitsForABatchInFlight(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	b.byDispatcher(t)
	ctx := context.Background()
	arrived, release := b.holdFirst("/slow")
	x, y := b.enqueue(t, "/slow"), b.enqueue(t, "/orders")
	b.insertBatch(t, x.ID, y.ID)
	b.start(t)
	<-arrived
	client, err := river.NewClient(riverpgxv5.New(b.db.Pool), &river.Config{Schema: b.db.Schema})
	require.NoError(t, err)
	res, err := client.InsertMany(ctx, []river.InsertManyParams{engine.JobParams(x.ID, webhook.Name, nil)})
	require.NoError(t, err)
	own := res[0].Job.ID
	deadline := time.Now().Add(30 * time.Second)
	var state string
	for {
		// Snoozed: waiting again (River keeps a short snooze available),
		// due later than it was inserted for.
		var later bool
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT state, scheduled_at > created_at + interval '1 second' FROM `+b.db.Schema+`.river_job WHERE id = $1`,
			own).Scan(&state, &later))
		if (later && (state == "scheduled" || state == "available")) || state == "completed" || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.NotEqual(t, "completed", state, "its own job waits for the batch")
	require.Empty(t, b.recv.ByID()[x.Key], "its one request is still in flight (a delivery is recorded when answered)")
	close(release)
	b.waitFor(t, x.ID, outboxtype.StateConfirmed)
	require.Len(t, b.recv.ByID()[x.Key], 1, "delivered once")
}

// Two workers of one process that ask to claim the same effect in one
// shared statement (its own job and a batch it is in) do not both get it:
// only one of them fires it.
func TestAnEffectAskedForTwiceInOneClaimIsClaimedOnce(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	e := b.enqueue(t, "/orders")
	d, err := newDispatcher(b.db.Pool, b.cfg)
	require.NoError(t, err)
	got, err := engine.ClaimFirstMany(context.Background(), d, []uuid.UUID{e.ID, e.ID})
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.NotNil(t, got[0], "the first asking claims it")
	require.Nil(t, got[1], "the second does not: it would fire it a second time")
}

// An effect a batch hands off gets its job at once, not when the batch's
// slowest call ends: here an effect not due a first attempt (retried
// before, pending again) goes on in its own job and is confirmed while
// another effect of its batch is still waiting for its receiver.
func TestABatchHandsOffWhileACallIsInFlight(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{webhookLimit: 40 * time.Second})
	b.byDispatcher(t)
	ctx := context.Background()
	arrived, release := b.holdFirst("/slow")
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	slow, retried := b.enqueue(t, "/slow"), b.enqueue(t, "/orders")
	_, err := b.db.Pool.Exec(ctx, `UPDATE `+b.db.Schema+`.side_effects SET attempts = 1, first_fired_at = now(), last_error = 'retryable: HTTP 503'
		WHERE id = $1`, retried.ID)
	require.NoError(t, err)
	b.insertBatch(t, slow.ID, retried.ID)
	b.start(t)
	<-arrived
	got := b.waitFor(t, retried.ID, outboxtype.StateConfirmed)
	require.Equal(t, 2, got.Attempts)
	own, _ := b.jobs(t, retried.ID)
	require.Equal(t, 1, own, "its attempt is made by a job of its own")
	require.Empty(t, b.recv.ByID()[slow.Key], "the slow call is still in flight (a delivery is recorded when answered)")
	require.Equal(t, outboxtype.StateFired, b.effect(t, slow.ID).State)
	close(release)
	b.waitFor(t, slow.ID, outboxtype.StateConfirmed)
	require.Len(t, b.recv.ByID()[slow.Key], 1, "delivered once")
	require.Len(t, b.recv.ByID()[retried.Key], 1, "delivered once")
}
