package engine_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/engine"
	"github.com/outboxd/outboxd/internal/fakes"
	"github.com/outboxd/outboxd/internal/store"
	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/sideeffects"
)

// failedEffects enqueues n webhook effects to path, which answers 410 to
// each one's first request, and waits until all have failed.
func (b *workerBundle) failedEffects(t *testing.T, path string, n int) []uuid.UUID {
	t.Helper()
	gone := make([]fakes.Response, n)
	for i := range gone {
		gone[i] = fakes.Status(http.StatusGone)
	}
	b.recv.Respond(path, gone...)
	ids := make([]uuid.UUID, n)
	for i := range ids {
		ids[i] = b.enqueue(t, path).ID
	}
	for _, id := range ids {
		b.waitFor(t, id, outboxtype.StateFailed)
	}
	return ids
}

func (b *workerBundle) waitForReplay(t *testing.T, op *sideeffects.Operator, id int64, done func(engine.Replay) bool) engine.Replay {
	t.Helper()
	var r engine.Replay
	require.Eventually(t, func() bool {
		var err error
		r, err = op.Replay(context.Background(), id)
		require.NoError(t, err)
		return done(r)
	}, testWait, pollEvery)
	return r
}

func TestPacedReplayRetriesWhatFailedAtItsPace(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	b.cfg.InDoubt = map[string]providers.InDoubtPolicy{"webhook.order_paid": providers.AtMostOnce}
	d := b.start(t)
	// A step of one effect every 50 ms (20 a second), and River runs the
	// replay's job anew every 300 ms, as it does every minute in
	// production.
	engine.SetReplayTiming(d, 50*time.Millisecond, 300*time.Millisecond)
	ctx := context.Background()

	ids := b.failedEffects(t, "/orders", 14)
	replayed, old, reviewed, doubtful := ids[:11], ids[11], ids[12], ids[13]
	// One failed two hours ago, before the replay's period; one was
	// reviewed as correctly failed; one may have been delivered by an
	// earlier request, and its kind is at_most_once.
	_, err := b.db.Pool.Exec(ctx, `UPDATE `+b.db.Schema+`.side_effects SET updated_at = now() - interval '2 hours' WHERE id = $1`, old)
	require.NoError(t, err)
	op := b.operator(t)
	opts := outboxtype.ActionOpts{Actor: "oncall", Reason: "partner back after the outage"}
	_, err = op.Acknowledge(ctx, []uuid.UUID{reviewed}, opts)
	require.NoError(t, err)
	_, err = b.db.Pool.Exec(ctx, `UPDATE `+b.db.Schema+`.side_effects SET in_doubt = true WHERE id = $1`, doubtful)
	require.NoError(t, err)
	before := len(b.recv.Deliveries())

	spec := engine.ReplaySpec{FailedSince: time.Now().Add(-time.Hour), Provider: "webhook", Pace: 20}
	dry := opts
	dry.DryRun = true
	plan, err := op.StartReplay(ctx, spec, dry)
	require.NoError(t, err)
	require.Equal(t, 12, plan.Selected, "the eleven, and the one in doubt; not the old failure or the reviewed one")
	require.Zero(t, plan.ID, "a dry run writes nothing")

	r, err := op.StartReplay(ctx, spec, opts)
	require.NoError(t, err)
	require.Equal(t, outboxtype.ReplayRunning, r.State)
	require.NotZero(t, r.Job)
	r = b.waitForReplay(t, op, r.ID, func(r engine.Replay) bool { return r.State == outboxtype.ReplayDone })
	// An effect whose failing job River had not yet marked finished when
	// the replay reached it was looked at again, not skipped.
	require.Equal(t, 11, r.Retried)
	require.Equal(t, 1, r.Skipped)
	require.Zero(t, r.Again)
	require.NotNil(t, r.FinishedAt)

	for _, id := range replayed {
		b.waitFor(t, id, outboxtype.StateConfirmed)
		var retries []outboxtype.AuditEntry
		for _, a := range b.audit(t, id) {
			if a.Action == outboxtype.ActionRetry {
				retries = append(retries, a)
			}
		}
		require.Len(t, retries, 1, "each effect is retried once")
		require.Equal(t, "oncall (replay "+strconv.FormatInt(r.ID, 10)+")", retries[0].Actor)
		require.Equal(t, opts.Reason, retries[0].Reason)
	}
	require.Equal(t, outboxtype.StateFailed, b.effect(t, old).State)
	require.Equal(t, outboxtype.StateFailed, b.effect(t, reviewed).State)
	require.Equal(t, outboxtype.StateFailed, b.effect(t, doubtful).State)

	skips, err := op.ReplaySkips(ctx, r.ID, 10)
	require.NoError(t, err)
	require.Len(t, skips, 1)
	require.Equal(t, doubtful, skips[0].EffectID)
	require.Contains(t, skips[0].Reason, "at_most_once")

	// The pace held: eleven retries, one a step, took at least ten steps.
	var span time.Duration
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT (max(created_at) - min(created_at))::text::interval FROM `+b.db.Schema+`.side_effect_audit
		WHERE action = 'retry'`).Scan(&span))
	require.GreaterOrEqual(t, span, 10*50*time.Millisecond, "20 a second, one a step")
	require.Len(t, b.recv.Deliveries()[before:], 11, "one request per retried effect")
}

func TestReplayCancelledStopsAndResumesAfterARestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	opts := outboxtype.ActionOpts{Actor: "oncall", Reason: "replay after the outage"}

	t.Run("cancelled: what it retried stays retried, the rest stays failed", func(t *testing.T) {
		t.Parallel()
		b := setupWorker(t, workerOpts{})
		d := b.start(t)
		engine.SetReplayTiming(d, 100*time.Millisecond, 200*time.Millisecond)
		ids := b.failedEffects(t, "/orders", 8)
		op := b.operator(t)
		// One every half second: the cancel comes long before the end.
		r, err := op.StartReplay(ctx, engine.ReplaySpec{FailedSince: time.Now().Add(-time.Hour), Pace: 2}, opts)
		require.NoError(t, err)
		b.waitForReplay(t, op, r.ID, func(r engine.Replay) bool { return r.Retried >= 1 })
		ok, err := op.CancelReplay(ctx, r.ID, "oncall", "partner asked us to stop")
		require.NoError(t, err)
		require.True(t, ok)
		ok, err = op.CancelReplay(ctx, r.ID, "oncall", "again")
		require.NoError(t, err)
		require.False(t, ok, "a cancelled replay is not running")
		// Its job ends at its next step, and nothing is retried after.
		r = b.waitForReplay(t, op, r.ID, func(r engine.Replay) bool { return r.Job == 0 })
		require.Equal(t, outboxtype.ReplayCancelled, r.State)
		require.Equal(t, "oncall", r.CancelledBy)
		failed := 0
		for _, id := range ids {
			if b.effect(t, id).State == outboxtype.StateFailed {
				failed++
			}
		}
		require.Equal(t, len(ids)-r.Retried, failed)
		require.Less(t, r.Retried, len(ids))
	})

	t.Run("a restart resumes where it stood, retrying nothing twice", func(t *testing.T) {
		t.Parallel()
		b := setupWorker(t, workerOpts{})
		d1, err := newDispatcher(b.db.Pool, b.cfg)
		require.NoError(t, err)
		require.NoError(t, d1.Start(ctx))
		engine.SetReplayTiming(d1, 100*time.Millisecond, 200*time.Millisecond)
		ids := b.failedEffects(t, "/orders", 8)
		op := b.operator(t)
		r, err := op.StartReplay(ctx, engine.ReplaySpec{FailedSince: time.Now().Add(-time.Hour), Pace: 5}, opts)
		require.NoError(t, err)
		b.waitForReplay(t, op, r.ID, func(r engine.Replay) bool { return r.Retried >= 2 })
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		require.NoError(t, d1.Stop(sctx))
		cancel()
		r, err = op.Replay(ctx, r.ID)
		require.NoError(t, err)
		require.Equal(t, outboxtype.ReplayRunning, r.State, "a stopped process leaves the replay to the next one")
		require.Less(t, r.Retried, len(ids))

		d2 := b.start(t)
		engine.SetReplayTiming(d2, 100*time.Millisecond, 200*time.Millisecond)
		r = b.waitForReplay(t, op, r.ID, func(r engine.Replay) bool { return r.State == outboxtype.ReplayDone })
		require.Equal(t, len(ids), r.Retried)
		for _, id := range ids {
			b.waitFor(t, id, outboxtype.StateConfirmed)
			n := 0
			for _, a := range b.audit(t, id) {
				if a.Action == outboxtype.ActionRetry {
					n++
				}
			}
			require.Equal(t, 1, n, "retried once across the restart")
		}
	})
}

// TestAReplaysPaceChangesFromItsNextStep: an operator who started a
// replay too slowly speeds it up; the replay, asleep until its next slow
// step (a thousand seconds away), is woken and finishes at the new pace,
// and the change is kept with who made it and why.
func TestAReplaysPaceChangesFromItsNextStep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupWorker(t, workerOpts{})
	d := b.start(t)
	engine.SetReplayTiming(d, 100*time.Millisecond, 200*time.Millisecond)
	ids := b.failedEffects(t, "/orders", 6)
	op := b.operator(t)
	r, err := op.StartReplay(ctx, engine.ReplaySpec{FailedSince: time.Now().Add(-time.Hour), Pace: 0.001},
		outboxtype.ActionOpts{Actor: "oncall", Reason: "partner back"})
	require.NoError(t, err)
	// Its first step: one effect retried, or looked at again later if
	// River had not yet marked its failing job finished.
	r = b.waitForReplay(t, op, r.ID, func(r engine.Replay) bool { return r.Retried+r.Again == 1 })
	require.Less(t, r.Retried, len(ids))

	for _, bad := range []float64{0, -1, 5000} {
		_, _, err := op.SetReplayPace(ctx, r.ID, bad, "oncall", "faster")
		require.ErrorContains(t, err, "pace", "pace %g", bad)
	}
	_, _, err = op.SetReplayPace(ctx, r.ID, 100, "oncall", "")
	require.ErrorContains(t, err, "a reason")
	_, _, err = op.SetReplayPace(ctx, r.ID+100, 100, "oncall", "faster")
	require.ErrorIs(t, err, store.ErrReplayNotFound)

	previous, ok, err := op.SetReplayPace(ctx, r.ID, 100, "oncall", "the partner copes")
	require.NoError(t, err)
	require.True(t, ok)
	require.InDelta(t, 0.001, previous, 1e-9)
	r = b.waitForReplay(t, op, r.ID, func(r engine.Replay) bool { return r.State == outboxtype.ReplayDone })
	require.Equal(t, len(ids), r.Retried)
	require.InDelta(t, 100, r.Spec.Pace, 1e-9)

	paces, err := op.ReplayPaces(ctx, r.ID)
	require.NoError(t, err)
	require.Len(t, paces, 1, "the refused changes left nothing")
	require.InDelta(t, 100, paces[0].Pace, 1e-9)
	require.InDelta(t, 0.001, paces[0].Previous, 1e-9)
	require.Equal(t, "oncall", paces[0].Actor)
	require.Equal(t, "the partner copes", paces[0].Reason)

	_, ok, err = op.SetReplayPace(ctx, r.ID, 5, "oncall", "slower")
	require.NoError(t, err)
	require.False(t, ok, "a replay that is done has no pace to change")
}

func TestReplaySpecIsCheckedBeforeAnyWrite(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	op := b.operator(t)
	ctx := context.Background()
	opts := outboxtype.ActionOpts{Actor: "oncall", Reason: "r"}
	for _, tc := range []struct {
		spec engine.ReplaySpec
		want string
	}{
		{engine.ReplaySpec{Pace: 1}, "failed_since is required"},
		{engine.ReplaySpec{FailedSince: time.Now().Add(time.Hour), Pace: 1}, "in the future"},
		{engine.ReplaySpec{FailedSince: time.Now().Add(-time.Hour)}, "pace: it must be a positive number"},
		{engine.ReplaySpec{FailedSince: time.Now().Add(-time.Hour), Pace: 1e-12}, "pace: 1e-12 a second is below the floor of 0.001"},
		{engine.ReplaySpec{FailedSince: time.Now().Add(-time.Hour), Pace: 5000}, "over the limit of 1000"},
	} {
		_, err := op.StartReplay(ctx, tc.spec, opts)
		require.ErrorContains(t, err, tc.want)
	}
	replays, err := op.Replays(ctx, 10)
	require.NoError(t, err)
	require.Empty(t, replays)
	_, err = op.Replay(ctx, 42)
	require.ErrorIs(t, err, store.ErrReplayNotFound)
}

// TestAReplayOfOneTenant selects only that tenant's failures.
func TestAReplayOfOneTenant(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	b.start(t)
	b.recv.Respond("/gone", fakes.Status(http.StatusGone), fakes.Status(http.StatusGone), fakes.Status(http.StatusGone))
	ids := []uuid.UUID{b.enqueueFor(t, "acme", "/gone"), b.enqueueFor(t, "acme", "/gone"), b.enqueueFor(t, "beta", "/gone")}
	for _, id := range ids {
		b.waitFor(t, id, outboxtype.StateFailed)
	}
	op := b.operator(t)
	plan, err := op.StartReplay(context.Background(), engine.ReplaySpec{FailedSince: time.Now().Add(-time.Hour), Tenant: "acme", Pace: 10},
		outboxtype.ActionOpts{Actor: "oncall", Reason: "acme's partner is back", DryRun: true})
	require.NoError(t, err)
	require.Equal(t, 2, plan.Selected, "acme's two, not beta's")
}

// TestAReplaysPaceCoversTheRetriesOfWhatItRetried: a replay at the lowest
// pace retries one effect; its partner answers 500 to it. The retries of
// that failure take times of the replay's pace too (limit key
// replay:<id>): the effect soon waits for the replay's key, its job far
// ahead, instead of hitting the partner again every few milliseconds, and
// the key is listed with the replay's pace. An operator's own retry of the
// effect leaves the replay's pace behind.
func TestAReplaysPaceCoversTheRetriesOfWhatItRetried(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupWorker(t, workerOpts{maxAttempts: 1000})
	d := b.start(t)
	engine.SetReplayTiming(d, 100*time.Millisecond, 200*time.Millisecond)
	ids := b.failedEffects(t, "/orders", 2)
	failing := make([]fakes.Response, 1000)
	for i := range failing {
		failing[i] = fakes.Status(http.StatusInternalServerError)
	}
	b.recv.Respond("/orders", failing...)
	op := b.operator(t)
	r, err := op.StartReplay(ctx, engine.ReplaySpec{FailedSince: time.Now().Add(-time.Hour), Pace: 1},
		outboxtype.ActionOpts{Actor: "oncall", Reason: "partner back"})
	require.NoError(t, err)
	key := engine.ReplayLimitKey(r.ID)
	// The partner struggles: the operator slows the replay right after
	// its first retry, to the lowest pace.
	b.waitForReplay(t, op, r.ID, func(r engine.Replay) bool { return r.Retried >= 1 })
	_, ok, err := op.SetReplayPace(ctx, r.ID, 0.001, "oncall", "partner struggles")
	require.NoError(t, err)
	require.True(t, ok)

	// Its next request waits for the pace's next time, minutes away,
	// instead of retrying within milliseconds.
	var first uuid.UUID
	require.Eventually(t, func() bool {
		for _, id := range ids {
			var far bool
			err := b.db.Pool.QueryRow(ctx, `SELECT scheduled_at > now() + interval '1 minute' FROM `+b.db.Schema+`.river_job
				WHERE args->>'effect_id' = $1::text AND state = 'scheduled'`, id).Scan(&far)
			if err == nil && far {
				first = id
				return true
			}
		}
		return false
	}, testWait, pollEvery, "a retry of what the replay retried waits for the replay's pace")
	e := b.effect(t, first)
	require.Equal(t, r.ID, *e.ReplayID)
	require.NotNil(t, e.WaitingFor, "it says what it waits for, in doubt (fired) or not (pending)")
	require.Equal(t, key, *e.WaitingFor)

	limits, err := op.Limits(ctx)
	require.NoError(t, err)
	var pace *outboxtype.LimitReport
	for i := range limits {
		if limits[i].Key == key {
			pace = &limits[i]
		}
	}
	require.NotNil(t, pace, "the replay's pace is listed with the limits")
	require.InDelta(t, 0.001, *pace.Rate, 1e-9)
	require.Equal(t, "replay", pace.RateSource)

	// An operator's own retry (here of the other, still failed) is not
	// the replay's.
	var other uuid.UUID
	for _, id := range ids {
		if id != first {
			other = id
		}
	}
	if b.effect(t, other).State == outboxtype.StateFailed {
		// A retry is refused for a while if the failed effect's job is
		// still finishing (a transient refusal): ask again until it is
		// made or refused for good (the replay got to it first).
		applied := false
		require.Eventually(t, func() bool {
			changes, err := op.Retry(ctx, []uuid.UUID{other}, outboxtype.ActionOpts{Actor: "oncall", Reason: "by hand"})
			require.NoError(t, err)
			require.Len(t, changes, 1)
			applied = changes[0].Applied
			return applied || !changes[0].Transient
		}, 30*time.Second, 20*time.Millisecond)
		if applied {
			require.Nil(t, b.effect(t, other).ReplayID)
		}
	}
}
