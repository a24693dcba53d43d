package engine_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/providers/webhook"
)

// enqueueAt enqueues a webhook effect to path due at notBefore (zero: at
// once) under a new event, and returns the event id and the effect.
func (b *workerBundle) enqueueAt(t *testing.T, path string, notBefore time.Time) (uuid.UUID, outbox.EffectResult) {
	t.Helper()
	ctx := context.Background()
	ev := uuid.New()
	e := outbox.EffectOf("reminder.unpaid", webhook.Payload{URL: b.recv.URL + path, Body: json.RawMessage(`{"type": "reminder"}`)})
	e.NotBefore = notBefore
	var res *outbox.Result
	require.NoError(t, pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
		var err error
		res, err = b.ob.Enqueue(ctx, tx, outbox.Event{ID: ev, Type: "order.placed"}, e)
		return err
	}))
	return ev, res.Effects[0]
}

func (b *workerBundle) cancel(t *testing.T, ev uuid.UUID, kind string) outbox.CancelResult {
	t.Helper()
	ctx := context.Background()
	var res outbox.CancelResult
	require.NoError(t, pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
		var err error
		res, err = b.ob.Cancel(ctx, tx, ev, kind, "order paid")
		return err
	}))
	return res
}

func (b *workerBundle) deliveriesTo(path string) int {
	n := 0
	for _, d := range b.recv.Deliveries() {
		if d.Path == path {
			n++
		}
	}
	return n
}

// TestScheduledEffectFiresAtItsTime: an effect with NotBefore gets a River
// job scheduled for that time, is not fired before it, is fired after it,
// and its key window starts at that first request.
func TestScheduledEffectFiresAtItsTime(t *testing.T) {
	t.Parallel()
	for name, jobs := range map[string]outbox.JobInsertion{"jobs in tx": outbox.JobsInTransaction, "jobs by dispatcher": outbox.JobsByDispatcher} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setupWorker(t, workerOpts{})
			ob, err := outbox.New(outbox.Config{Schema: b.db.Schema, Jobs: jobs, WebhookAllowedNetworks: loopback})
			require.NoError(t, err)
			b.ob = ob
			b.start(t)
			due := time.Now().Add(3 * time.Second).Truncate(time.Microsecond)
			_, e := b.enqueueAt(t, "/remind", due)

			// Its job (inserted with it, or from the intake) waits for its
			// time: River fetches no job before its scheduled_at, whether
			// it inserted it as scheduled or as available.
			require.Eventually(t, func() bool {
				var state string
				var scheduledAt time.Time
				err := b.db.Pool.QueryRow(context.Background(), `SELECT state, scheduled_at FROM `+b.db.Schema+`.river_job
					WHERE args @> jsonb_build_object('effect_id', $1::uuid)`, e.ID).Scan(&state, &scheduledAt)
				return err == nil && (state == "scheduled" || state == "available") && scheduledAt.Equal(due)
			}, 10*time.Second, 10*time.Millisecond, "the job waits for the effect's time")

			got := b.waitFor(t, e.ID, outboxtype.StateConfirmed)
			require.NotNil(t, got.NotBefore)
			require.WithinDuration(t, due, *got.NotBefore, time.Millisecond)
			require.False(t, got.FirstFiredAt.Before(due), "fired at %s, before its time %s", got.FirstFiredAt, due)
			require.False(t, got.KeyWindowFrom.Before(due), "the key window starts at the first request")
			require.Equal(t, 1, b.deliveriesTo("/remind"))
		})
	}
}

// TestAJobFiresAtItsTimeWhileRiversLeaderIsGone: River makes a scheduled
// job available only on its elected leader; while the leader that died
// still holds its lease (15 s after a SIGKILL), every dispatcher makes the
// jobs whose time has come available itself, so an effect snoozed or
// scheduled for a time still goes at that time.
func TestAJobFiresAtItsTimeWhileRiversLeaderIsGone(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	ctx := context.Background()
	// A leader that died with an hour left on its lease: River elects no
	// other, and its scheduler runs nowhere.
	_, err := b.db.Pool.Exec(ctx, `INSERT INTO `+b.db.Schema+`.river_leader (elected_at, expires_at, leader_id, name)
		VALUES (now(), now() + interval '1 hour', 'a-process-that-died', 'default')`)
	require.NoError(t, err)
	b.start(t)
	due := time.Now().Add(time.Second)
	_, e := b.enqueueAt(t, "/remind", due)
	got := b.waitFor(t, e.ID, outboxtype.StateConfirmed)
	require.False(t, got.FirstFiredAt.Before(due.Truncate(time.Microsecond)), "fired at %s, before its time %s", got.FirstFiredAt, due)
	require.Equal(t, 1, b.deliveriesTo("/remind"))
	var leader string
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT leader_id FROM `+b.db.Schema+`.river_leader`).Scan(&leader))
	require.Equal(t, "a-process-that-died", leader, "River elected no other leader meanwhile")
}

// TestAJobOfAKilledProcessIsRescuedWhileRiversLeaderIsGone: a job whose
// process died mid-run is handed back once it has run --rescue-after,
// by whichever dispatcher looks first, not only by River's rescuer on its
// leader (every 30 s): with the leader gone, the effect still goes.
func TestAJobOfAKilledProcessIsRescuedWhileRiversLeaderIsGone(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{webhookLimit: 500 * time.Millisecond})
	b.cfg.JobTimeout, b.cfg.RescueAfter = time.Second, 2*time.Second
	ctx := context.Background()
	_, err := b.db.Pool.Exec(ctx, `INSERT INTO `+b.db.Schema+`.river_leader (elected_at, expires_at, leader_id, name)
		VALUES (now(), now() + interval '1 hour', 'a-process-that-died', 'default')`)
	require.NoError(t, err)
	e := b.enqueue(t, "/rescued")
	// A process took the job and was killed before it claimed the effect.
	tag, err := b.db.Pool.Exec(ctx, `UPDATE `+b.db.Schema+`.river_job SET state = 'running', attempt = 1, attempted_at = now(),
		attempted_by = '{a-process-that-died}' WHERE args @> jsonb_build_object('effect_id', $1::uuid)`, e.ID)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
	b.start(t)
	b.waitFor(t, e.ID, outboxtype.StateConfirmed)
	require.Equal(t, 1, b.deliveriesTo("/rescued"))
	var rescued bool
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT errors[1]->>'error' LIKE 'Stuck job rescued by outboxd%' FROM `+b.db.Schema+`.river_job
		WHERE args @> jsonb_build_object('effect_id', $1::uuid)`, e.ID).Scan(&rescued))
	require.True(t, rescued, "the job's history says who rescued it")
}

// TestAJobRunEarlyWaitsForItsEffect: a job that runs before its effect is
// due (inserted at once by a tool, a sweep or a redrive) fires nothing and
// is snoozed until the effect's time.
func TestAJobRunEarlyWaitsForItsEffect(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	due := time.Now().Add(time.Hour)
	_, e := b.enqueueAt(t, "/early", due)
	ctx := context.Background()
	b.start(t)
	// The job exists once the effect is enqueued (or taken from the intake):
	// make it run now, as an early insert would.
	b.waitForJob(t, e.ID, "scheduled")
	tag, err := b.db.Pool.Exec(ctx, `UPDATE `+b.db.Schema+`.river_job SET scheduled_at = now(), state = 'available'
		WHERE args @> jsonb_build_object('effect_id', $1::uuid)`, e.ID)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())

	deadline := time.Now().Add(30 * time.Second)
	for {
		var state string
		var scheduledAt time.Time
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT state, scheduled_at FROM `+b.db.Schema+`.river_job
			WHERE args @> jsonb_build_object('effect_id', $1::uuid)`, e.ID).Scan(&state, &scheduledAt))
		// River's snooze puts the job back to scheduled, for the time the
		// worker asked, without counting an attempt.
		if state == "scheduled" && scheduledAt.After(time.Now().Add(30*time.Minute)) {
			require.WithinDuration(t, due, scheduledAt, 5*time.Second, "snoozed until the effect is due")
			break
		}
		require.True(t, time.Now().Before(deadline), "the early job was not snoozed (state %s, scheduled at %s)", state, scheduledAt)
		time.Sleep(20 * time.Millisecond)
	}
	got, err := b.store.Get(ctx, b.db.Pool, e.ID)
	require.NoError(t, err)
	require.Equal(t, outboxtype.StatePending, got.State)
	require.Nil(t, got.FirstFiredAt, "never fired before its time")
	require.Zero(t, b.deliveriesTo("/early"))
}

// TestCancelBeforeTheEffectFires: a later transaction takes back an effect
// that has not fired; it never fires, the audit trail says who and why,
// and the typed result says what Cancel found.
func TestCancelBeforeTheEffectFires(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	b.start(t)
	ev, e := b.enqueueAt(t, "/later", time.Now().Add(time.Hour))
	require.Equal(t, outbox.Cancelled, b.cancel(t, ev, "reminder.unpaid"))
	require.Equal(t, outbox.Cancelled, b.cancel(t, ev, "reminder.unpaid"), "cancelling again says the same")
	require.Equal(t, outbox.Unknown, b.cancel(t, ev, "reminder.other"))
	require.Equal(t, outbox.Unknown, b.cancel(t, uuid.New(), "reminder.unpaid"))

	got := b.waitFor(t, e.ID, outboxtype.StateCancelled)
	require.Nil(t, got.FirstFiredAt)
	audit, err := b.store.Audit(context.Background(), b.db.Pool, e.ID)
	require.NoError(t, err)
	require.Len(t, audit, 1)
	require.Equal(t, outbox.CancelActor, audit[0].Actor)
	require.Equal(t, "order paid", audit[0].Reason)

	// One that has fired is not taken back.
	ev2, e2 := b.enqueueAt(t, "/now", time.Time{})
	b.waitFor(t, e2.ID, outboxtype.StateConfirmed)
	require.Equal(t, outbox.AlreadyFired, b.cancel(t, ev2, "reminder.unpaid"))
	got2 := b.effect(t, e2.ID)
	require.Equal(t, outboxtype.StateConfirmed, got2.State)

	// Cancel rolls back with its transaction.
	ev3, e3 := b.enqueueAt(t, "/rolled", time.Now().Add(time.Hour))
	ctx := context.Background()
	tx, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	res, err := b.ob.Cancel(ctx, tx, ev3, "reminder.unpaid", "order paid")
	require.NoError(t, err)
	require.Equal(t, outbox.Cancelled, res)
	require.NoError(t, tx.Rollback(ctx))
	got3, err := b.store.Get(ctx, b.db.Pool, e3.ID)
	require.NoError(t, err)
	require.Equal(t, outboxtype.StatePending, got3.State, "rolled back with the caller's transaction")
}

// TestCancelRacingTheFire: effects due now are cancelled while the
// dispatcher fires them; each is either cancelled and never delivered, or
// reported as already fired and delivered once.
func TestCancelRacingTheFire(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	const n = 40
	type pair struct {
		ev uuid.UUID
		e  outbox.EffectResult
	}
	effects := make([]pair, n)
	for i := range effects {
		effects[i].ev, effects[i].e = b.enqueueAt(t, "/race/"+uuid.NewString(), time.Time{})
	}
	b.start(t)
	results := make([]outbox.CancelResult, n)
	var wg sync.WaitGroup
	for i := range effects {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = b.cancel(t, effects[i].ev, "reminder.unpaid")
		}()
	}
	wg.Wait()
	cancelled := 0
	for i, p := range effects {
		switch results[i] {
		case outbox.Cancelled:
			cancelled++
			got := b.waitFor(t, p.e.ID, outboxtype.StateCancelled)
			require.Nil(t, got.FirstFiredAt, "a cancelled effect never fired")
		case outbox.AlreadyFired:
			b.waitFor(t, p.e.ID, outboxtype.StateConfirmed)
		default:
			t.Fatalf("effect %d: %s", i, results[i])
		}
	}
	// Every delivery belongs to an effect reported as fired, once each.
	delivered := map[string]int{}
	for _, d := range b.recv.Deliveries() {
		delivered[d.Path]++
	}
	for i, p := range effects {
		got := b.effect(t, p.e.ID)
		var payload webhook.Payload
		require.NoError(t, json.Unmarshal(got.Payload, &payload))
		path := payload.URL[len(b.recv.URL):]
		if results[i] == outbox.Cancelled {
			require.Zero(t, delivered[path], "cancelled effect %d was delivered", i)
		} else {
			require.Equal(t, 1, delivered[path], "fired effect %d delivered once", i)
		}
	}
	t.Logf("%d of %d cancelled before they fired", cancelled, n)
}

// TestAScheduledEffectIsNotStuck: an effect waiting for its time is not in
// the stuck list, and the oldest-pending gauge counts from its time, so
// neither pages anyone before it is due.
func TestAScheduledEffectIsNotStuck(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	ctx := context.Background()
	_, e := b.enqueueAt(t, "/tomorrow", time.Now().Add(24*time.Hour))
	_, err := b.db.Pool.Exec(ctx, `UPDATE `+b.db.Schema+`.side_effects SET created_at = now() - interval '1 hour', updated_at = now() - interval '1 hour' WHERE id = $1`, e.ID)
	require.NoError(t, err)
	stuck, err := b.store.Stuck(ctx, b.db.Pool, time.Now().Add(-5*time.Minute), 10)
	require.NoError(t, err)
	require.Empty(t, stuck, "waiting for its time is not stuck")
	gauges, err := b.store.StateGauges(ctx, b.db.Pool)
	require.NoError(t, err)
	require.Len(t, gauges, 1)
	require.Equal(t, int64(1), gauges[0].Count, "counted as pending")
	require.Zero(t, gauges[0].OldestAge, "not yet due: no age")
	st, err := b.store.Stats(ctx, b.db.Pool, time.Hour)
	require.NoError(t, err)
	require.Nil(t, st.OldestPending, "not yet due")

	// Once due and not fired for longer than the threshold, it is.
	_, err = b.db.Pool.Exec(ctx, `UPDATE `+b.db.Schema+`.side_effects SET not_before = now() - interval '10 minutes' WHERE id = $1`, e.ID)
	require.NoError(t, err)
	stuck, err = b.store.Stuck(ctx, b.db.Pool, time.Now().Add(-5*time.Minute), 10)
	require.NoError(t, err)
	require.Len(t, stuck, 1)
	gauges, err = b.store.StateGauges(ctx, b.db.Pool)
	require.NoError(t, err)
	require.InDelta(t, 10*time.Minute, gauges[0].OldestAge, float64(time.Minute), "age since it was due")
}
