-- +goose Up
-- outboxd_enqueue gains carry (outbox.EffectsByDispatcher for an
-- application in another language): with carry => true a new event is
-- written with its effects in its own row and one narrow intake row, and
-- a dispatcher writes the effects' rows, as with outbox.Enqueue under
-- EffectsByDispatcher (00040; docs/storage.md). And a replay of an event
-- whose effects are still carried now writes them out before comparing,
-- as outbox.Enqueue does: without it, a replay from SQL of an event Go
-- enqueued carrying its effects wrote its own effects' rows beside them,
-- and a payload that differed was not a conflict.
--
-- A new parameter is a new signature: the function is dropped and made
-- again, written out in full, with its settings (00023, 00039). Calls
-- with two or three arguments are unchanged.
DROP FUNCTION outboxd_enqueue(jsonb, jsonb, boolean);

-- +goose StatementBegin
CREATE FUNCTION outboxd_enqueue(event jsonb, effects jsonb DEFAULT '[]'::jsonb, wake_dispatchers boolean DEFAULT false,
    carry boolean DEFAULT false)
 RETURNS TABLE(event_id uuid, event_existed boolean, effect_id uuid, kind text, idempotency_key text, duplicate boolean)
 LANGUAGE plpgsql
AS $function$
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
$function$;
-- +goose StatementEnd

-- +goose StatementBegin
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION %I.outboxd_enqueue(jsonb, jsonb, boolean, boolean) SET search_path = %I, pg_temp', current_schema(), current_schema());
END
$$;
-- +goose StatementEnd
ALTER FUNCTION outboxd_enqueue(jsonb, jsonb, boolean, boolean) SET plan_cache_mode = force_generic_plan;

-- +goose Down
-- The function as 00032 wrote it and 00039 set it, with its settings.
DROP FUNCTION outboxd_enqueue(jsonb, jsonb, boolean, boolean);

-- +goose StatementBegin
CREATE FUNCTION outboxd_enqueue(event jsonb, effects jsonb DEFAULT '[]'::jsonb, wake_dispatchers boolean DEFAULT false)
 RETURNS TABLE(event_id uuid, event_existed boolean, effect_id uuid, kind text, idempotency_key text, duplicate boolean)
 LANGUAGE plpgsql
AS $function$
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
$function$;
-- +goose StatementEnd

-- +goose StatementBegin
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION %I.outboxd_enqueue(jsonb, jsonb, boolean) SET search_path = %I, pg_temp', current_schema(), current_schema());
END
$$;
-- +goose StatementEnd
ALTER FUNCTION outboxd_enqueue(jsonb, jsonb, boolean) SET plan_cache_mode = force_generic_plan;
