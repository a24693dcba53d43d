package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/store"
	"github.com/outboxd/outboxd/internal/testdb"
)

// TestTheSweepHashesTheLiveJobs: with a backlog whose effects all have
// their jobs, the sweeper reads the live jobs once (a hash anti join), not
// River's args index once per effect (26 s a minute at 20,000 effects).
func TestTheSweepHashesTheLiveJobs(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	st := store.NewStore(db.Schema)
	ctx := context.Background()
	s := db.Schema
	seed(t, db,
		`INSERT INTO `+s+`.outbox_events (id, event_type, payload) SELECT gen_random_uuid(), 'b', '{}' FROM generate_series(1, 3000)`,
		`INSERT INTO `+s+`.side_effects (id, source_id, kind, provider, payload, updated_at)
			SELECT gen_random_uuid(), id, 'k', 'webhook', '{}', now() - interval '5 minutes' FROM `+s+`.outbox_events`,
		`INSERT INTO `+s+`.river_job (args, kind, max_attempts, queue, state, scheduled_at)
			SELECT jsonb_build_object('effect_id', id), 'outboxd.dispatch', 100, 'webhook', 'available', now() FROM `+s+`.side_effects`,
		`ANALYZE `+s+`.side_effects, `+s+`.river_job`,
	)
	text := explain(t, db.Pool, store.SweepStatement(st), time.Now().Add(-time.Minute), 1000)
	require.Contains(t, text, "Hash Anti Join", text)
	require.NotContains(t, text, "river_job_args_index", text)
	require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		found, err := st.SweepCandidates(ctx, tx, time.Now().Add(-time.Minute))
		require.Empty(t, found, "every effect has its job")
		return err
	}))
}

// TestStuckEffectsWithoutJobsFindTheirJobsByTheArgsIndex: the stuck list
// and an action's job check look up each effect's jobs through River's
// args index, never by reading river_job's primary key backwards: with
// 20,000 finished jobs and effects that have none, that read filtered
// every job for every effect (the overview took 13-17 s with 60 such
// effects and 220,000 jobs).
func TestStuckEffectsWithoutJobsFindTheirJobsByTheArgsIndex(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	st := store.NewStore(db.Schema)
	ctx := context.Background()
	s := db.Schema
	seed(t, db,
		`INSERT INTO `+s+`.river_job (args, kind, max_attempts, queue, state, scheduled_at, finalized_at)
			SELECT jsonb_build_object('effect_id', gen_random_uuid()), 'outboxd.dispatch', 100, 'webhook', 'completed', now(), now()
			FROM generate_series(1, 20000)`,
		`INSERT INTO `+s+`.outbox_events (id, event_type, payload) SELECT gen_random_uuid(), 'b', '{}' FROM generate_series(1, 60)`,
		`INSERT INTO `+s+`.side_effects (id, source_id, kind, provider, payload, updated_at)
			SELECT gen_random_uuid(), id, 'k', 'stripe', '{}', now() - interval '1 hour' FROM `+s+`.outbox_events`,
		`ANALYZE `+s+`.side_effects, `+s+`.river_job`,
	)
	explain := func(stmt string, args ...any) (plan string) {
		require.NoError(t, store.FewJobsPlan(ctx, db.Pool, func(db store.DB) error {
			plan = explain(t, db, stmt, args...)
			return nil
		}))
		return plan
	}
	plan := explain(store.StuckStatement(st), time.Now().Add(-5*time.Minute), 50)
	require.Contains(t, plan, "river_job_args_index", plan)
	require.NotContains(t, plan, "Index Scan Backward using river_job_pkey", plan)
	require.NotContains(t, plan, "Seq Scan on river_job", plan)
	plan = explain(store.JobInStatement(st), uuid.New(), []string{"running"})
	require.NotContains(t, plan, "Index Scan Backward using river_job_pkey", plan)
	stuck, err := st.Stuck(ctx, db.Pool, time.Now().Add(-5*time.Minute), 50)
	require.NoError(t, err)
	require.Len(t, stuck, 50)
	for _, e := range stuck {
		require.Nil(t, e.JobID, "no job")
	}
}

// TestMakingJobsDueReadsOnlyTheDueJobs: every dispatcher makes due jobs
// available each second, so the statement finds them through River's
// fetching index and reads no job that is not due: reading every job took
// 27 ms a second at 70,000 snoozed jobs. It moves the due jobs of its
// queues, and nothing else.
func TestMakingJobsDueReadsOnlyTheDueJobs(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	st := store.NewStore(db.Schema)
	ctx := context.Background()
	s := db.Schema
	seed(t, db,
		`INSERT INTO `+s+`.river_job (args, kind, max_attempts, queue, state, scheduled_at)
			SELECT jsonb_build_object('effect_id', gen_random_uuid()), 'outboxd.dispatch', 100, 'webhook', 'scheduled', now() + interval '1 hour'
			FROM generate_series(1, 5000)`,
		`INSERT INTO `+s+`.river_job (args, kind, max_attempts, queue, state, scheduled_at)
			SELECT jsonb_build_object('effect_id', gen_random_uuid()), 'outboxd.dispatch', 100, q, 'retryable', now() - interval '1 second'
			FROM generate_series(1, 5), unnest(ARRAY['webhook', 'stripe']) q`,
		`ANALYZE `+s+`.river_job`,
	)
	text := explain(t, db.Pool, store.MakeDueStatement(st), time.Now(), 1000, []string{"webhook", "sendgrid"})
	require.Contains(t, text, "river_job_prioritized_fetching_index", text)
	require.NotContains(t, text, "Seq Scan", text)

	n, err := st.MakeDue(ctx, db.Pool, []string{"webhook", "sendgrid"}, time.Now(), 1000)
	require.NoError(t, err)
	require.Equal(t, 5, n, "the due jobs of its queues")
	var available, stripeDue int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'available'),
		count(*) FILTER (WHERE queue = 'stripe' AND state = 'retryable') FROM `+s+`.river_job`).Scan(&available, &stripeDue))
	require.Equal(t, 5, available, "no job that is not due")
	require.Equal(t, 5, stripeDue, "another queue's jobs are left to its dispatcher")
}

// seed runs each statement on db, in order: a table's rows for a plan
// check, and the ANALYZE that gives the planner their numbers.
func seed(t *testing.T, db *testdb.DB, statements ...string) {
	t.Helper()
	for _, q := range statements {
		_, err := db.Pool.Exec(context.Background(), q)
		require.NoError(t, err)
	}
}

// explain returns the plan Postgres chooses for stmt with args on db.
func explain(t *testing.T, db store.DB, stmt string, args ...any) string {
	t.Helper()
	rows, err := db.Query(context.Background(), "EXPLAIN "+stmt, args...)
	require.NoError(t, err)
	plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return strings.Join(plan, "\n")
}
