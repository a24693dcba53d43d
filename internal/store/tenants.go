package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/outboxtype"
)

const (
	sqlTenantsWaiting = `SELECT EXISTS (SELECT 1 FROM /*schema*/outboxd_tenant_queue)`

	// One dispatcher at a time gives out the tenants' jobs (the windows
	// are counted, then filled): the others skip their turn.
	sqlTenantsLock = `SELECT pg_try_advisory_xact_lock(hashtextextended('outboxd tenants ' || coalesce(nullif($1, ''), current_schema()), 0))`

	// For each lane (provider, tenant) of the queue, found by a skip scan
	// of its index: the window ($1, times the tenant's weight from $2/$3)
	// less its effects given a job and still live; then as many of its
	// due effects, oldest first, are taken from the queue and recorded as
	// in flight. Effects that ended while queued (cancelled) are dropped.
	sqlFeedTenants = `
WITH RECURSIVE lanes AS (
	(SELECT provider, tenant FROM /*schema*/outboxd_tenant_queue ORDER BY provider, tenant LIMIT 1)
	UNION ALL
	SELECT x.provider, x.tenant FROM lanes l CROSS JOIN LATERAL (
		SELECT q.provider, q.tenant FROM /*schema*/outboxd_tenant_queue q
		WHERE (q.provider, q.tenant) > (l.provider, l.tenant) ORDER BY q.provider, q.tenant LIMIT 1) x
), room AS (
	SELECT l.provider, l.tenant,
		ceil($1 * coalesce((SELECT w.weight FROM unnest($2::text[], $3::float8[]) AS w(tenant, weight) WHERE w.tenant = l.tenant), 1))::int
		- (SELECT count(*) FROM /*schema*/outboxd_tenant_inflight f JOIN /*schema*/side_effects e ON e.id = f.effect_id AND e.phase = 'live'
			WHERE f.provider = l.provider AND f.tenant = l.tenant)::int AS n
	FROM lanes l
), picked AS (
	SELECT p.seq FROM room r CROSS JOIN LATERAL (
		SELECT q.seq FROM /*schema*/outboxd_tenant_queue q
		WHERE q.provider = r.provider AND q.tenant = r.tenant AND q.due_at <= now()
		ORDER BY q.due_at, q.seq LIMIT greatest(r.n, 0)) p
), taken AS (
	DELETE FROM /*schema*/outboxd_tenant_queue q USING picked p WHERE q.seq = p.seq
	RETURNING q.effect_id, q.provider, q.tenant
), live AS (
	SELECT t.effect_id, t.provider, t.tenant FROM taken t JOIN /*schema*/side_effects e ON e.id = t.effect_id AND e.phase = 'live'
), ins AS (
	INSERT INTO /*schema*/outboxd_tenant_inflight (effect_id, provider, tenant) SELECT effect_id, provider, tenant FROM live
	ON CONFLICT (effect_id) DO UPDATE SET provider = EXCLUDED.provider
)
SELECT effect_id, provider FROM live`
)

const sqlTenantTotals = `
SELECT provider, count(DISTINCT tenant)::bigint, count(*)::bigint, min(due_at)
FROM /*schema*/outboxd_tenant_queue WHERE due_at <= now() GROUP BY provider ORDER BY provider`

// TenantTotals sums the tenants' due queues by provider, every tenant
// counted (TenantReports lists the longest queues only).
func (s *Store) TenantTotals(ctx context.Context, db DB) ([]outboxtype.TenantTotal, error) {
	rows, err := db.Query(ctx, s.sql(sqlTenantTotals))
	if err != nil {
		return nil, fmt.Errorf("tenant totals: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (outboxtype.TenantTotal, error) {
		var t outboxtype.TenantTotal
		err := r.Scan(&t.Provider, &t.Tenants, &t.Queued, &t.OldestQueued)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("tenant totals: %w", err)
	}
	return out, nil
}

const sqlTenantReports = `
SELECT provider, tenant, sum(queued)::bigint, sum(scheduled)::bigint, min(oldest), sum(inflight)::bigint FROM (
	SELECT provider, tenant, count(*) FILTER (WHERE due_at <= now()) AS queued, count(*) FILTER (WHERE due_at > now()) AS scheduled,
		min(due_at) FILTER (WHERE due_at <= now()) AS oldest, 0 AS inflight
	FROM /*schema*/outboxd_tenant_queue GROUP BY provider, tenant
	UNION ALL
	SELECT f.provider, f.tenant, 0, 0, NULL, count(*)
	FROM /*schema*/outboxd_tenant_inflight f JOIN /*schema*/side_effects e ON e.id = f.effect_id AND e.phase = 'live'
	GROUP BY f.provider, f.tenant
) x GROUP BY provider, tenant ORDER BY sum(queued) DESC, provider, tenant LIMIT $1`

// TenantReports lists the tenants with effects queued or in flight, the
// longest queue first, at most limit.
func (s *Store) TenantReports(ctx context.Context, db DB, limit int) ([]outboxtype.TenantReport, error) {
	rows, err := db.Query(ctx, s.sql(sqlTenantReports), limit)
	if err != nil {
		return nil, fmt.Errorf("tenants: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (outboxtype.TenantReport, error) {
		var t outboxtype.TenantReport
		err := r.Scan(&t.Provider, &t.Tenant, &t.Queued, &t.Scheduled, &t.OldestQueued, &t.InFlight)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("tenants: %w", err)
	}
	return out, nil
}
