-- +goose Up
-- Fair shares between tenants (docs/limits.md#fair-shares-between-tenants).
--
-- An effect may name its tenant. An effect with a tenant and no ordering
-- key gets no River job when it is enqueued: it waits in
-- outboxd_tenant_queue, and a dispatcher gives jobs to each tenant's due
-- effects in turn, never more than the tenant's window (per provider) at
-- once. outboxd_tenant_inflight holds the effects given a job and not
-- ended; the end of one (confirmed, failed, cancelled) frees its place.
-- So a tenant with a backlog of 50,000 has at most its window of jobs ahead
-- of another tenant's new effect in River's queue, instead of 50,000.
--
-- tenant is not indexed on side_effects: setting it costs the claims
-- nothing (they stay HOT).
ALTER TABLE side_effects ADD COLUMN tenant text;

CREATE TABLE outboxd_tenant_queue (
    seq       bigserial PRIMARY KEY,
    effect_id uuid NOT NULL REFERENCES side_effects (id) ON DELETE CASCADE,
    provider  text NOT NULL,
    tenant    text NOT NULL,
    due_at    timestamptz NOT NULL
);
-- Each tenant's lane in the order its effects are given jobs, and the
-- distinct lanes (a skip scan).
CREATE INDEX outboxd_tenant_queue_lane_idx ON outboxd_tenant_queue (provider, tenant, due_at, seq);
CREATE UNIQUE INDEX outboxd_tenant_queue_effect_idx ON outboxd_tenant_queue (effect_id);

CREATE TABLE outboxd_tenant_inflight (
    effect_id uuid PRIMARY KEY REFERENCES side_effects (id) ON DELETE CASCADE,
    provider  text NOT NULL,
    tenant    text NOT NULL
);
CREATE INDEX outboxd_tenant_inflight_lane_idx ON outboxd_tenant_inflight (provider, tenant);

-- The end of an effect given a job frees its place; an effect inserted
-- with a tenant and no ordering key (by Go, by outboxd_enqueue or by plain
-- SQL) joins its tenant's queue. The queue's insert runs with the
-- migration owner's rights (SECURITY DEFINER, outboxd's schema only), so
-- the roles that enqueue need no grant on it.
-- +goose StatementBegin
CREATE FUNCTION outboxd_tenant_end() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    DELETE FROM outboxd_tenant_inflight WHERE effect_id = NEW.id;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE FUNCTION outboxd_tenant_queue() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
AS $$
BEGIN
    INSERT INTO outboxd_tenant_queue (effect_id, provider, tenant, due_at)
    VALUES (NEW.id, NEW.provider, NEW.tenant, coalesce(NEW.not_before, now()));
    RETURN NULL;
END
$$;
-- +goose StatementEnd
-- +goose StatementBegin
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION %I.outboxd_tenant_end() SET search_path = %I, pg_temp', current_schema(), current_schema());
    EXECUTE format('ALTER FUNCTION %I.outboxd_tenant_queue() SET search_path = %I, pg_temp', current_schema(), current_schema());
    EXECUTE format('REVOKE ALL ON FUNCTION %I.outboxd_tenant_queue() FROM PUBLIC', current_schema());
END
$$;
-- +goose StatementEnd

CREATE TRIGGER side_effects_tenant_end AFTER UPDATE ON side_effects
    FOR EACH ROW WHEN (NEW.tenant IS NOT NULL AND NEW.state IS DISTINCT FROM OLD.state
        AND NEW.state IN ('confirmed', 'failed', 'cancelled'))
    EXECUTE FUNCTION outboxd_tenant_end();

CREATE TRIGGER side_effects_tenant_queue AFTER INSERT ON side_effects
    FOR EACH ROW WHEN (NEW.tenant IS NOT NULL AND NEW.ordering_key IS NULL)
    EXECUTE FUNCTION outboxd_tenant_queue();

-- outboxd_enqueue takes "tenant" on each effect (edits as in 00023).
CREATE TABLE outboxd_enqueue_tenant_edits (n int PRIMARY KEY, before text NOT NULL, after text NOT NULL);
-- +goose StatementBegin
INSERT INTO outboxd_enqueue_tenant_edits VALUES
(1, $e$SELECT string_agg(k, ', ') FILTER (WHERE k NOT IN ('kind', 'provider', 'payload', 'not_before', 'ordering_key', 'on_failure')) AS unknown,
                min(k) FILTER (WHERE k IN ('kind', 'provider', 'not_before', 'ordering_key', 'on_failure')$e$,
$e$SELECT string_agg(k, ', ') FILTER (WHERE k NOT IN ('kind', 'provider', 'payload', 'not_before', 'ordering_key', 'on_failure', 'tenant')) AS unknown,
                min(k) FILTER (WHERE k IN ('kind', 'provider', 'not_before', 'ordering_key', 'on_failure', 'tenant')$e$),
(2, $e$            WHEN coalesce(a.x ->> 'on_failure', 'block_key') NOT IN ('block_key', 'skip_failed') THEN$e$,
$e$            WHEN coalesce(a.x ->> 'tenant', '') <> '' AND a.x ->> 'tenant' !~ '^[A-Za-z0-9._:@-]{1,128}$' THEN
                ARRAY[a.f || '.tenant', format('"%s": a tenant is at most 128 letters, digits and . _ : @ -', left(a.x ->> 'tenant', 64))]
            WHEN coalesce(a.x ->> 'on_failure', 'block_key') NOT IN ('block_key', 'skip_failed') THEN$e$),
(3, $e$        INSERT INTO side_effects (id, source_id, kind, provider, payload, not_before, ordering_key, ordering_skip_failed)
        SELECT u.id, ev_id, u.kind, u.provider, u.payload, u.not_before, u.okey, u.oskip
        FROM unnest(ids, kinds, provs, payloads, nbs, okeys, skips) AS u(id, kind, provider, payload, not_before, okey, oskip)
        WHERE NOT existed OR NOT EXISTS (SELECT 1 FROM side_effects s WHERE s.source_id = ev_id AND s.kind = u.kind)
        ON CONFLICT DO NOTHING
        RETURNING id, provider
    ), q AS (
        INSERT INTO outbox_intake (effect_id, provider) SELECT id, provider FROM eff
    )$e$,
$e$        INSERT INTO side_effects (id, source_id, kind, provider, payload, not_before, ordering_key, ordering_skip_failed,
            tenant, waiting_for, waiting_since)
        SELECT u.id, ev_id, u.kind, u.provider, u.payload, u.not_before, u.okey, u.oskip,
            t.tenant, CASE WHEN u.okey IS NULL THEN 'turn:' || t.tenant END, CASE WHEN u.okey IS NULL AND t.tenant IS NOT NULL THEN now() END
        FROM unnest(ids, kinds, provs, payloads, nbs, okeys, skips) WITH ORDINALITY AS u(id, kind, provider, payload, not_before, okey, oskip, ord),
            LATERAL (SELECT nullif(effects -> (u.ord::int - 1) ->> 'tenant', '') AS tenant) t
        WHERE NOT existed OR NOT EXISTS (SELECT 1 FROM side_effects s WHERE s.source_id = ev_id AND s.kind = u.kind)
        ON CONFLICT DO NOTHING
        RETURNING id, provider, tenant, ordering_key
    ), q AS (
        INSERT INTO outbox_intake (effect_id, provider) SELECT id, provider FROM eff WHERE tenant IS NULL OR ordering_key IS NOT NULL
    )$e$);
-- +goose StatementEnd

-- +goose StatementBegin
DO $$
DECLARE
    s text := current_schema();
    def text := pg_get_functiondef(format('%I.outboxd_enqueue(jsonb, jsonb, boolean)', s)::regprocedure);
    e record;
BEGIN
    FOR e IN SELECT * FROM outboxd_enqueue_tenant_edits ORDER BY n LOOP
        IF position(e.before IN def) = 0 THEN
            RAISE EXCEPTION 'outboxd migration 00025: outboxd_enqueue in schema % is not as migration 00023 made it (edit %)', s, e.n;
        END IF;
        def := replace(def, e.before, e.after);
    END LOOP;
    EXECUTE def;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DO $$
DECLARE
    s text := current_schema();
    def text := pg_get_functiondef(format('%I.outboxd_enqueue(jsonb, jsonb, boolean)', s)::regprocedure);
    e record;
BEGIN
    FOR e IN SELECT * FROM outboxd_enqueue_tenant_edits ORDER BY n DESC LOOP
        def := replace(def, e.after, e.before);
    END LOOP;
    EXECUTE def;
END
$$;
-- +goose StatementEnd
DROP TABLE outboxd_enqueue_tenant_edits;
DROP TRIGGER side_effects_tenant_queue ON side_effects;
DROP TRIGGER side_effects_tenant_end ON side_effects;
DROP FUNCTION outboxd_tenant_queue();
DROP FUNCTION outboxd_tenant_end();
DROP TABLE outboxd_tenant_inflight;
DROP TABLE outboxd_tenant_queue;
ALTER TABLE side_effects DROP COLUMN tenant;
