-- +goose Up
-- An event recorded while an endpoint is disabled is fanned out to it as
-- to any other endpoint: its delivery is recorded and held (pending,
-- waiting for the endpoint's limit key, spending no attempt) until the
-- endpoint is enabled, when it is delivered, or dropped with the others
-- it held (outboxctl endpoints enable --drop-held). Before, the fan-out
-- skipped disabled endpoints and nothing recorded what they missed, so an
-- endpoint disabled by outboxd (a partner failing for days) or for
-- maintenance lost every event of that time for good.
--
-- outboxd_subscribers is written out in full, as 00028 made it but for
-- the disabled_at condition; the fan-out's index no longer leaves out
-- disabled endpoints.
DROP INDEX outboxd_endpoints_fanout_idx;
CREATE INDEX outboxd_endpoints_fanout_idx ON outboxd_endpoints (coalesce(tenant, ''));

-- +goose StatementBegin
DO $do$
BEGIN
    EXECUTE format($f$
CREATE OR REPLACE FUNCTION outboxd_subscribers(ev_id uuid, ev_type text, for_tenant text)
RETURNS TABLE (endpoint_id uuid, kind text, provider text, payload jsonb)
LANGUAGE sql STABLE
AS $fn$
    SELECT ep.id, 'endpoint:' || ep.id, 'endpoint', jsonb_build_object('endpoint_id', ep.id)
    FROM %1$I.outboxd_endpoints ep
    WHERE NOT EXISTS (SELECT 1 FROM %1$I.outbox_events o WHERE o.id = ev_id)
        AND coalesce(ep.tenant, '') = coalesce(for_tenant, '')
        AND EXISTS (SELECT 1 FROM unnest(ep.event_types) AS p
            WHERE p = ev_type OR (p = '*' AND NOT starts_with(ev_type, 'outboxd.'))
                OR (right(p, 2) = '.*' AND starts_with(ev_type, left(p, -1))))
    UNION ALL
    SELECT (s.payload ->> 'endpoint_id')::uuid, s.kind, s.provider, s.payload
    FROM %1$I.side_effects s
    WHERE EXISTS (SELECT 1 FROM %1$I.outbox_events o WHERE o.id = ev_id)
        AND s.source_id = ev_id AND s.kind LIKE 'endpoint:%%' AND s.provider = 'endpoint'
    ORDER BY 1
$fn$ $f$, current_schema());
END
$do$;
-- +goose StatementEnd

-- +goose Down
DROP INDEX outboxd_endpoints_fanout_idx;
CREATE INDEX outboxd_endpoints_fanout_idx ON outboxd_endpoints (coalesce(tenant, ''))
    WHERE disabled_at IS NULL;

-- +goose StatementBegin
DO $do$
BEGIN
    EXECUTE format($f$
CREATE OR REPLACE FUNCTION outboxd_subscribers(ev_id uuid, ev_type text, for_tenant text)
RETURNS TABLE (endpoint_id uuid, kind text, provider text, payload jsonb)
LANGUAGE sql STABLE
AS $fn$
    SELECT ep.id, 'endpoint:' || ep.id, 'endpoint', jsonb_build_object('endpoint_id', ep.id)
    FROM %1$I.outboxd_endpoints ep
    WHERE NOT EXISTS (SELECT 1 FROM %1$I.outbox_events o WHERE o.id = ev_id)
        AND ep.disabled_at IS NULL AND coalesce(ep.tenant, '') = coalesce(for_tenant, '')
        AND EXISTS (SELECT 1 FROM unnest(ep.event_types) AS p
            WHERE p = ev_type OR (p = '*' AND NOT starts_with(ev_type, 'outboxd.'))
                OR (right(p, 2) = '.*' AND starts_with(ev_type, left(p, -1))))
    UNION ALL
    SELECT (s.payload ->> 'endpoint_id')::uuid, s.kind, s.provider, s.payload
    FROM %1$I.side_effects s
    WHERE EXISTS (SELECT 1 FROM %1$I.outbox_events o WHERE o.id = ev_id)
        AND s.source_id = ev_id AND s.kind LIKE 'endpoint:%%' AND s.provider = 'endpoint'
    ORDER BY 1
$fn$ $f$, current_schema());
END
$do$;
-- +goose StatementEnd
