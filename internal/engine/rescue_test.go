package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/testdb"
	"github.com/outboxd/outboxd/outboxtype"
)

// TestAJobOfAProcessThatIsGoneIsHandedBack: a dispatch job River still
// has running, started longer ago than the job timeout, is worked again
// within seconds when the process that ran it holds no alive lock (it was
// killed), with River's own rescue an hour away; one whose process still
// holds its lock is left to it.
func TestAJobOfAProcessThatIsGoneIsHandedBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupWorker(t, workerOpts{})
	b.cfg.JobTimeout, b.cfg.RescueAfter = 10*time.Second, time.Hour
	gone, alive := b.enqueue(t, "/gone"), b.enqueue(t, "/alive")

	// Both jobs were picked up 20 s ago by processes that are not this
	// one; the second one's process still runs.
	for id, owner := range map[string]string{gone.ID.String(): "host-1-gone", alive.ID.String(): "host-2-alive"} {
		tag, err := b.db.Pool.Exec(ctx, `UPDATE `+b.db.Schema+`.river_job SET state = 'running', attempt = 1,
			attempted_at = now() - interval '20 seconds', attempted_by = ARRAY[$2]
			WHERE args->>'effect_id' = $1`, id, owner)
		require.NoError(t, err)
		require.EqualValues(t, 1, tag.RowsAffected())
	}
	conn, err := pgx.Connect(ctx, testdb.URL())
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	held, err := b.store.TakeAlive(ctx, conn, "host-2-alive")
	require.NoError(t, err)
	require.True(t, held)

	b.start(t)
	b.waitFor(t, gone.ID, outboxtype.StateConfirmed)

	// The look that handed back the first job saw the second one too.
	var state string
	var errs []string
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT state::text FROM `+b.db.Schema+`.river_job WHERE args->>'effect_id' = $1`,
		alive.ID.String()).Scan(&state))
	require.Equal(t, "running", state, "the job of a process that still runs is left to it")
	require.Equal(t, outboxtype.StatePending, b.effect(t, alive.ID).State)
	for _, d := range b.recv.Deliveries() {
		require.NotEqual(t, alive.Key, d.ID, "nothing sent for the job a live process holds")
	}
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT array(SELECT e->>'error' FROM jsonb_array_elements(to_jsonb(errors)) e)
		FROM `+b.db.Schema+`.river_job WHERE args->>'effect_id' = $1 ORDER BY id LIMIT 1`, gone.ID.String()).Scan(&errs))
	require.Contains(t, errs[0], "the process working this job is gone")
}
