package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A dispatcher process says it is alive by holding a session advisory
// lock, keyed by its schema and its River client ID, on a connection of
// its own for as long as it runs: Postgres releases the lock the moment
// that session ends, so a process that was killed, or lost its database,
// stops holding it at once, without waiting for a heartbeat to age.

// sqlTakeAlive takes the alive lock of record $2 in schema $1.
const sqlTakeAlive = `SELECT pg_try_advisory_lock(hashtext('outboxd alive ' || $1), hashtext($2::text))`

// sqlOrphanedJobs finds dispatch jobs River still has running, started
// before $2, whose last attempt was made by a process that holds no
// alive lock: their worker is gone.
const sqlOrphanedJobs = `
SELECT j.id, j.attempt, j.max_attempts FROM /*schema*/river_job j
WHERE j.state = 'running' AND j.kind IN ('outboxd.dispatch', 'outboxd.dispatch_batch')
	AND j.attempted_at < $2 AND cardinality(j.attempted_by) > 0
	-- A job an operator asked to cancel is River's rescuer's to end.
	AND NOT j.metadata ? 'cancel_attempted_at'
	AND NOT EXISTS (
		SELECT 1 FROM pg_locks l
		WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
			AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
			AND l.classid = hashtext('outboxd alive ' || $1)::oid
			AND l.objid = hashtext(j.attempted_by[cardinality(j.attempted_by)])::oid)
ORDER BY j.id
LIMIT 1000`

// TakeAlive takes record's alive lock on conn, a session of its own that
// stays open while the process runs. It reports false if another session
// holds it.
func (s *Store) TakeAlive(ctx context.Context, conn *pgx.Conn, record string) (bool, error) {
	var ok bool
	err := conn.QueryRow(ctx, sqlTakeAlive, s.name, record).Scan(&ok)
	return ok, err
}

// OrphanedJob is a running dispatch job whose process is gone.
type OrphanedJob struct {
	ID          int64
	Attempt     int
	MaxAttempts int
}

// OrphanedJobs returns up to 1,000 running dispatch jobs started before
// startedBefore whose process holds no alive lock.
func (s *Store) OrphanedJobs(ctx context.Context, pool *pgxpool.Pool, startedBefore time.Time) ([]OrphanedJob, error) {
	rows, err := pool.Query(ctx, s.sql(sqlOrphanedJobs), s.name, startedBefore)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[OrphanedJob])
}
