-- +goose Up
-- Operational events: outboxd's own events about itself, delivered to the
-- endpoints that subscribe to them (docs/endpoints.md, "Operational
-- events"), recorded by triggers in the same transaction as the change
-- that causes them, so that an alert is never lost and never sent for a
-- change that rolled back:
--   outboxd.effect.failed           an effect failed (the provider refused
--                                   it, its retries ran out, its key window
--                                   closed)
--   outboxd.effect.parked_in_doubt  an effect failed while its last request
--                                   may have been applied (in doubt)
--   outboxd.drift.detected          a provider event contradicts outboxd
--   outboxd.endpoint.disabled       an endpoint was disabled (by an
--                                   operator, or by outboxd after its
--                                   deliveries failed for days)
--   outboxd.destination.breaker_open a destination stopped answering and
--                                   a dispatcher's breaker opened on it
--                                   (once while any dispatcher's is open)
--   outboxd.effect.key_window_closing an effect not ended whose key window
--                                   closes within the hour (once per
--                                   window; by the leader, every minute)
-- Nothing is written when no enabled endpoint of no tenant names the
-- type: one lookup in outboxd_endpoints per such change. The deliveries
-- of operational events raise none themselves.

-- +goose StatementBegin
-- outboxd_listened says whether an enabled endpoint of no tenant
-- subscribes to ev_type.
CREATE FUNCTION outboxd_listened(ev_type text) RETURNS boolean
LANGUAGE sql STABLE SET search_path FROM CURRENT
AS $fn$
    SELECT EXISTS (SELECT 1 FROM outboxd_endpoints ep
        WHERE ep.disabled_at IS NULL AND coalesce(ep.tenant, '') = ''
            AND EXISTS (SELECT 1 FROM unnest(ep.event_types) AS p
                WHERE p = ev_type OR (right(p, 2) = '.*' AND starts_with(ev_type, left(p, -1)))))
$fn$;
-- +goose StatementEnd

-- +goose StatementBegin
-- outboxd_emit records an operational event fanned out to its
-- subscribers, when there are any. With ev_id (an event that must be
-- raised once, whoever raises it again), the payload is stored as given
-- and a second call is a duplicate; without, the event gets a new id and
-- the time.
CREATE FUNCTION outboxd_emit(ev_type text, aggregate_type text, aggregate_id text, payload jsonb, ev_id uuid DEFAULT NULL) RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT
AS $fn$
BEGIN
    IF outboxd_listened(ev_type) THEN
        PERFORM outboxd_enqueue(jsonb_build_object('id', coalesce(ev_id, gen_random_uuid()), 'type', ev_type,
                'aggregate_type', aggregate_type, 'aggregate_id', aggregate_id,
                'payload', CASE WHEN ev_id IS NULL THEN payload || jsonb_build_object('at', now()) ELSE payload END),
            '[{"subscribers": true}]');
    END IF;
END
$fn$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION outboxd_effect_failed_event() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT
AS $fn$
BEGIN
    -- An operational event's own delivery failing raises nothing.
    IF EXISTS (SELECT 1 FROM outbox_events o WHERE o.id = NEW.source_id AND starts_with(o.event_type, 'outboxd.')) THEN
        RETURN NULL;
    END IF;
    PERFORM outboxd_emit(CASE WHEN NEW.in_doubt THEN 'outboxd.effect.parked_in_doubt' ELSE 'outboxd.effect.failed' END,
        'side_effect', NEW.id::text,
        jsonb_build_object('effect_id', NEW.id, 'event_id', NEW.source_id, 'kind', NEW.kind, 'provider', NEW.provider,
            'attempts', NEW.attempts, 'in_doubt', NEW.in_doubt, 'reason', left(coalesce(NEW.last_error, ''), 512),
            'tenant', NEW.tenant));
    RETURN NULL;
END
$fn$;
-- +goose StatementEnd
CREATE TRIGGER side_effects_failed_event AFTER UPDATE OF state ON side_effects
    FOR EACH ROW WHEN (NEW.state = 'failed' AND OLD.state IS DISTINCT FROM 'failed')
    EXECUTE FUNCTION outboxd_effect_failed_event();

-- +goose StatementBegin
CREATE FUNCTION outboxd_drift_event() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT
AS $fn$
BEGIN
    PERFORM outboxd_emit('outboxd.drift.detected', 'provider_drift', NEW.id::text,
        jsonb_build_object('drift_id', NEW.id, 'reason', NEW.reason, 'provider', NEW.provider, 'kind', NEW.kind,
            'effect_id', NEW.effect_id, 'effect_state', NEW.effect_state, 'provider_event_id', NEW.event_id,
            'provider_event_type', NEW.event_type, 'object_id', NEW.object_id, 'check', NEW.check_hint));
    RETURN NULL;
END
$fn$;
-- +goose StatementEnd
CREATE TRIGGER provider_drift_event AFTER INSERT ON provider_drift
    FOR EACH ROW EXECUTE FUNCTION outboxd_drift_event();

-- +goose StatementBegin
CREATE FUNCTION outboxd_endpoint_disabled_event() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT
AS $fn$
BEGIN
    PERFORM outboxd_emit('outboxd.endpoint.disabled', 'endpoint', NEW.id::text,
        jsonb_build_object('endpoint_id', NEW.id, 'url', NEW.url, 'tenant', NEW.tenant, 'reason', NEW.disabled_reason,
            'failing_since', NEW.failing_since));
    RETURN NULL;
END
$fn$;
-- +goose StatementEnd
CREATE TRIGGER outboxd_endpoints_disabled_event AFTER UPDATE OF disabled_at ON outboxd_endpoints
    FOR EACH ROW WHEN (OLD.disabled_at IS NULL AND NEW.disabled_at IS NOT NULL)
    EXECUTE FUNCTION outboxd_endpoint_disabled_event();

-- +goose StatementBegin
CREATE FUNCTION outboxd_breaker_event() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT
AS $fn$
BEGIN
    -- A destination whose breaker this dispatcher reports open and did
    -- not before, unless another live dispatcher reports it open already.
    PERFORM outboxd_emit('outboxd.destination.breaker_open', 'destination', d ->> 'host',
            jsonb_build_object('host', d ->> 'host', 'names', d -> 'names', 'failures_in_a_row', d -> 'failures_in_a_row',
                'open_until', d -> 'open_until', 'dispatcher', NEW.id, 'dispatcher_host', NEW.host))
    FROM jsonb_array_elements(NEW.destinations) AS d
    WHERE (d ->> 'breaker_open')::boolean
        AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(OLD.destinations) AS o
            WHERE o ->> 'host' = d ->> 'host' AND (o ->> 'breaker_open')::boolean)
        AND NOT EXISTS (SELECT 1 FROM outboxd_dispatchers x, jsonb_array_elements(x.destinations) AS xd
            WHERE x.id <> NEW.id AND x.stopped_at IS NULL AND x.seen_at > now() - interval '2 minutes'
                AND xd ->> 'host' = d ->> 'host' AND (xd ->> 'breaker_open')::boolean);
    RETURN NULL;
END
$fn$;
-- +goose StatementEnd
CREATE TRIGGER outboxd_dispatchers_breaker_event AFTER UPDATE OF destinations ON outboxd_dispatchers
    FOR EACH ROW WHEN (NEW.destinations IS DISTINCT FROM OLD.destinations)
    EXECUTE FUNCTION outboxd_breaker_event();

-- +goose StatementBegin
-- Hardened as in 00023: pg_temp last, so a temporary table cannot stand in
-- for outboxd's. The trigger functions are nobody's to call; outboxd_emit
-- runs as whoever made the change (a dispatcher, an operator), as
-- outboxd_enqueue does.
DO $$
DECLARE
    s text := current_schema();
    f text;
BEGIN
    FOREACH f IN ARRAY ARRAY['outboxd_listened(text)', 'outboxd_emit(text, text, text, jsonb, uuid)', 'outboxd_effect_failed_event()',
            'outboxd_drift_event()', 'outboxd_endpoint_disabled_event()', 'outboxd_breaker_event()'] LOOP
        EXECUTE format('ALTER FUNCTION %I.%s SET search_path = %I, pg_temp', s, f, s);
        IF f LIKE '%event()' THEN
            EXECUTE format('REVOKE ALL ON FUNCTION %I.%s FROM PUBLIC', s, f);
        END IF;
    END LOOP;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP TRIGGER outboxd_dispatchers_breaker_event ON outboxd_dispatchers;
DROP FUNCTION outboxd_breaker_event();
DROP TRIGGER outboxd_endpoints_disabled_event ON outboxd_endpoints;
DROP FUNCTION outboxd_endpoint_disabled_event();
DROP TRIGGER provider_drift_event ON provider_drift;
DROP FUNCTION outboxd_drift_event();
DROP TRIGGER side_effects_failed_event ON side_effects;
DROP FUNCTION outboxd_effect_failed_event();
DROP FUNCTION outboxd_emit(text, text, text, jsonb, uuid);
DROP FUNCTION outboxd_listened(text);
