-- +goose Up
-- A dispatcher's report of its gates names each destination by its host
-- (a name and port, or an address) and, for a name, the address it is
-- dialled at ("address"), instead of an address and the names that
-- reached it ("names"): names behind one shared address each have their
-- own cap and breaker. The breaker_open operational event carries the
-- same fields. outboxd_breaker_event is written out in full.

-- +goose StatementBegin
DO $do$
BEGIN
    EXECUTE format($f$
CREATE OR REPLACE FUNCTION outboxd_breaker_event() RETURNS trigger
LANGUAGE plpgsql SET search_path = %1$I, pg_temp
AS $fn$
BEGIN
    -- A destination whose breaker this dispatcher reports open and did
    -- not before, unless another live dispatcher reports it open already.
    PERFORM outboxd_emit('outboxd.destination.breaker_open', 'destination', d ->> 'host',
            jsonb_build_object('host', d ->> 'host', 'address', d -> 'address', 'failures_in_a_row', d -> 'failures_in_a_row',
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
$fn$ $f$, current_schema());
END
$do$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DO $do$
BEGIN
    EXECUTE format($f$
CREATE OR REPLACE FUNCTION outboxd_breaker_event() RETURNS trigger
LANGUAGE plpgsql SET search_path = %1$I, pg_temp
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
$fn$ $f$, current_schema());
END
$do$;
-- +goose StatementEnd
