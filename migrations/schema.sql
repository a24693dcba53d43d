-- The schema as outboxd's and River's migrations leave it (outboxd migrate
-- --schema outboxd). Written by `make schema`; a test keeps it current.
-- Read it, never apply it: migrations/*.sql are what change a database.
--
-- PostgreSQL database dump
--

--
-- Name: outboxd; Type: SCHEMA; Schema: -; Owner: -
--

CREATE SCHEMA outboxd;

--
-- Name: river_job_state; Type: TYPE; Schema: outboxd; Owner: -
--

CREATE TYPE outboxd.river_job_state AS ENUM (
    'available',
    'cancelled',
    'completed',
    'discarded',
    'pending',
    'retryable',
    'running',
    'scheduled'
);

--
-- Name: outboxd_breaker_event(); Type: FUNCTION; Schema: outboxd; Owner: -
--

CREATE FUNCTION outboxd.outboxd_breaker_event() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'outboxd', 'pg_temp'
    AS $$
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
$$;

--
-- Name: outboxd_drift_event(); Type: FUNCTION; Schema: outboxd; Owner: -
--

CREATE FUNCTION outboxd.outboxd_drift_event() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'outboxd', 'pg_temp'
    AS $$
BEGIN
    PERFORM outboxd_emit('outboxd.drift.detected', 'provider_drift', NEW.id::text,
        jsonb_build_object('drift_id', NEW.id, 'reason', NEW.reason, 'provider', NEW.provider, 'kind', NEW.kind,
            'effect_id', NEW.effect_id, 'effect_state', NEW.effect_state, 'provider_event_id', NEW.event_id,
            'provider_event_type', NEW.event_type, 'object_id', NEW.object_id, 'check', NEW.check_hint));
    RETURN NULL;
END
$$;

--
-- Name: outboxd_effect_failed_event(); Type: FUNCTION; Schema: outboxd; Owner: -
--

CREATE FUNCTION outboxd.outboxd_effect_failed_event() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'outboxd', 'pg_temp'
    AS $$
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
$$;

--
-- Name: outboxd_idempotency_key(uuid, text); Type: FUNCTION; Schema: outboxd; Owner: -
--

CREATE FUNCTION outboxd.outboxd_idempotency_key(event_id uuid, kind text) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT encode(sha256(convert_to(event_id::text || ':' || kind, 'UTF8')), 'hex') $$;

--
-- Name: outboxd_key_effect_id(text); Type: FUNCTION; Schema: outboxd; Owner: -
--

CREATE FUNCTION outboxd.outboxd_key_effect_id(key text) RETURNS uuid
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT (substr(key, 1, 12) || '8' || substr(key, 14, 3)
    || substr('89ab', (('x' || substr(key, 17, 1))::bit(4)::int & 3) + 1, 1)
    || substr(key, 18, 15))::uuid $$;

--
-- Name: outboxd_effect_id(uuid, text); Type: FUNCTION; Schema: outboxd; Owner: -
--

CREATE FUNCTION outboxd.outboxd_effect_id(event_id uuid, kind text) RETURNS uuid
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN outboxd.outboxd_key_effect_id(outboxd.outboxd_idempotency_key(event_id, kind));

--
-- Name: outboxd_emit(text, text, text, jsonb, uuid); Type: FUNCTION; Schema: outboxd; Owner: -
--

CREATE FUNCTION outboxd.outboxd_emit(ev_type text, aggregate_type text, aggregate_id text, payload jsonb, ev_id uuid DEFAULT NULL::uuid) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'outboxd', 'pg_temp'
    AS $$
BEGIN
    IF outboxd_listened(ev_type) THEN
        PERFORM outboxd_enqueue(jsonb_build_object('id', coalesce(ev_id, gen_random_uuid()), 'type', ev_type,
                'aggregate_type', aggregate_type, 'aggregate_id', aggregate_id,
                'payload', CASE WHEN ev_id IS NULL THEN payload || jsonb_build_object('at', now()) ELSE payload END),
            '[{"subscribers": true}]');
    END IF;
END
$$;

--
-- Name: outboxd_endpoint_disabled_event(); Type: FUNCTION; Schema: outboxd; Owner: -
--

CREATE FUNCTION outboxd.outboxd_endpoint_disabled_event() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'outboxd', 'pg_temp'
    AS $$
BEGIN
    PERFORM outboxd_emit('outboxd.endpoint.disabled', 'endpoint', NEW.id::text,
        jsonb_build_object('endpoint_id', NEW.id, 'url', NEW.url, 'tenant', NEW.tenant, 'reason', NEW.disabled_reason,
            'failing_since', NEW.failing_since));
    RETURN NULL;
END
$$;

--
-- Name: outboxd_enqueue(jsonb, jsonb, boolean, boolean); Type: FUNCTION; Schema: outboxd; Owner: -
--

CREATE FUNCTION outboxd.outboxd_enqueue(event jsonb, effects jsonb DEFAULT '[]'::jsonb, wake_dispatchers boolean DEFAULT false, carry boolean DEFAULT false) RETURNS TABLE(event_id uuid, event_existed boolean, effect_id uuid, kind text, idempotency_key text, duplicate boolean)
    LANGUAGE plpgsql
    SET search_path TO 'outboxd', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $_$
#variable_conflict use_column
DECLARE
    max_payload constant int := 262144; -- outbox.DefaultMaxPayloadBytes
    max_effects constant int := 100;    -- outbox.MaxEffects
    uuid_re constant text := '^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$';
    ev_id uuid;
    ev_type text;
    ev_agg_type text := '';
    ev_agg_id text := '';
    ev_payload jsonb;
    ev_okey text;
    ev_trace text;
    existed boolean;
    same boolean;
    n int;
    f text;
    bad text;
    problem text[];
    k text;
    kinds text[] := '{}';
    provs text[] := '{}';
    payloads jsonb[] := '{}';
    nbs timestamptz[] := '{}';
    okeys text[] := '{}';
    skips boolean[] := '{}';
    ids uuid[] := '{}';
    keys text[] := '{}';
    inserted uuid[] := '{}';
BEGIN
    -- The event.
    IF event IS NULL OR jsonb_typeof(event) <> 'object' THEN
        PERFORM outboxd_enqueue_invalid('event', 'a JSON object: {"id": ..., "type": ..., "payload": {...}}');
    END IF;
    -- Unknown fields, and fields that must be strings: one statement.
    SELECT CASE
        WHEN u.unknown IS NOT NULL THEN ARRAY['event', format('unknown field %s: use id, type, aggregate_type, aggregate_id, payload, ordering_key, traceparent', u.unknown)]
        WHEN u.not_string IS NOT NULL THEN ARRAY['event.' || u.not_string, format('a JSON string, not %s', jsonb_typeof(event -> u.not_string))]
        WHEN u.too_long IS NOT NULL THEN ARRAY['event.' || u.too_long, format('%s bytes, over the limit of 512', octet_length(event ->> u.too_long))]
        END INTO problem
    FROM (SELECT string_agg(k, ', ') FILTER (WHERE k NOT IN ('id', 'type', 'aggregate_type', 'aggregate_id', 'payload', 'ordering_key', 'traceparent')) AS unknown,
            min(k) FILTER (WHERE k IN ('id', 'type', 'aggregate_type', 'aggregate_id', 'ordering_key', 'traceparent')
                AND jsonb_typeof(event -> k) NOT IN ('string', 'null')) AS not_string,
            min(k) FILTER (WHERE k IN ('type', 'aggregate_type', 'aggregate_id') AND octet_length(event ->> k) > 512) AS too_long
          FROM jsonb_object_keys(event) AS k) u;
    IF problem IS NOT NULL THEN
        PERFORM outboxd_enqueue_invalid(problem[1], problem[2]);
    END IF;
    IF coalesce(event ->> 'id', '') ~ uuid_re THEN
        ev_id := (event ->> 'id')::uuid;
    END IF;
    IF ev_id IS NULL OR ev_id = '00000000-0000-0000-0000-000000000000' THEN
        PERFORM outboxd_enqueue_invalid('event.id', 'required: a UUID, derived from the command being handled so a retry gives the same id (outbox.EventID in Go)');
    END IF;
    ev_type := event ->> 'type';
    IF coalesce(ev_type, '') = '' THEN
        PERFORM outboxd_enqueue_invalid('event.type', 'required, for example "order.paid"');
    END IF;
    ev_agg_type := coalesce(event ->> 'aggregate_type', '');
    ev_agg_id := coalesce(event ->> 'aggregate_id', '');
    ev_payload := coalesce(nullif(event -> 'payload', 'null'), '{}');
    IF jsonb_typeof(ev_payload) <> 'object' THEN
        PERFORM outboxd_enqueue_invalid('event.payload', 'must be a JSON object, not ' || jsonb_typeof(ev_payload));
    END IF;
    IF octet_length(ev_payload::text) > max_payload THEN
        PERFORM outboxd_enqueue_invalid('event.payload', format('%s bytes, over the limit of %s', octet_length(ev_payload::text), max_payload));
    END IF;
    ev_trace := nullif(event ->> 'traceparent', '');
    IF ev_trace !~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$' OR left(ev_trace, 2) = 'ff'
            OR substr(ev_trace, 4, 32) = repeat('0', 32) OR substr(ev_trace, 37, 16) = repeat('0', 16) THEN
        PERFORM outboxd_enqueue_invalid('event.traceparent', 'a W3C traceparent, for example "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"');
    END IF;
    ev_okey := nullif(event ->> 'ordering_key', '');
    IF octet_length(ev_okey) > 256 THEN
        PERFORM outboxd_enqueue_invalid('event.ordering_key', format('%s bytes, over the limit of 256', octet_length(ev_okey)));
    END IF;

    -- The effects, in the order given: the first problem, if any, found
    -- by one set-based statement (a plpgsql loop costs about as much again
    -- as the inserts).
    effects := coalesce(nullif(effects, 'null'), '[]');
    IF jsonb_typeof(effects) <> 'array' THEN
        PERFORM outboxd_enqueue_invalid('effects', 'a JSON array of effects: [{"kind": ..., "provider": ..., "payload": {...}}]');
    END IF;
    IF jsonb_array_length(effects) > max_effects THEN
        PERFORM outboxd_enqueue_invalid('effects', format('%s effects, over the limit of %s per event', jsonb_array_length(effects), max_effects));
    END IF;
    -- A subscribers effect stands for one effect per endpoint (00028).
    IF effects @> '[{"subscribers": true}]' THEN
        effects := outboxd_subscriber_effects(ev_id, ev_type, ev_okey, effects);
    END IF;
    SELECT q.p[1], q.p[2] INTO f, bad FROM (
        SELECT a.o, CASE
            WHEN jsonb_typeof(a.x) <> 'object' THEN
                ARRAY[a.f, 'a JSON object: {"kind": ..., "provider": ..., "payload": {...}}']
            WHEN u.unknown IS NOT NULL THEN
                ARRAY[a.f, format('unknown field %s: use kind, provider, payload, not_before, ordering_key, on_failure', u.unknown)]
            WHEN u.not_string IS NOT NULL THEN
                ARRAY[a.f || '.' || u.not_string, format('a JSON string, not %s', jsonb_typeof(a.x -> u.not_string))]
            WHEN a.kind = '' THEN
                ARRAY[a.f || '.kind', 'required, for example "webhook.order_paid"']
            WHEN length(a.kind) > 128 THEN
                ARRAY[a.f || '.kind', format('%s characters, over the limit of 128', length(a.kind))]
            WHEN a.kind !~ '^[A-Za-z0-9][A-Za-z0-9_.:-]*$' THEN
                ARRAY[a.f || '.kind', format('"%s": use letters, digits and _ . : - only, starting with a letter or digit', a.kind)]
            WHEN a.first_of_kind < a.o THEN
                ARRAY[a.f || '.kind', format('"%s" repeats effects[%s]: each kind at most once per event', a.kind, a.first_of_kind - 1)]
            WHEN a.provider = '' THEN
                ARRAY[a.f || '.provider', 'required: webhook, stripe, sendgrid or the name of a provider your outboxd runs']
            WHEN length(a.provider) > 128 THEN
                ARRAY[a.f || '.provider', format('%s characters, over the limit of 128', length(a.provider))]
            WHEN a.provider !~ '^[a-z0-9]+([_-][a-z0-9]+)*$' OR length(a.provider) > 64 THEN
                ARRAY[a.f || '.provider', format('"%s": a provider name is lower-case letters and digits, words joined by _ or - (at most 64), such as webhook', left(a.provider, 64))]
            WHEN coalesce(a.x -> 'payload', 'null') = 'null' THEN
                ARRAY[a.f || '.payload', 'required: a JSON object']
            WHEN jsonb_typeof(a.x -> 'payload') <> 'object' THEN
                ARRAY[a.f || '.payload', 'must be a JSON object, not ' || jsonb_typeof(a.x -> 'payload')]
            WHEN octet_length((a.x -> 'payload')::text) > max_payload THEN
                ARRAY[a.f || '.payload', format('%s bytes, over the limit of %s', octet_length((a.x -> 'payload')::text), max_payload)]
            -- The built-in providers' required fields; the rest of each
            -- schema is checked by the dispatcher before the first request.
            WHEN a.provider = 'webhook' AND coalesce(a.x #>> '{payload,url}', '') !~* '^https?://[^/?#]' THEN
                ARRAY[a.f || '.payload.url', 'required: the https URL to POST to']
            WHEN a.provider = 'webhook' AND coalesce(a.x #> '{payload,body}', 'null') = 'null' THEN
                ARRAY[a.f || '.payload.body', 'required: the JSON value to POST']
            WHEN a.provider = 'stripe' AND coalesce(a.x #>> '{payload,operation}', '') = '' THEN
                ARRAY[a.f || '.payload.operation', 'required, for example "refund.create"']
            WHEN a.provider = 'stripe' AND jsonb_typeof(a.x #> '{payload,params}') IS DISTINCT FROM 'object' THEN
                ARRAY[a.f || '.payload.params', 'required: the operation''s parameters as a JSON object']
            WHEN a.provider = 'sendgrid' AND coalesce(a.x #>> '{payload,from,email}', '') = '' THEN
                ARRAY[a.f || '.payload.from.email', 'required']
            WHEN a.provider = 'sendgrid' AND (jsonb_typeof(a.x #> '{payload,to}') IS DISTINCT FROM 'array'
                    OR jsonb_array_length(CASE WHEN jsonb_typeof(a.x #> '{payload,to}') = 'array' THEN a.x #> '{payload,to}' ELSE '[]' END) = 0) THEN
                ARRAY[a.f || '.payload.to', 'required: at least one recipient']
            WHEN coalesce(a.x ->> 'not_before', '') <> ''
                    AND a.x ->> 'not_before' !~ '^\d{4}-\d\d-\d\d[T ]\d\d:\d\d(:\d\d(\.\d+)?)?(Z|z|[+-]\d\d(:?\d\d)?)$' THEN
                ARRAY[a.f || '.not_before', 'an RFC 3339 time with its offset, for example "2026-12-01T09:00:00Z"']
            WHEN octet_length(coalesce(nullif(a.x ->> 'ordering_key', ''), ev_okey)) > 256 THEN
                ARRAY[a.f || '.ordering_key', format('%s bytes, over the limit of 256', octet_length(coalesce(nullif(a.x ->> 'ordering_key', ''), ev_okey)))]
            WHEN coalesce(a.x ->> 'tenant', '') <> '' AND a.x ->> 'tenant' !~ '^[A-Za-z0-9._:@-]{1,128}$' THEN
                ARRAY[a.f || '.tenant', format('"%s": a tenant is at most 128 letters, digits and . _ : @ -', left(a.x ->> 'tenant', 64))]
            WHEN coalesce(a.x ->> 'on_failure', 'block_key') NOT IN ('block_key', 'skip_failed') THEN
                ARRAY[a.f || '.on_failure', format('unknown policy "%s": use block_key (the default) or skip_failed', a.x ->> 'on_failure')]
            END AS p
        FROM (
            SELECT e.x, e.o, format('effects[%s]', e.o - 1) AS f,
                CASE WHEN jsonb_typeof(e.x) = 'object' THEN coalesce(e.x ->> 'kind', '') END AS kind,
                CASE WHEN jsonb_typeof(e.x) = 'object' THEN coalesce(e.x ->> 'provider', '') END AS provider,
                min(e.o) OVER (PARTITION BY CASE WHEN jsonb_typeof(e.x) = 'object' THEN e.x ->> 'kind' END) AS first_of_kind
            FROM jsonb_array_elements(effects) WITH ORDINALITY AS e(x, o)
        ) a
        LEFT JOIN LATERAL (
            SELECT string_agg(k, ', ') FILTER (WHERE k NOT IN ('kind', 'provider', 'payload', 'not_before', 'ordering_key', 'on_failure', 'tenant')) AS unknown,
                min(k) FILTER (WHERE k IN ('kind', 'provider', 'not_before', 'ordering_key', 'on_failure', 'tenant')
                    AND jsonb_typeof(a.x -> k) NOT IN ('string', 'null')) AS not_string
            FROM jsonb_object_keys(CASE WHEN jsonb_typeof(a.x) = 'object' THEN a.x ELSE '{}' END) AS k
        ) u ON true
    ) q
    WHERE q.p IS NOT NULL ORDER BY q.o LIMIT 1;
    IF f IS NOT NULL THEN
        PERFORM outboxd_enqueue_invalid(f, bad);
    END IF;

    -- A not_before of the right shape that is no time (month 13, year
    -- 10000): checked one by one, as only effects that have one can fail.
    DECLARE
        nb_field text;
        nb text;
    BEGIN
        FOR nb_field, nb IN SELECT format('effects[%s].not_before', a.o - 1), a.x ->> 'not_before'
                FROM jsonb_array_elements(effects) WITH ORDINALITY AS a(x, o) WHERE coalesce(a.x ->> 'not_before', '') <> '' LOOP
            BEGIN
                PERFORM nb::timestamptz;
            EXCEPTION WHEN others THEN
                PERFORM outboxd_enqueue_invalid(nb_field, format('"%s" is no time: an RFC 3339 time with its offset, for example "2026-12-01T09:00:00Z"', left(nb, 64)));
            END;
        END LOOP;
    END;

    -- The keys and ids as outboxd_idempotency_key and outboxd_effect_id
    -- compute them, written out: called from here, those functions are not
    -- inlined and cost more than the inserts.
    SELECT coalesce(array_agg((substr(e.h, 1, 12) || '8' || substr(e.h, 14, 3)
                || substr('89ab', (('x' || substr(e.h, 17, 1))::bit(4)::int & 3) + 1, 1)
                || substr(e.h, 18, 15))::uuid ORDER BY e.o), '{}'),
        coalesce(array_agg(e.h ORDER BY e.o), '{}'),
        coalesce(array_agg(e.x ->> 'kind' ORDER BY e.o), '{}'),
        coalesce(array_agg(e.x ->> 'provider' ORDER BY e.o), '{}'),
        coalesce(array_agg(e.x -> 'payload' ORDER BY e.o), '{}'),
        coalesce(array_agg(nullif(e.x ->> 'not_before', '')::timestamptz ORDER BY e.o), '{}'),
        coalesce(array_agg(coalesce(nullif(e.x ->> 'ordering_key', ''), ev_okey) ORDER BY e.o), '{}'),
        coalesce(array_agg(coalesce(e.x ->> 'on_failure', 'block_key') = 'skip_failed' ORDER BY e.o), '{}')
    INTO ids, keys, kinds, provs, payloads, nbs, okeys, skips
    FROM (SELECT x, o, encode(sha256(convert_to(ev_id::text || ':' || (x ->> 'kind'), 'UTF8')), 'hex') AS h
          FROM jsonb_array_elements(effects) WITH ORDINALITY AS a(x, o) OFFSET 0) e;

    -- The writes. Several ordering keys are locked in one global order, as
    -- outbox.Enqueue does, so two calls naming them in different orders
    -- cannot deadlock; the insert trigger locks each key itself.
    IF (SELECT count(DISTINCT x) FROM unnest(okeys) AS x) > 1 THEN
        PERFORM pg_advisory_xact_lock(h) FROM (
            SELECT DISTINCT hashtextextended('outboxd order ' || current_schema() || ':' || x, 0) AS h
            FROM unnest(okeys) AS x WHERE x IS NOT NULL ORDER BY 1) AS l;
    END IF;

    -- carry (outbox.EffectsByDispatcher): a new event is written with its
    -- effects in its own row and one row naming it in outbox_event_intake;
    -- the dispatcher that takes that row writes the effects' rows, with
    -- these ids and keys (00040). Effects with an ordering key or a tenant
    -- take their place in a chain or a tenant's queue when their rows are
    -- written, so those are written with the event, as in Go. An event
    -- that exists goes on below as a replay.
    IF carry AND cardinality(kinds) > 0 AND NOT EXISTS (SELECT 1 FROM unnest(okeys) AS x WHERE x IS NOT NULL)
            AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(effects) AS e(x) WHERE coalesce(e.x ->> 'tenant', '') <> '') THEN
        INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, traceparent, effects)
        SELECT ev_id, ev_agg_type, ev_agg_id, ev_type, ev_payload, ev_trace,
            jsonb_agg(jsonb_build_object('kind', u.kind, 'provider', u.provider, 'payload', u.payload)
                || CASE WHEN u.nb IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('not_before', u.nb) END ORDER BY u.ord)
        FROM unnest(kinds, provs, payloads, nbs) WITH ORDINALITY AS u(kind, provider, payload, nb, ord)
        ON CONFLICT (id) DO NOTHING;
        GET DIAGNOSTICS n = ROW_COUNT;
        IF n = 1 THEN
            INSERT INTO outbox_event_intake (event_id) VALUES (ev_id);
            IF wake_dispatchers THEN
                PERFORM pg_notify('outboxd_intake', current_schema());
            END IF;
            RETURN QUERY
            SELECT ev_id, false, u.id, u.kind, u.key, false
            FROM unnest(ids, kinds, keys) WITH ORDINALITY AS u(id, kind, key, ord)
            ORDER BY u.ord;
            RETURN;
        END IF;
    END IF;

    INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, traceparent)
    VALUES (ev_id, ev_agg_type, ev_agg_id, ev_type, ev_payload, ev_trace)
    ON CONFLICT (id) DO NOTHING;
    GET DIAGNOSTICS n = ROW_COUNT;
    existed := n = 0;
    IF existed THEN
        SELECT o.aggregate_type = ev_agg_type AND o.aggregate_id = ev_agg_id AND o.event_type = ev_type AND o.payload = ev_payload
        INTO same FROM outbox_events o WHERE o.id = ev_id;
        IF NOT same THEN
            RAISE EXCEPTION USING ERRCODE = 'OB409',
                MESSAGE = format('outboxd_enqueue: conflict: event %s exists with a different type, aggregate or payload', ev_id);
        END IF;
        -- Effects the recorded event still carries (00040) are written out
        -- first, as a dispatcher would, so that this call compares with
        -- them: what Store.WriteOutEvent runs for outbox.Enqueue. The
        -- event's row lock orders it with a dispatcher doing the same;
        -- whichever comes second finds effects NULL. Looked for first, so
        -- that a caller who never replays carried events needs no UPDATE
        -- grant on outbox_events.
        IF EXISTS (SELECT 1 FROM outbox_events o WHERE o.id = ev_id AND o.effects IS NOT NULL) THEN
            WITH ev AS (
                UPDATE outbox_events e SET effects = NULL
                FROM outbox_events old
                WHERE e.id = ev_id AND old.id = e.id AND e.effects IS NOT NULL
                RETURNING e.id, e.created_at, old.effects
            ), eff AS (
                INSERT INTO side_effects (id, source_id, kind, provider, payload, not_before, created_at)
                SELECT outboxd_effect_id(ev.id, x.kind), ev.id, x.kind, x.provider, x.payload, x.not_before, ev.created_at
                FROM ev, jsonb_to_recordset(ev.effects) AS x(kind text, provider text, payload jsonb, not_before timestamptz)
                ON CONFLICT DO NOTHING
                RETURNING id, provider
            )
            INSERT INTO outbox_intake (effect_id, provider) SELECT id, provider FROM eff;
        END IF;
    END IF;

    IF cardinality(kinds) = 0 THEN
        RETURN QUERY SELECT ev_id, existed, NULL::uuid, NULL::text, NULL::text, NULL::boolean;
        RETURN;
    END IF;

    WITH eff AS (
        INSERT INTO side_effects (id, source_id, kind, provider, payload, not_before, ordering_key, ordering_skip_failed,
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
    )
    SELECT coalesce(array_agg(id), '{}') INTO inserted FROM eff;

    IF cardinality(inserted) < cardinality(kinds) THEN
        -- Effects that existed (a replay, or another transaction's insert
        -- just now) must be the same; a difference is a conflict, and the
        -- raise undoes everything this call wrote.
        SELECT u.kind INTO k
        FROM unnest(ids, kinds, provs, payloads, nbs, okeys, skips) WITH ORDINALITY AS u(id, kind, provider, payload, not_before, okey, oskip, ord)
        JOIN side_effects s ON s.source_id = ev_id AND s.kind = u.kind
        WHERE NOT u.id = ANY(inserted) AND NOT (s.provider = u.provider AND s.payload = u.payload AND s.not_before IS NOT DISTINCT FROM u.not_before
            AND s.ordering_key IS NOT DISTINCT FROM u.okey AND s.ordering_skip_failed = u.oskip)
        ORDER BY u.ord LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'OB409', COLUMN = k,
                MESSAGE = format('outboxd_enqueue: conflict: effect "%s" of event %s exists with a different provider or payload', k, ev_id);
        END IF;
    END IF;

    -- An effect not inserted whose (event, kind) has no row: its derived
    -- id is held by another event's effect. A conflict, as in Go, never a
    -- duplicate.
    SELECT u.kind INTO k
    FROM unnest(ids, kinds) WITH ORDINALITY AS u(id, kind, ord)
    WHERE NOT u.id = ANY(inserted) AND NOT EXISTS (SELECT 1 FROM side_effects s WHERE s.source_id = ev_id AND s.kind = u.kind)
    ORDER BY u.ord LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OB409', COLUMN = k,
            MESSAGE = format('outboxd_enqueue: conflict: effect "%s" of event %s: its id is held by another event''s effect', k, ev_id);
    END IF;

    IF wake_dispatchers AND cardinality(inserted) > 0 THEN
        PERFORM pg_notify('outboxd_intake', current_schema());
    END IF;

    RETURN QUERY
    SELECT ev_id, existed, coalesce(s.id, u.id), u.kind, u.key, NOT u.id = ANY(inserted)
    FROM unnest(ids, kinds, keys) WITH ORDINALITY AS u(id, kind, key, ord)
    LEFT JOIN side_effects s ON existed AND s.source_id = ev_id AND s.kind = u.kind
    ORDER BY u.ord;
END
$_$;

--
-- Name: outboxd_enqueue_invalid(text, text); Type: FUNCTION; Schema: outboxd; Owner: -
--

CREATE FUNCTION outboxd.outboxd_enqueue_invalid(field text, problem text) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'OB400', COLUMN = field,
        MESSAGE = format('outboxd_enqueue: invalid %s: %s', field, problem);
END
$$;

--
-- Name: outboxd_listened(text); Type: FUNCTION; Schema: outboxd; Owner: -
--

CREATE FUNCTION outboxd.outboxd_listened(ev_type text) RETURNS boolean
    LANGUAGE sql STABLE
    SET search_path TO 'outboxd', 'pg_temp'
    AS $$
    SELECT EXISTS (SELECT 1 FROM outboxd_endpoints ep
        WHERE ep.disabled_at IS NULL AND coalesce(ep.tenant, '') = ''
            AND EXISTS (SELECT 1 FROM unnest(ep.event_types) AS p
                WHERE p = ev_type OR (right(p, 2) = '.*' AND starts_with(ev_type, left(p, -1)))))
$$;

--
-- Name: outboxd_order_effect(); Type: FUNCTION; Schema: outboxd; Owner: -
--

CREATE FUNCTION outboxd.outboxd_order_effect() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'outboxd', 'pg_temp'
    AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('outboxd order ' || TG_TABLE_SCHEMA || ':' || NEW.ordering_key, 0));
    NEW.ordering_seq := nextval(format('%I.side_effects_ordering_seq', TG_TABLE_SCHEMA));
    INSERT INTO outbox_order_wake (ordering_key) VALUES (NEW.ordering_key)
        ON CONFLICT (ordering_key) DO UPDATE SET ordering_key = EXCLUDED.ordering_key;
    RETURN NEW;
END
$$;

--
-- Name: outboxd_order_wake(); Type: FUNCTION; Schema: outboxd; Owner: -
--

CREATE FUNCTION outboxd.outboxd_order_wake() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'outboxd', 'pg_temp'
    AS $$
BEGIN
    INSERT INTO outbox_order_wake (ordering_key) VALUES (NEW.ordering_key)
        ON CONFLICT (ordering_key) DO UPDATE SET ordering_key = EXCLUDED.ordering_key;
    RETURN NULL;
END
$$;

--
-- Name: outboxd_subscriber_effects(uuid, text, text, jsonb); Type: FUNCTION; Schema: outboxd; Owner: -
--

CREATE FUNCTION outboxd.outboxd_subscriber_effects(ev_id uuid, ev_type text, ev_okey text, effects jsonb) RETURNS jsonb
    LANGUAGE plpgsql
    SET search_path TO 'outboxd', 'pg_temp'
    AS $$
DECLARE
    f text;
    bad text;
BEGIN
    SELECT format('effects[%s]', e.o - 1),
        format('unknown field %s in a subscribers effect: use subscribers, not_before, ordering_key, on_failure, tenant', k)
    INTO f, bad
    FROM jsonb_array_elements(effects) WITH ORDINALITY AS e(x, o), jsonb_object_keys(e.x) AS k
    WHERE e.x @> '{"subscribers": true}' AND k NOT IN ('subscribers', 'not_before', 'ordering_key', 'on_failure', 'tenant')
    ORDER BY e.o LIMIT 1;
    IF f IS NOT NULL THEN
        PERFORM outboxd_enqueue_invalid(f, bad);
    END IF;
    SELECT format('effects[%s]', e.o - 1) INTO f
    FROM jsonb_array_elements(effects) WITH ORDINALITY AS e(x, o)
    WHERE e.x @> '{"subscribers": true}' ORDER BY e.o OFFSET 1 LIMIT 1;
    IF f IS NOT NULL THEN
        PERFORM outboxd_enqueue_invalid(f, 'a second subscribers effect: an event reaches each endpoint once');
    END IF;
    RETURN (
        SELECT coalesce(jsonb_agg(y.x ORDER BY y.o, y.n), '[]')
        FROM (
            SELECT e.x, e.o, 0::bigint AS n
            FROM jsonb_array_elements(effects) WITH ORDINALITY AS e(x, o)
            WHERE NOT e.x @> '{"subscribers": true}'
            UNION ALL
            SELECT jsonb_strip_nulls(jsonb_build_object('kind', s.kind, 'provider', s.provider, 'payload', s.payload,
                    'not_before', e.x -> 'not_before', 'on_failure', e.x -> 'on_failure', 'tenant', e.x -> 'tenant',
                    'ordering_key', coalesce(nullif(e.x ->> 'ordering_key', ''), ev_okey) || '@' || s.endpoint_id)),
                e.o, row_number() OVER (ORDER BY s.endpoint_id)
            FROM jsonb_array_elements(effects) WITH ORDINALITY AS e(x, o),
                outboxd_subscribers(ev_id, ev_type, nullif(e.x ->> 'tenant', '')) AS s
            WHERE e.x @> '{"subscribers": true}'
        ) y);
END
$$;

--
-- Name: outboxd_subscribers(uuid, text, text); Type: FUNCTION; Schema: outboxd; Owner: -
--

CREATE FUNCTION outboxd.outboxd_subscribers(ev_id uuid, ev_type text, for_tenant text) RETURNS TABLE(endpoint_id uuid, kind text, provider text, payload jsonb)
    LANGUAGE sql STABLE
    AS $$
    SELECT ep.id, 'endpoint:' || ep.id, 'endpoint', jsonb_build_object('endpoint_id', ep.id)
    FROM outboxd.outboxd_endpoints ep
    WHERE NOT EXISTS (SELECT 1 FROM outboxd.outbox_events o WHERE o.id = ev_id)
        AND coalesce(ep.tenant, '') = coalesce(for_tenant, '')
        AND EXISTS (SELECT 1 FROM unnest(ep.event_types) AS p
            WHERE p = ev_type OR (p = '*' AND NOT starts_with(ev_type, 'outboxd.'))
                OR (right(p, 2) = '.*' AND starts_with(ev_type, left(p, -1))))
    UNION ALL
    SELECT (s.payload ->> 'endpoint_id')::uuid, s.kind, s.provider, s.payload
    FROM outboxd.side_effects s
    WHERE EXISTS (SELECT 1 FROM outboxd.outbox_events o WHERE o.id = ev_id)
        AND s.source_id = ev_id AND s.kind LIKE 'endpoint:%' AND s.provider = 'endpoint'
    ORDER BY 1
$$;

--
-- Name: outboxd_tenant_end(); Type: FUNCTION; Schema: outboxd; Owner: -
--

CREATE FUNCTION outboxd.outboxd_tenant_end() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'outboxd', 'pg_temp'
    AS $$
BEGIN
    DELETE FROM outboxd_tenant_inflight WHERE effect_id = NEW.id;
    RETURN NULL;
END
$$;

--
-- Name: outboxd_tenant_queue(); Type: FUNCTION; Schema: outboxd; Owner: -
--

CREATE FUNCTION outboxd.outboxd_tenant_queue() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'outboxd', 'pg_temp'
    AS $$
BEGIN
    INSERT INTO outboxd_tenant_queue (effect_id, provider, tenant, due_at)
    VALUES (NEW.id, NEW.provider, NEW.tenant, coalesce(NEW.not_before, now()));
    RETURN NULL;
END
$$;

--
-- Name: river_job_state_in_bitmask(bit, outboxd.river_job_state); Type: FUNCTION; Schema: outboxd; Owner: -
--

CREATE FUNCTION outboxd.river_job_state_in_bitmask(bitmask bit, state outboxd.river_job_state) RETURNS boolean
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT CASE state
        WHEN 'available' THEN get_bit(bitmask, 7)
        WHEN 'cancelled' THEN get_bit(bitmask, 6)
        WHEN 'completed' THEN get_bit(bitmask, 5)
        WHEN 'discarded' THEN get_bit(bitmask, 4)
        WHEN 'pending'   THEN get_bit(bitmask, 3)
        WHEN 'retryable' THEN get_bit(bitmask, 2)
        WHEN 'running'   THEN get_bit(bitmask, 1)
        WHEN 'scheduled' THEN get_bit(bitmask, 0)
        ELSE 0
    END = 1;
$$;

--
-- Name: idempotency_key_audit; Type: TABLE; Schema: outboxd; Owner: -
--

CREATE TABLE outboxd.idempotency_key_audit (
    id bigint NOT NULL,
    key_id uuid NOT NULL,
    action text NOT NULL,
    actor text NOT NULL,
    reason text NOT NULL,
    from_state text NOT NULL,
    to_state text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL
);

--
-- Name: idempotency_key_audit_id_seq; Type: SEQUENCE; Schema: outboxd; Owner: -
--

CREATE SEQUENCE outboxd.idempotency_key_audit_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: idempotency_key_audit_id_seq; Type: SEQUENCE OWNED BY; Schema: outboxd; Owner: -
--

ALTER SEQUENCE outboxd.idempotency_key_audit_id_seq OWNED BY outboxd.idempotency_key_audit.id;

--
-- Name: idempotency_keys; Type: TABLE; Schema: outboxd; Owner: -
--

CREATE TABLE outboxd.idempotency_keys (
    id uuid DEFAULT gen_random_uuid() NOT NULL,
    scope text NOT NULL,
    method text NOT NULL,
    route text NOT NULL,
    key text NOT NULL,
    state text NOT NULL,
    fingerprint text NOT NULL,
    fingerprint_parts jsonb DEFAULT '{}'::jsonb NOT NULL,
    claim_token uuid NOT NULL,
    locked_until timestamp with time zone,
    status integer,
    response_headers jsonb,
    response_body bytea,
    error text DEFAULT ''::text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone,
    CONSTRAINT idempotency_keys_completed_has_response CHECK (((state <> 'completed'::text) OR (status IS NOT NULL))),
    CONSTRAINT idempotency_keys_state_check CHECK ((state = ANY (ARRAY['in_progress'::text, 'completed'::text, 'failed'::text])))
);

--
-- Name: inbox_messages; Type: TABLE; Schema: outboxd; Owner: -
--

CREATE TABLE outboxd.inbox_messages (
    source text NOT NULL,
    message_id text NOT NULL,
    received_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone NOT NULL
);

--
-- Name: outbox_intake_watch; Type: SEQUENCE; Schema: outboxd; Owner: -
--

CREATE SEQUENCE outboxd.outbox_intake_watch
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: outbox_event_intake; Type: TABLE; Schema: outboxd; Owner: -
--

CREATE TABLE outboxd.outbox_event_intake (
    event_id uuid NOT NULL,
    watch bigint DEFAULT nextval('outboxd.outbox_intake_watch'::regclass) NOT NULL
);

--
-- Name: outbox_events; Type: TABLE; Schema: outboxd; Owner: -
--

CREATE TABLE outboxd.outbox_events (
    id uuid NOT NULL,
    aggregate_type text DEFAULT ''::text NOT NULL,
    aggregate_id text DEFAULT ''::text NOT NULL,
    event_type text NOT NULL,
    payload jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    traceparent text,
    effects jsonb,
    CONSTRAINT outbox_events_effects_check CHECK (((effects IS NULL) OR (jsonb_typeof(effects) = 'array'::text)))
);

--
-- Name: outbox_intake; Type: TABLE; Schema: outboxd; Owner: -
--

CREATE TABLE outboxd.outbox_intake (
    effect_id uuid NOT NULL,
    provider text NOT NULL,
    watch bigint DEFAULT nextval('outboxd.outbox_intake_watch'::regclass) NOT NULL
);

--
-- Name: outbox_order_wake; Type: TABLE; Schema: outboxd; Owner: -
--

CREATE TABLE outboxd.outbox_order_wake (
    ordering_key text NOT NULL,
    watch bigint DEFAULT nextval('outboxd.outbox_intake_watch'::regclass) NOT NULL
);

--
-- Name: outboxd_dispatchers; Type: TABLE; Schema: outboxd; Owner: -
--

CREATE TABLE outboxd.outboxd_dispatchers (
    id text NOT NULL,
    host text NOT NULL,
    pid integer NOT NULL,
    started_at timestamp with time zone DEFAULT now() NOT NULL,
    seen_at timestamp with time zone DEFAULT now() NOT NULL,
    stopped_at timestamp with time zone,
    settings jsonb NOT NULL,
    destinations jsonb DEFAULT '[]'::jsonb NOT NULL
);

--
-- Name: outboxd_endpoint_audit; Type: TABLE; Schema: outboxd; Owner: -
--

CREATE TABLE outboxd.outboxd_endpoint_audit (
    id bigint NOT NULL,
    endpoint_id uuid NOT NULL,
    action text NOT NULL,
    actor text NOT NULL,
    reason text DEFAULT ''::text NOT NULL,
    details jsonb DEFAULT '{}'::jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL
);

--
-- Name: outboxd_endpoint_audit_id_seq; Type: SEQUENCE; Schema: outboxd; Owner: -
--

CREATE SEQUENCE outboxd.outboxd_endpoint_audit_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: outboxd_endpoint_audit_id_seq; Type: SEQUENCE OWNED BY; Schema: outboxd; Owner: -
--

ALTER SEQUENCE outboxd.outboxd_endpoint_audit_id_seq OWNED BY outboxd.outboxd_endpoint_audit.id;

--
-- Name: outboxd_endpoint_secrets; Type: TABLE; Schema: outboxd; Owner: -
--

CREATE TABLE outboxd.outboxd_endpoint_secrets (
    id bigint NOT NULL,
    endpoint_id uuid NOT NULL,
    sealed bytea NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone
);

--
-- Name: outboxd_endpoint_secrets_id_seq; Type: SEQUENCE; Schema: outboxd; Owner: -
--

CREATE SEQUENCE outboxd.outboxd_endpoint_secrets_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: outboxd_endpoint_secrets_id_seq; Type: SEQUENCE OWNED BY; Schema: outboxd; Owner: -
--

ALTER SEQUENCE outboxd.outboxd_endpoint_secrets_id_seq OWNED BY outboxd.outboxd_endpoint_secrets.id;

--
-- Name: outboxd_endpoints; Type: TABLE; Schema: outboxd; Owner: -
--

CREATE TABLE outboxd.outboxd_endpoints (
    id uuid NOT NULL,
    url text NOT NULL,
    tenant text,
    description text DEFAULT ''::text NOT NULL,
    event_types text[] NOT NULL,
    headers jsonb DEFAULT '{}'::jsonb NOT NULL,
    max_in_flight integer,
    client_cert text,
    client_key_sealed bytea,
    disabled_at timestamp with time zone,
    disabled_reason text,
    failing_since timestamp with time zone,
    delivered_at timestamp with time zone,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT outboxd_endpoints_event_types_check CHECK ((cardinality(event_types) > 0)),
    CONSTRAINT outboxd_endpoints_max_in_flight_check CHECK ((max_in_flight > 0))
);

--
-- Name: outboxd_limit_audit; Type: TABLE; Schema: outboxd; Owner: -
--

CREATE TABLE outboxd.outboxd_limit_audit (
    id bigint NOT NULL,
    key text NOT NULL,
    actor text NOT NULL,
    reason text NOT NULL,
    from_rate double precision,
    to_rate double precision,
    resumed boolean DEFAULT false NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    in_any_second boolean
);

--
-- Name: outboxd_limit_audit_id_seq; Type: SEQUENCE; Schema: outboxd; Owner: -
--

CREATE SEQUENCE outboxd.outboxd_limit_audit_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: outboxd_limit_audit_id_seq; Type: SEQUENCE OWNED BY; Schema: outboxd; Owner: -
--

ALTER SEQUENCE outboxd.outboxd_limit_audit_id_seq OWNED BY outboxd.outboxd_limit_audit.id;

--
-- Name: outboxd_limits; Type: TABLE; Schema: outboxd; Owner: -
--

CREATE TABLE outboxd.outboxd_limits (
    key text NOT NULL,
    rate double precision,
    rate_source text DEFAULT 'default'::text NOT NULL,
    current_rate double precision,
    current_at timestamp with time zone DEFAULT now() NOT NULL,
    tokens double precision DEFAULT 0 NOT NULL,
    refilled_at timestamp with time zone DEFAULT now() NOT NULL,
    paused_until timestamp with time zone,
    throttled_in_a_row integer DEFAULT 0 NOT NULL,
    throttles bigint DEFAULT 0 NOT NULL,
    last_throttle_at timestamp with time zone,
    granted bigint DEFAULT 0 NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    slow_start boolean DEFAULT false NOT NULL,
    in_any_second boolean DEFAULT false NOT NULL,
    CONSTRAINT outboxd_limits_current_rate_check CHECK (((current_rate IS NULL) OR (current_rate > (0)::double precision))),
    CONSTRAINT outboxd_limits_rate_check CHECK (((rate IS NULL) OR (rate > (0)::double precision)))
);

--
-- Name: outboxd_minute_counts; Type: TABLE; Schema: outboxd; Owner: -
--

CREATE TABLE outboxd.outboxd_minute_counts (
    minute timestamp with time zone NOT NULL,
    kind text NOT NULL,
    phase text NOT NULL,
    attempts text NOT NULL,
    effects bigint NOT NULL
);

--
-- Name: outboxd_minute_latency; Type: TABLE; Schema: outboxd; Owner: -
--

CREATE TABLE outboxd.outboxd_minute_latency (
    minute timestamp with time zone NOT NULL,
    kind text NOT NULL,
    bucket smallint NOT NULL,
    effects bigint NOT NULL
);

--
-- Name: outboxd_minutes_summarized; Type: TABLE; Schema: outboxd; Owner: -
--

CREATE TABLE outboxd.outboxd_minutes_summarized (
    one boolean DEFAULT true NOT NULL,
    since timestamp with time zone NOT NULL,
    up_to timestamp with time zone NOT NULL,
    CONSTRAINT outboxd_minutes_summarized_one_check CHECK (one)
);

--
-- Name: outboxd_provider_guarantees; Type: TABLE; Schema: outboxd; Owner: -
--

CREATE TABLE outboxd.outboxd_provider_guarantees (
    provider text NOT NULL,
    key_window_ms bigint NOT NULL,
    key_window_margin_ms bigint NOT NULL,
    in_doubt text NOT NULL,
    reported_by text NOT NULL,
    reported_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT outboxd_provider_guarantees_key_window_margin_ms_check CHECK ((key_window_margin_ms >= 0)),
    CONSTRAINT outboxd_provider_guarantees_key_window_ms_check CHECK ((key_window_ms >= 0))
);

--
-- Name: outboxd_replay_paces; Type: TABLE; Schema: outboxd; Owner: -
--

CREATE TABLE outboxd.outboxd_replay_paces (
    replay_id bigint NOT NULL,
    pace double precision NOT NULL,
    previous double precision NOT NULL,
    actor text NOT NULL,
    reason text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT outboxd_replay_paces_pace_check CHECK ((pace > (0)::double precision))
);

--
-- Name: outboxd_replay_skips; Type: TABLE; Schema: outboxd; Owner: -
--

CREATE TABLE outboxd.outboxd_replay_skips (
    replay_id bigint NOT NULL,
    effect_id uuid NOT NULL,
    reason text NOT NULL,
    transient boolean DEFAULT false NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL
);

--
-- Name: outboxd_replays; Type: TABLE; Schema: outboxd; Owner: -
--

CREATE TABLE outboxd.outboxd_replays (
    id bigint NOT NULL,
    state text DEFAULT 'running'::text NOT NULL,
    actor text NOT NULL,
    reason text NOT NULL,
    failed_since timestamp with time zone NOT NULL,
    failed_before timestamp with time zone NOT NULL,
    kind text,
    provider text,
    host text,
    tenant text,
    pace double precision NOT NULL,
    allow_duplicate boolean DEFAULT false NOT NULL,
    cursor_at timestamp with time zone,
    cursor_id uuid,
    selected integer DEFAULT 0 NOT NULL,
    retried integer DEFAULT 0 NOT NULL,
    last_error text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    finished_at timestamp with time zone,
    cancelled_by text,
    cancel_reason text,
    next_step_at timestamp with time zone,
    CONSTRAINT outboxd_replays_pace_check CHECK ((pace > (0)::double precision)),
    CONSTRAINT outboxd_replays_state_check CHECK ((state = ANY (ARRAY['running'::text, 'done'::text, 'cancelled'::text])))
);

--
-- Name: outboxd_replays_id_seq; Type: SEQUENCE; Schema: outboxd; Owner: -
--

CREATE SEQUENCE outboxd.outboxd_replays_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: outboxd_replays_id_seq; Type: SEQUENCE OWNED BY; Schema: outboxd; Owner: -
--

ALTER SEQUENCE outboxd.outboxd_replays_id_seq OWNED BY outboxd.outboxd_replays.id;

--
-- Name: outboxd_schema_version; Type: TABLE; Schema: outboxd; Owner: -
--

CREATE TABLE outboxd.outboxd_schema_version (
    id integer NOT NULL,
    version_id bigint NOT NULL,
    is_applied boolean NOT NULL,
    tstamp timestamp without time zone DEFAULT now() NOT NULL
);

--
-- Name: outboxd_schema_version_id_seq; Type: SEQUENCE; Schema: outboxd; Owner: -
--

ALTER TABLE outboxd.outboxd_schema_version ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY (
    SEQUENCE NAME outboxd.outboxd_schema_version_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: outboxd_tenant_inflight; Type: TABLE; Schema: outboxd; Owner: -
--

CREATE TABLE outboxd.outboxd_tenant_inflight (
    effect_id uuid NOT NULL,
    provider text NOT NULL,
    tenant text NOT NULL
);

--
-- Name: outboxd_tenant_queue; Type: TABLE; Schema: outboxd; Owner: -
--

CREATE TABLE outboxd.outboxd_tenant_queue (
    seq bigint NOT NULL,
    effect_id uuid NOT NULL,
    provider text NOT NULL,
    tenant text NOT NULL,
    due_at timestamp with time zone NOT NULL,
    watch bigint DEFAULT nextval('outboxd.outbox_intake_watch'::regclass) NOT NULL
);

--
-- Name: outboxd_tenant_queue_seq_seq; Type: SEQUENCE; Schema: outboxd; Owner: -
--

CREATE SEQUENCE outboxd.outboxd_tenant_queue_seq_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: outboxd_tenant_queue_seq_seq; Type: SEQUENCE OWNED BY; Schema: outboxd; Owner: -
--

ALTER SEQUENCE outboxd.outboxd_tenant_queue_seq_seq OWNED BY outboxd.outboxd_tenant_queue.seq;

--
-- Name: provider_drift; Type: TABLE; Schema: outboxd; Owner: -
--

CREATE TABLE outboxd.provider_drift (
    id bigint NOT NULL,
    reason text NOT NULL,
    provider text NOT NULL,
    kind text DEFAULT ''::text NOT NULL,
    effect_id uuid,
    effect_state text DEFAULT ''::text NOT NULL,
    idempotency_key text NOT NULL,
    event_id text NOT NULL,
    event_type text NOT NULL,
    object_id text DEFAULT ''::text NOT NULL,
    check_hint text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    details jsonb DEFAULT '{}'::jsonb NOT NULL,
    acknowledged_at timestamp with time zone,
    acknowledged_by text,
    ack_reason text
);

--
-- Name: provider_drift_id_seq; Type: SEQUENCE; Schema: outboxd; Owner: -
--

CREATE SEQUENCE outboxd.provider_drift_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: provider_drift_id_seq; Type: SEQUENCE OWNED BY; Schema: outboxd; Owner: -
--

ALTER SEQUENCE outboxd.provider_drift_id_seq OWNED BY outboxd.provider_drift.id;

--
-- Name: river_job; Type: TABLE; Schema: outboxd; Owner: -
--

CREATE TABLE outboxd.river_job (
    id bigint NOT NULL,
    state outboxd.river_job_state DEFAULT 'available'::outboxd.river_job_state NOT NULL,
    attempt smallint DEFAULT 0 NOT NULL,
    max_attempts smallint DEFAULT 25 NOT NULL,
    attempted_at timestamp with time zone,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    finalized_at timestamp with time zone,
    scheduled_at timestamp with time zone DEFAULT now() NOT NULL,
    priority smallint DEFAULT 1 NOT NULL,
    args jsonb NOT NULL,
    attempted_by text[],
    errors jsonb[],
    kind text NOT NULL,
    metadata jsonb DEFAULT '{}'::jsonb NOT NULL,
    queue text DEFAULT 'default'::text NOT NULL,
    tags character varying(255)[] DEFAULT '{}'::character varying[] NOT NULL,
    unique_key bytea,
    unique_states bit(8),
    CONSTRAINT finalized_or_finalized_at_null CHECK ((((finalized_at IS NULL) AND (state <> ALL (ARRAY['cancelled'::outboxd.river_job_state, 'completed'::outboxd.river_job_state, 'discarded'::outboxd.river_job_state]))) OR ((finalized_at IS NOT NULL) AND (state = ANY (ARRAY['cancelled'::outboxd.river_job_state, 'completed'::outboxd.river_job_state, 'discarded'::outboxd.river_job_state]))))),
    CONSTRAINT kind_length CHECK (((char_length(kind) > 0) AND (char_length(kind) < 128))),
    CONSTRAINT max_attempts_is_positive CHECK ((max_attempts > 0)),
    CONSTRAINT priority_in_range CHECK (((priority >= 1) AND (priority <= 4))),
    CONSTRAINT queue_length CHECK (((char_length(queue) > 0) AND (char_length(queue) < 128)))
)
WITH (autovacuum_vacuum_scale_factor='0.05', autovacuum_vacuum_threshold='10000', autovacuum_analyze_scale_factor='0.05');

--
-- Name: river_job_id_seq; Type: SEQUENCE; Schema: outboxd; Owner: -
--

CREATE SEQUENCE outboxd.river_job_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: river_job_id_seq; Type: SEQUENCE OWNED BY; Schema: outboxd; Owner: -
--

ALTER SEQUENCE outboxd.river_job_id_seq OWNED BY outboxd.river_job.id;

--
-- Name: river_leader; Type: TABLE; Schema: outboxd; Owner: -
--

CREATE UNLOGGED TABLE outboxd.river_leader (
    elected_at timestamp with time zone NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    leader_id text NOT NULL,
    name text DEFAULT 'default'::text NOT NULL,
    CONSTRAINT leader_id_length CHECK (((char_length(leader_id) > 0) AND (char_length(leader_id) < 128))),
    CONSTRAINT name_length CHECK ((name = 'default'::text))
);

--
-- Name: river_migration; Type: TABLE; Schema: outboxd; Owner: -
--

CREATE TABLE outboxd.river_migration (
    line text NOT NULL,
    version bigint NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT line_length CHECK (((char_length(line) > 0) AND (char_length(line) < 128))),
    CONSTRAINT version_gte_1 CHECK ((version >= 1))
);

--
-- Name: river_notification; Type: TABLE; Schema: outboxd; Owner: -
--

CREATE TABLE outboxd.river_notification (
    id bigint NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    payload text NOT NULL,
    topic text NOT NULL,
    CONSTRAINT topic_length CHECK (((length(topic) > 0) AND (length(topic) < 128)))
);

--
-- Name: river_notification_id_seq; Type: SEQUENCE; Schema: outboxd; Owner: -
--

CREATE SEQUENCE outboxd.river_notification_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: river_notification_id_seq; Type: SEQUENCE OWNED BY; Schema: outboxd; Owner: -
--

ALTER SEQUENCE outboxd.river_notification_id_seq OWNED BY outboxd.river_notification.id;

--
-- Name: river_queue; Type: TABLE; Schema: outboxd; Owner: -
--

CREATE TABLE outboxd.river_queue (
    name text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    metadata jsonb DEFAULT '{}'::jsonb NOT NULL,
    paused_at timestamp with time zone,
    updated_at timestamp with time zone DEFAULT CURRENT_TIMESTAMP NOT NULL
);

--
-- Name: side_effect_attempts; Type: TABLE; Schema: outboxd; Owner: -
--

CREATE TABLE outboxd.side_effect_attempts (
    effect_id uuid NOT NULL,
    attempt integer NOT NULL,
    started_at timestamp with time zone NOT NULL,
    duration_ms integer NOT NULL,
    outcome text NOT NULL,
    error text NOT NULL,
    host text DEFAULT ''::text NOT NULL
);

--
-- Name: side_effect_audit; Type: TABLE; Schema: outboxd; Owner: -
--

CREATE TABLE outboxd.side_effect_audit (
    id bigint NOT NULL,
    effect_id uuid NOT NULL,
    action text NOT NULL,
    actor text NOT NULL,
    reason text DEFAULT ''::text NOT NULL,
    from_state text NOT NULL,
    to_state text NOT NULL,
    details jsonb DEFAULT '{}'::jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL
);

--
-- Name: side_effect_audit_id_seq; Type: SEQUENCE; Schema: outboxd; Owner: -
--

CREATE SEQUENCE outboxd.side_effect_audit_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: side_effect_audit_id_seq; Type: SEQUENCE OWNED BY; Schema: outboxd; Owner: -
--

ALTER SEQUENCE outboxd.side_effect_audit_id_seq OWNED BY outboxd.side_effect_audit.id;

--
-- Name: side_effect_deliveries; Type: TABLE; Schema: outboxd; Owner: -
--

CREATE TABLE outboxd.side_effect_deliveries (
    effect_id uuid NOT NULL,
    status text NOT NULL,
    detail text DEFAULT ''::text NOT NULL,
    event_id text NOT NULL,
    event_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL
);

--
-- Name: side_effects; Type: TABLE; Schema: outboxd; Owner: -
--

CREATE TABLE outboxd.side_effects (
    id uuid NOT NULL,
    source_id uuid NOT NULL,
    kind text NOT NULL,
    provider text NOT NULL,
    payload jsonb NOT NULL,
    state text DEFAULT 'pending'::text NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    last_error text,
    provider_ref text,
    replayed boolean DEFAULT false NOT NULL,
    next_attempt_at timestamp with time zone,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    fired_at timestamp with time zone,
    first_fired_at timestamp with time zone,
    confirmed_at timestamp with time zone,
    in_doubt boolean DEFAULT false NOT NULL,
    total_attempts integer DEFAULT 0 NOT NULL,
    redrives integer DEFAULT 0 NOT NULL,
    key_window_from timestamp with time zone,
    acknowledged_at timestamp with time zone,
    phase text GENERATED ALWAYS AS (
CASE
    WHEN (state = ANY (ARRAY['pending'::text, 'fired'::text])) THEN 'live'::text
    WHEN ((state = 'failed'::text) AND (acknowledged_at IS NOT NULL)) THEN 'acknowledged'::text
    ELSE state
END) STORED NOT NULL,
    ended_at timestamp with time zone GENERATED ALWAYS AS (
CASE
    WHEN (state = ANY (ARRAY['confirmed'::text, 'failed'::text, 'cancelled'::text])) THEN updated_at
    ELSE NULL::timestamp with time zone
END) STORED,
    ended_attempts integer GENERATED ALWAYS AS (
CASE
    WHEN (state = ANY (ARRAY['confirmed'::text, 'failed'::text, 'cancelled'::text])) THEN attempts
    ELSE NULL::integer
END) STORED,
    not_before timestamp with time zone,
    ordering_key text,
    ordering_seq bigint,
    ordering_skip_failed boolean DEFAULT false NOT NULL,
    ordering_released_at timestamp with time zone,
    waiting_for text,
    waiting_since timestamp with time zone,
    tenant text,
    replay_id bigint,
    CONSTRAINT side_effects_kind_check CHECK ((kind <> ''::text)),
    CONSTRAINT side_effects_ordering_key_check CHECK (((ordering_key IS NULL) OR ((length(ordering_key) >= 1) AND (length(ordering_key) <= 256)))),
    CONSTRAINT side_effects_payload_check CHECK ((jsonb_typeof(payload) = 'object'::text)),
    CONSTRAINT side_effects_provider_check CHECK ((provider <> ''::text)),
    CONSTRAINT side_effects_provider_queue_name CHECK (((state <> ALL (ARRAY['pending'::text, 'fired'::text])) OR ((provider ~ '^[a-z0-9]+([_-][a-z0-9]+)*$'::text) AND (length(provider) <= 64)))),
    CONSTRAINT side_effects_state_check CHECK ((state = ANY (ARRAY['pending'::text, 'fired'::text, 'confirmed'::text, 'failed'::text, 'cancelled'::text])))
)
WITH (fillfactor='50', autovacuum_vacuum_scale_factor='0.05', autovacuum_vacuum_threshold='10000', autovacuum_vacuum_insert_scale_factor='0.05', autovacuum_analyze_scale_factor='0.05');

--
-- Name: side_effects_ordering_seq; Type: SEQUENCE; Schema: outboxd; Owner: -
--

CREATE SEQUENCE outboxd.side_effects_ordering_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: idempotency_key_audit id; Type: DEFAULT; Schema: outboxd; Owner: -
--

ALTER TABLE ONLY outboxd.idempotency_key_audit ALTER COLUMN id SET DEFAULT nextval('outboxd.idempotency_key_audit_id_seq'::regclass);

--
-- Name: outboxd_endpoint_audit id; Type: DEFAULT; Schema: outboxd; Owner: -
--

ALTER TABLE ONLY outboxd.outboxd_endpoint_audit ALTER COLUMN id SET DEFAULT nextval('outboxd.outboxd_endpoint_audit_id_seq'::regclass);

--
-- Name: outboxd_endpoint_secrets id; Type: DEFAULT; Schema: outboxd; Owner: -
--

ALTER TABLE ONLY outboxd.outboxd_endpoint_secrets ALTER COLUMN id SET DEFAULT nextval('outboxd.outboxd_endpoint_secrets_id_seq'::regclass);

--
-- Name: outboxd_limit_audit id; Type: DEFAULT; Schema: outboxd; Owner: -
--

ALTER TABLE ONLY outboxd.outboxd_limit_audit ALTER COLUMN id SET DEFAULT nextval('outboxd.outboxd_limit_audit_id_seq'::regclass);

--
-- Name: outboxd_replays id; Type: DEFAULT; Schema: outboxd; Owner: -
--

ALTER TABLE ONLY outboxd.outboxd_replays ALTER COLUMN id SET DEFAULT nextval('outboxd.outboxd_replays_id_seq'::regclass);

--
-- Name: outboxd_tenant_queue seq; Type: DEFAULT; Schema: outboxd; Owner: -
--

ALTER TABLE ONLY outboxd.outboxd_tenant_queue ALTER COLUMN seq SET DEFAULT nextval('outboxd.outboxd_tenant_queue_seq_seq'::regclass);

--
-- Name: provider_drift id; Type: DEFAULT; Schema: outboxd; Owner: -
--

ALTER TABLE ONLY outboxd.provider_drift ALTER COLUMN id SET DEFAULT nextval('outboxd.provider_drift_id_seq'::regclass);

--
-- Name: river_job id; Type: DEFAULT; Schema: outboxd; Owner: -
--

ALTER TABLE ONLY outboxd.river_job ALTER COLUMN id SET DEFAULT nextval('outboxd.river_job_id_seq'::regclass);

--
-- Name: river_notification id; Type: DEFAULT; Schema: outboxd; Owner: -
--

ALTER TABLE ONLY outboxd.river_notification ALTER COLUMN id SET DEFAULT nextval('outboxd.river_notification_id_seq'::regclass);

--
-- Name: side_effect_audit id; Type: DEFAULT; Schema: outboxd; Owner: -
--

ALTER TABLE ONLY outboxd.side_effect_audit ALTER COLUMN id SET DEFAULT nextval('outboxd.side_effect_audit_id_seq'::regclass);

--
-- Name: idempotency_key_audit idempotency_key_audit_pkey; Type: CONSTRAINT; Schema: outboxd; Owner: -
--

ALTER TABLE ONLY outboxd.idempotency_key_audit
    ADD CONSTRAINT idempotency_key_audit_pkey PRIMARY KEY (id);

--
-- Name: idempotency_keys idempotency_keys_pkey; Type: CONSTRAINT; Schema: outboxd; Owner: -
--

ALTER TABLE ONLY outboxd.idempotency_keys
    ADD CONSTRAINT idempotency_keys_pkey PRIMARY KEY (id);

--
-- Name: idempotency_keys idempotency_keys_scope_key; Type: CONSTRAINT; Schema: outboxd; Owner: -
--

ALTER TABLE ONLY outboxd.idempotency_keys
    ADD CONSTRAINT idempotency_keys_scope_key UNIQUE (scope, method, route, key);

--
-- Name: inbox_messages inbox_messages_pkey; Type: CONSTRAINT; Schema: outboxd; Owner: -
--

ALTER TABLE ONLY outboxd.inbox_messages
    ADD CONSTRAINT inbox_messages_pkey PRIMARY KEY (source, message_id);

--
-- Name: outbox_events outbox_events_pkey; Type: CONSTRAINT; Schema: outboxd; Owner: -
--

ALTER TABLE ONLY outboxd.outbox_events
    ADD CONSTRAINT outbox_events_pkey PRIMARY KEY (id);

--
-- Name: outbox_order_wake outbox_order_wake_pkey; Type: CONSTRAINT; Schema: outboxd; Owner: -
--

ALTER TABLE ONLY outboxd.outbox_order_wake
    ADD CONSTRAINT outbox_order_wake_pkey PRIMARY KEY (ordering_key);

--
-- Name: outboxd_dispatchers outboxd_dispatchers_pkey; Type: CONSTRAINT; Schema: outboxd; Owner: -
--

ALTER TABLE ONLY outboxd.outboxd_dispatchers
    ADD CONSTRAINT outboxd_dispatchers_pkey PRIMARY KEY (id);

--
-- Name: outboxd_endpoint_audit outboxd_endpoint_audit_pkey; Type: CONSTRAINT; Schema: outboxd; Owner: -
--

ALTER TABLE ONLY outboxd.outboxd_endpoint_audit
    ADD CONSTRAINT outboxd_endpoint_audit_pkey PRIMARY KEY (id);

--
-- Name: outboxd_endpoint_secrets outboxd_endpoint_secrets_pkey; Type: CONSTRAINT; Schema: outboxd; Owner: -
--

ALTER TABLE ONLY outboxd.outboxd_endpoint_secrets
    ADD CONSTRAINT outboxd_endpoint_secrets_pkey PRIMARY KEY (id);

--
-- Name: outboxd_endpoints outboxd_endpoints_pkey; Type: CONSTRAINT; Schema: outboxd; Owner: -
--

ALTER TABLE ONLY outboxd.outboxd_endpoints
    ADD CONSTRAINT outboxd_endpoints_pkey PRIMARY KEY (id);

--
-- Name: outboxd_limit_audit outboxd_limit_audit_pkey; Type: CONSTRAINT; Schema: outboxd; Owner: -
--

ALTER TABLE ONLY outboxd.outboxd_limit_audit
    ADD CONSTRAINT outboxd_limit_audit_pkey PRIMARY KEY (id);

--
-- Name: outboxd_limits outboxd_limits_pkey; Type: CONSTRAINT; Schema: outboxd; Owner: -
--

ALTER TABLE ONLY outboxd.outboxd_limits
    ADD CONSTRAINT outboxd_limits_pkey PRIMARY KEY (key);

--
-- Name: outboxd_minute_counts outboxd_minute_counts_pkey; Type: CONSTRAINT; Schema: outboxd; Owner: -
--

ALTER TABLE ONLY outboxd.outboxd_minute_counts
    ADD CONSTRAINT outboxd_minute_counts_pkey PRIMARY KEY (minute, kind, phase, attempts);

--
-- Name: outboxd_minute_latency outboxd_minute_latency_pkey; Type: CONSTRAINT; Schema: outboxd; Owner: -
--

ALTER TABLE ONLY outboxd.outboxd_minute_latency
    ADD CONSTRAINT outboxd_minute_latency_pkey PRIMARY KEY (minute, kind, bucket);

--
-- Name: outboxd_minutes_summarized outboxd_minutes_summarized_pkey; Type: CONSTRAINT; Schema: outboxd; Owner: -
--

ALTER TABLE ONLY outboxd.outboxd_minutes_summarized
    ADD CONSTRAINT outboxd_minutes_summarized_pkey PRIMARY KEY (one);

--
-- Name: outboxd_provider_guarantees outboxd_provider_guarantees_pkey; Type: CONSTRAINT; Schema: outboxd; Owner: -
--

ALTER TABLE ONLY outboxd.outboxd_provider_guarantees
    ADD CONSTRAINT outboxd_provider_guarantees_pkey PRIMARY KEY (provider);

--
-- Name: outboxd_replay_skips outboxd_replay_skips_pkey; Type: CONSTRAINT; Schema: outboxd; Owner: -
--

ALTER TABLE ONLY outboxd.outboxd_replay_skips
    ADD CONSTRAINT outboxd_replay_skips_pkey PRIMARY KEY (replay_id, effect_id);

--
-- Name: outboxd_replays outboxd_replays_pkey; Type: CONSTRAINT; Schema: outboxd; Owner: -
--

ALTER TABLE ONLY outboxd.outboxd_replays
    ADD CONSTRAINT outboxd_replays_pkey PRIMARY KEY (id);

--
-- Name: outboxd_schema_version outboxd_schema_version_pkey; Type: CONSTRAINT; Schema: outboxd; Owner: -
--

ALTER TABLE ONLY outboxd.outboxd_schema_version
    ADD CONSTRAINT outboxd_schema_version_pkey PRIMARY KEY (id);

--
-- Name: outboxd_tenant_inflight outboxd_tenant_inflight_pkey; Type: CONSTRAINT; Schema: outboxd; Owner: -
--

ALTER TABLE ONLY outboxd.outboxd_tenant_inflight
    ADD CONSTRAINT outboxd_tenant_inflight_pkey PRIMARY KEY (effect_id);

--
-- Name: outboxd_tenant_queue outboxd_tenant_queue_pkey; Type: CONSTRAINT; Schema: outboxd; Owner: -
--

ALTER TABLE ONLY outboxd.outboxd_tenant_queue
    ADD CONSTRAINT outboxd_tenant_queue_pkey PRIMARY KEY (seq);

--
-- Name: provider_drift provider_drift_pkey; Type: CONSTRAINT; Schema: outboxd; Owner: -
--

ALTER TABLE ONLY outboxd.provider_drift
    ADD CONSTRAINT provider_drift_pkey PRIMARY KEY (id);

--
-- Name: river_job river_job_pkey; Type: CONSTRAINT; Schema: outboxd; Owner: -
--

ALTER TABLE ONLY outboxd.river_job
    ADD CONSTRAINT river_job_pkey PRIMARY KEY (id);

--
-- Name: river_leader river_leader_pkey; Type: CONSTRAINT; Schema: outboxd; Owner: -
--

ALTER TABLE ONLY outboxd.river_leader
    ADD CONSTRAINT river_leader_pkey PRIMARY KEY (name);

--
-- Name: river_migration river_migration_pkey1; Type: CONSTRAINT; Schema: outboxd; Owner: -
--

ALTER TABLE ONLY outboxd.river_migration
    ADD CONSTRAINT river_migration_pkey1 PRIMARY KEY (line, version);

--
-- Name: river_notification river_notification_pkey; Type: CONSTRAINT; Schema: outboxd; Owner: -
--

ALTER TABLE ONLY outboxd.river_notification
    ADD CONSTRAINT river_notification_pkey PRIMARY KEY (id);

--
-- Name: river_queue river_queue_pkey; Type: CONSTRAINT; Schema: outboxd; Owner: -
--

ALTER TABLE ONLY outboxd.river_queue
    ADD CONSTRAINT river_queue_pkey PRIMARY KEY (name);

--
-- Name: side_effect_audit side_effect_audit_pkey; Type: CONSTRAINT; Schema: outboxd; Owner: -
--

ALTER TABLE ONLY outboxd.side_effect_audit
    ADD CONSTRAINT side_effect_audit_pkey PRIMARY KEY (id);

--
-- Name: side_effect_deliveries side_effect_deliveries_pkey; Type: CONSTRAINT; Schema: outboxd; Owner: -
--

ALTER TABLE ONLY outboxd.side_effect_deliveries
    ADD CONSTRAINT side_effect_deliveries_pkey PRIMARY KEY (effect_id);

--
-- Name: side_effects side_effects_pkey; Type: CONSTRAINT; Schema: outboxd; Owner: -
--

ALTER TABLE ONLY outboxd.side_effects
    ADD CONSTRAINT side_effects_pkey PRIMARY KEY (id);

--
-- Name: side_effects side_effects_source_id_kind_key; Type: CONSTRAINT; Schema: outboxd; Owner: -
--

ALTER TABLE ONLY outboxd.side_effects
    ADD CONSTRAINT side_effects_source_id_kind_key UNIQUE (source_id, kind);

--
-- Name: idempotency_key_audit_key_idx; Type: INDEX; Schema: outboxd; Owner: -
--

CREATE INDEX idempotency_key_audit_key_idx ON outboxd.idempotency_key_audit USING btree (key_id, id);

--
-- Name: idempotency_keys_expires_idx; Type: INDEX; Schema: outboxd; Owner: -
--

CREATE INDEX idempotency_keys_expires_idx ON outboxd.idempotency_keys USING btree (expires_at) WHERE (expires_at IS NOT NULL);

--
-- Name: inbox_messages_expires_idx; Type: INDEX; Schema: outboxd; Owner: -
--

CREATE INDEX inbox_messages_expires_idx ON outboxd.inbox_messages USING btree (expires_at);

--
-- Name: outbox_events_aggregate_idx; Type: INDEX; Schema: outboxd; Owner: -
--

CREATE INDEX outbox_events_aggregate_idx ON outboxd.outbox_events USING btree (aggregate_type, aggregate_id) WHERE (aggregate_type <> ''::text);

--
-- Name: outbox_events_created_at_idx; Type: INDEX; Schema: outboxd; Owner: -
--

CREATE INDEX outbox_events_created_at_idx ON outboxd.outbox_events USING btree (created_at);

--
-- Name: outboxd_endpoint_audit_endpoint_idx; Type: INDEX; Schema: outboxd; Owner: -
--

CREATE INDEX outboxd_endpoint_audit_endpoint_idx ON outboxd.outboxd_endpoint_audit USING btree (endpoint_id, id);

--
-- Name: outboxd_endpoint_secrets_current_idx; Type: INDEX; Schema: outboxd; Owner: -
--

CREATE UNIQUE INDEX outboxd_endpoint_secrets_current_idx ON outboxd.outboxd_endpoint_secrets USING btree (endpoint_id) WHERE (expires_at IS NULL);

--
-- Name: outboxd_endpoint_secrets_endpoint_idx; Type: INDEX; Schema: outboxd; Owner: -
--

CREATE INDEX outboxd_endpoint_secrets_endpoint_idx ON outboxd.outboxd_endpoint_secrets USING btree (endpoint_id, id);

--
-- Name: outboxd_endpoints_fanout_idx; Type: INDEX; Schema: outboxd; Owner: -
--

CREATE INDEX outboxd_endpoints_fanout_idx ON outboxd.outboxd_endpoints USING btree (COALESCE(tenant, ''::text));

--
-- Name: outboxd_limit_audit_key_idx; Type: INDEX; Schema: outboxd; Owner: -
--

CREATE INDEX outboxd_limit_audit_key_idx ON outboxd.outboxd_limit_audit USING btree (key, id);

--
-- Name: outboxd_replay_paces_replay_idx; Type: INDEX; Schema: outboxd; Owner: -
--

CREATE INDEX outboxd_replay_paces_replay_idx ON outboxd.outboxd_replay_paces USING btree (replay_id, created_at);

--
-- Name: outboxd_replays_running_idx; Type: INDEX; Schema: outboxd; Owner: -
--

CREATE INDEX outboxd_replays_running_idx ON outboxd.outboxd_replays USING btree (id) WHERE (state = 'running'::text);

--
-- Name: outboxd_tenant_inflight_lane_idx; Type: INDEX; Schema: outboxd; Owner: -
--

CREATE INDEX outboxd_tenant_inflight_lane_idx ON outboxd.outboxd_tenant_inflight USING btree (provider, tenant);

--
-- Name: outboxd_tenant_queue_effect_idx; Type: INDEX; Schema: outboxd; Owner: -
--

CREATE UNIQUE INDEX outboxd_tenant_queue_effect_idx ON outboxd.outboxd_tenant_queue USING btree (effect_id);

--
-- Name: outboxd_tenant_queue_lane_idx; Type: INDEX; Schema: outboxd; Owner: -
--

CREATE INDEX outboxd_tenant_queue_lane_idx ON outboxd.outboxd_tenant_queue USING btree (provider, tenant, due_at, seq);

--
-- Name: provider_drift_created_idx; Type: INDEX; Schema: outboxd; Owner: -
--

CREATE INDEX provider_drift_created_idx ON outboxd.provider_drift USING btree (created_at);

--
-- Name: provider_drift_effect_idx; Type: INDEX; Schema: outboxd; Owner: -
--

CREATE INDEX provider_drift_effect_idx ON outboxd.provider_drift USING btree (effect_id);

--
-- Name: provider_drift_unacknowledged_idx; Type: INDEX; Schema: outboxd; Owner: -
--

CREATE INDEX provider_drift_unacknowledged_idx ON outboxd.provider_drift USING btree (created_at) WHERE (acknowledged_at IS NULL);

--
-- Name: river_job_args_index; Type: INDEX; Schema: outboxd; Owner: -
--

CREATE INDEX river_job_args_index ON outboxd.river_job USING gin (args);

--
-- Name: river_job_kind; Type: INDEX; Schema: outboxd; Owner: -
--

CREATE INDEX river_job_kind ON outboxd.river_job USING btree (kind);

--
-- Name: river_job_metadata_index; Type: INDEX; Schema: outboxd; Owner: -
--

CREATE INDEX river_job_metadata_index ON outboxd.river_job USING gin (metadata);

--
-- Name: river_job_prioritized_fetching_index; Type: INDEX; Schema: outboxd; Owner: -
--

CREATE INDEX river_job_prioritized_fetching_index ON outboxd.river_job USING btree (state, queue, priority, scheduled_at, id);

--
-- Name: river_job_state_and_finalized_at_index; Type: INDEX; Schema: outboxd; Owner: -
--

CREATE INDEX river_job_state_and_finalized_at_index ON outboxd.river_job USING btree (state, finalized_at) WHERE (finalized_at IS NOT NULL);

--
-- Name: river_job_unique_idx; Type: INDEX; Schema: outboxd; Owner: -
--

CREATE UNIQUE INDEX river_job_unique_idx ON outboxd.river_job USING btree (unique_key) WHERE ((unique_key IS NOT NULL) AND (unique_states IS NOT NULL) AND outboxd.river_job_state_in_bitmask(unique_states, state));

--
-- Name: river_notification_created_at_idx; Type: INDEX; Schema: outboxd; Owner: -
--

CREATE INDEX river_notification_created_at_idx ON outboxd.river_notification USING btree (created_at);

--
-- Name: river_notification_topic_id_idx; Type: INDEX; Schema: outboxd; Owner: -
--

CREATE INDEX river_notification_topic_id_idx ON outboxd.river_notification USING btree (topic, id);

--
-- Name: side_effect_attempts_effect_idx; Type: INDEX; Schema: outboxd; Owner: -
--

CREATE INDEX side_effect_attempts_effect_idx ON outboxd.side_effect_attempts USING btree (effect_id, attempt);

--
-- Name: side_effect_audit_effect_idx; Type: INDEX; Schema: outboxd; Owner: -
--

CREATE INDEX side_effect_audit_effect_idx ON outboxd.side_effect_audit USING btree (effect_id, id);

--
-- Name: side_effects_created_at_idx; Type: INDEX; Schema: outboxd; Owner: -
--

CREATE INDEX side_effects_created_at_idx ON outboxd.side_effects USING btree (created_at DESC, id DESC);

--
-- Name: side_effects_failed_acknowledged_idx; Type: INDEX; Schema: outboxd; Owner: -
--

CREATE INDEX side_effects_failed_acknowledged_idx ON outboxd.side_effects USING btree (kind) WHERE (phase = 'acknowledged'::text);

--
-- Name: side_effects_failed_idx; Type: INDEX; Schema: outboxd; Owner: -
--

CREATE INDEX side_effects_failed_idx ON outboxd.side_effects USING btree (ended_at) INCLUDE (kind, created_at) WHERE (phase = 'failed'::text);

--
-- Name: side_effects_failed_kind_idx; Type: INDEX; Schema: outboxd; Owner: -
--

CREATE INDEX side_effects_failed_kind_idx ON outboxd.side_effects USING btree (kind, created_at DESC, id DESC) WHERE (phase = ANY (ARRAY['failed'::text, 'acknowledged'::text]));

--
-- Name: side_effects_failed_list_idx; Type: INDEX; Schema: outboxd; Owner: -
--

CREATE INDEX side_effects_failed_list_idx ON outboxd.side_effects USING btree (created_at DESC, id DESC) WHERE (phase = ANY (ARRAY['failed'::text, 'acknowledged'::text]));

--
-- Name: side_effects_live_idx; Type: INDEX; Schema: outboxd; Owner: -
--

CREATE INDEX side_effects_live_idx ON outboxd.side_effects USING btree (created_at) WHERE (phase = 'live'::text);

--
-- Name: side_effects_ordering_open_idx; Type: INDEX; Schema: outboxd; Owner: -
--

CREATE INDEX side_effects_ordering_open_idx ON outboxd.side_effects USING btree (ordering_key, ordering_seq) WHERE ((ordering_key IS NOT NULL) AND (ordering_released_at IS NULL) AND (phase <> ALL (ARRAY['confirmed'::text, 'cancelled'::text])));

--
-- Name: side_effects_other_id_key_idx; Type: INDEX; Schema: outboxd; Owner: -
--

CREATE INDEX side_effects_other_id_key_idx ON outboxd.side_effects USING btree (outboxd.outboxd_idempotency_key(source_id, kind)) WHERE (substr((id)::text, 15, 1) <> '8'::text);

--
-- Name: side_effects_provider_ref_idx; Type: INDEX; Schema: outboxd; Owner: -
--

CREATE INDEX side_effects_provider_ref_idx ON outboxd.side_effects USING btree (provider_ref) WHERE (provider_ref IS NOT NULL);

--
-- Name: side_effects_terminal_idx; Type: INDEX; Schema: outboxd; Owner: -
--

CREATE INDEX side_effects_terminal_idx ON outboxd.side_effects USING btree (ended_at) INCLUDE (phase, kind, ended_attempts, created_at, confirmed_at) WHERE (phase <> 'live'::text);

--
-- Name: outboxd_dispatchers outboxd_dispatchers_breaker_event; Type: TRIGGER; Schema: outboxd; Owner: -
--

CREATE TRIGGER outboxd_dispatchers_breaker_event AFTER UPDATE OF destinations ON outboxd.outboxd_dispatchers FOR EACH ROW WHEN ((new.destinations IS DISTINCT FROM old.destinations)) EXECUTE FUNCTION outboxd.outboxd_breaker_event();

--
-- Name: outboxd_endpoints outboxd_endpoints_disabled_event; Type: TRIGGER; Schema: outboxd; Owner: -
--

CREATE TRIGGER outboxd_endpoints_disabled_event AFTER UPDATE OF disabled_at ON outboxd.outboxd_endpoints FOR EACH ROW WHEN (((old.disabled_at IS NULL) AND (new.disabled_at IS NOT NULL))) EXECUTE FUNCTION outboxd.outboxd_endpoint_disabled_event();

--
-- Name: provider_drift provider_drift_event; Type: TRIGGER; Schema: outboxd; Owner: -
--

CREATE TRIGGER provider_drift_event AFTER INSERT ON outboxd.provider_drift FOR EACH ROW EXECUTE FUNCTION outboxd.outboxd_drift_event();

--
-- Name: side_effects side_effects_failed_event; Type: TRIGGER; Schema: outboxd; Owner: -
--

CREATE TRIGGER side_effects_failed_event AFTER UPDATE OF state ON outboxd.side_effects FOR EACH ROW WHEN (((new.state = 'failed'::text) AND (old.state IS DISTINCT FROM 'failed'::text))) EXECUTE FUNCTION outboxd.outboxd_effect_failed_event();

--
-- Name: side_effects side_effects_order_end; Type: TRIGGER; Schema: outboxd; Owner: -
--

CREATE TRIGGER side_effects_order_end AFTER UPDATE ON outboxd.side_effects FOR EACH ROW WHEN (((new.ordering_key IS NOT NULL) AND (current_setting('outboxd.chain_moved'::text, true) IS DISTINCT FROM 'on'::text) AND (((new.state IS DISTINCT FROM old.state) AND ((new.state = ANY (ARRAY['confirmed'::text, 'cancelled'::text])) OR ((new.state = 'failed'::text) AND new.ordering_skip_failed))) OR ((new.ordering_released_at IS NOT NULL) AND (old.ordering_released_at IS NULL))))) EXECUTE FUNCTION outboxd.outboxd_order_wake();

--
-- Name: side_effects side_effects_order_insert; Type: TRIGGER; Schema: outboxd; Owner: -
--

CREATE TRIGGER side_effects_order_insert BEFORE INSERT ON outboxd.side_effects FOR EACH ROW WHEN ((new.ordering_key IS NOT NULL)) EXECUTE FUNCTION outboxd.outboxd_order_effect();

--
-- Name: side_effects side_effects_tenant_end; Type: TRIGGER; Schema: outboxd; Owner: -
--

CREATE TRIGGER side_effects_tenant_end AFTER UPDATE ON outboxd.side_effects FOR EACH ROW WHEN (((new.tenant IS NOT NULL) AND (new.state IS DISTINCT FROM old.state) AND (new.state = ANY (ARRAY['confirmed'::text, 'failed'::text, 'cancelled'::text])))) EXECUTE FUNCTION outboxd.outboxd_tenant_end();

--
-- Name: side_effects side_effects_tenant_queue; Type: TRIGGER; Schema: outboxd; Owner: -
--

CREATE TRIGGER side_effects_tenant_queue AFTER INSERT ON outboxd.side_effects FOR EACH ROW WHEN (((new.tenant IS NOT NULL) AND (new.ordering_key IS NULL))) EXECUTE FUNCTION outboxd.outboxd_tenant_queue();

--
-- Name: idempotency_key_audit idempotency_key_audit_key_id_fkey; Type: FK CONSTRAINT; Schema: outboxd; Owner: -
--

ALTER TABLE ONLY outboxd.idempotency_key_audit
    ADD CONSTRAINT idempotency_key_audit_key_id_fkey FOREIGN KEY (key_id) REFERENCES outboxd.idempotency_keys(id) ON DELETE CASCADE;

--
-- Name: outboxd_endpoint_secrets outboxd_endpoint_secrets_endpoint_id_fkey; Type: FK CONSTRAINT; Schema: outboxd; Owner: -
--

ALTER TABLE ONLY outboxd.outboxd_endpoint_secrets
    ADD CONSTRAINT outboxd_endpoint_secrets_endpoint_id_fkey FOREIGN KEY (endpoint_id) REFERENCES outboxd.outboxd_endpoints(id) ON DELETE CASCADE;

--
-- Name: outboxd_replay_paces outboxd_replay_paces_replay_id_fkey; Type: FK CONSTRAINT; Schema: outboxd; Owner: -
--

ALTER TABLE ONLY outboxd.outboxd_replay_paces
    ADD CONSTRAINT outboxd_replay_paces_replay_id_fkey FOREIGN KEY (replay_id) REFERENCES outboxd.outboxd_replays(id) ON DELETE CASCADE;

--
-- Name: outboxd_replay_skips outboxd_replay_skips_replay_id_fkey; Type: FK CONSTRAINT; Schema: outboxd; Owner: -
--

ALTER TABLE ONLY outboxd.outboxd_replay_skips
    ADD CONSTRAINT outboxd_replay_skips_replay_id_fkey FOREIGN KEY (replay_id) REFERENCES outboxd.outboxd_replays(id) ON DELETE CASCADE;

--
-- Name: outboxd_tenant_inflight outboxd_tenant_inflight_effect_id_fkey; Type: FK CONSTRAINT; Schema: outboxd; Owner: -
--

ALTER TABLE ONLY outboxd.outboxd_tenant_inflight
    ADD CONSTRAINT outboxd_tenant_inflight_effect_id_fkey FOREIGN KEY (effect_id) REFERENCES outboxd.side_effects(id) ON DELETE CASCADE;

--
-- Name: outboxd_tenant_queue outboxd_tenant_queue_effect_id_fkey; Type: FK CONSTRAINT; Schema: outboxd; Owner: -
--

ALTER TABLE ONLY outboxd.outboxd_tenant_queue
    ADD CONSTRAINT outboxd_tenant_queue_effect_id_fkey FOREIGN KEY (effect_id) REFERENCES outboxd.side_effects(id) ON DELETE CASCADE;

--
-- Name: provider_drift provider_drift_effect_id_fkey; Type: FK CONSTRAINT; Schema: outboxd; Owner: -
--

ALTER TABLE ONLY outboxd.provider_drift
    ADD CONSTRAINT provider_drift_effect_id_fkey FOREIGN KEY (effect_id) REFERENCES outboxd.side_effects(id) ON DELETE SET NULL;

--
-- Name: side_effect_attempts side_effect_attempts_effect_id_fkey; Type: FK CONSTRAINT; Schema: outboxd; Owner: -
--

ALTER TABLE ONLY outboxd.side_effect_attempts
    ADD CONSTRAINT side_effect_attempts_effect_id_fkey FOREIGN KEY (effect_id) REFERENCES outboxd.side_effects(id) ON DELETE CASCADE;

--
-- Name: side_effect_audit side_effect_audit_effect_id_fkey; Type: FK CONSTRAINT; Schema: outboxd; Owner: -
--

ALTER TABLE ONLY outboxd.side_effect_audit
    ADD CONSTRAINT side_effect_audit_effect_id_fkey FOREIGN KEY (effect_id) REFERENCES outboxd.side_effects(id) ON DELETE CASCADE;

--
-- Name: side_effect_deliveries side_effect_deliveries_effect_id_fkey; Type: FK CONSTRAINT; Schema: outboxd; Owner: -
--

ALTER TABLE ONLY outboxd.side_effect_deliveries
    ADD CONSTRAINT side_effect_deliveries_effect_id_fkey FOREIGN KEY (effect_id) REFERENCES outboxd.side_effects(id) ON DELETE CASCADE;

--
-- Name: side_effects side_effects_source_id_fkey; Type: FK CONSTRAINT; Schema: outboxd; Owner: -
--

ALTER TABLE ONLY outboxd.side_effects
    ADD CONSTRAINT side_effects_source_id_fkey FOREIGN KEY (source_id) REFERENCES outboxd.outbox_events(id);

--
-- PostgreSQL database dump complete
--
