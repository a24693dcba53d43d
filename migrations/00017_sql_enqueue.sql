-- +goose Up
-- Enqueue from any language: outboxd_enqueue(event, effects) records an
-- event and its effects in the caller's transaction with the rows, keys
-- and replay/conflict results of outbox.Enqueue (docs/enqueue.md, "From
-- SQL"). Effects are queued in outbox_intake, as under
-- outbox.JobsByDispatcher: the dispatchers give them their River jobs,
-- so no River client is needed. Ordering keys are handled by the insert
-- trigger of 00016, as for rows written by Go.
--
-- Errors are raised, so the caller's statement (and, without a
-- savepoint, its transaction) fails and nothing of the call is written:
--   OB400  invalid input; MESSAGE names the field and the fix, and the
--          field is also in the COLUMN field of the error
--   OB409  conflict: the event, or an effect of it, exists with different
--          content; the conflicting kind (if any) is in COLUMN
-- The payload checks of the built-in providers are the ones SQL can
-- express cheaply (required fields); the dispatcher parses every payload
-- before its first request and fails an effect it cannot send, with the
-- reason and no request made.

-- The W3C traceparent of the span that enqueued an event, when the
-- application traces (outbox/outboxtrace, or the "traceparent" field
-- below): the dispatch of its effects continues that trace. Nullable, no
-- default: adding it rewrites nothing.
ALTER TABLE outbox_events ADD COLUMN traceparent text;

-- +goose StatementBegin
CREATE FUNCTION outboxd_enqueue_invalid(field text, problem text) RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'OB400', COLUMN = field,
        MESSAGE = format('outboxd_enqueue: invalid %s: %s', field, problem);
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION outboxd_enqueue(event jsonb, effects jsonb DEFAULT '[]'::jsonb, wake_dispatchers boolean DEFAULT false)
RETURNS TABLE (event_id uuid, event_existed boolean, effect_id uuid, kind text, idempotency_key text, duplicate boolean)
LANGUAGE plpgsql SET search_path FROM CURRENT
AS $fn$
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
    IF ev_trace !~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$' THEN
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
            SELECT string_agg(k, ', ') FILTER (WHERE k NOT IN ('kind', 'provider', 'payload', 'not_before', 'ordering_key', 'on_failure')) AS unknown,
                min(k) FILTER (WHERE k IN ('kind', 'provider', 'not_before', 'ordering_key', 'on_failure')
                    AND jsonb_typeof(a.x -> k) NOT IN ('string', 'null')) AS not_string
            FROM jsonb_object_keys(CASE WHEN jsonb_typeof(a.x) = 'object' THEN a.x ELSE '{}' END) AS k
        ) u ON true
    ) q
    WHERE q.p IS NOT NULL ORDER BY q.o LIMIT 1;
    IF f IS NOT NULL THEN
        PERFORM outboxd_enqueue_invalid(f, bad);
    END IF;

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
        PERFORM pg_advisory_xact_lock(1869574516, h) FROM (
            SELECT DISTINCT hashtext(x) AS h FROM unnest(okeys) AS x WHERE x IS NOT NULL ORDER BY 1) AS l;
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
        INSERT INTO side_effects (id, source_id, kind, provider, payload, not_before, ordering_key, ordering_skip_failed)
        SELECT u.id, ev_id, u.kind, u.provider, u.payload, u.not_before, u.okey, u.oskip
        FROM unnest(ids, kinds, provs, payloads, nbs, okeys, skips) AS u(id, kind, provider, payload, not_before, okey, oskip)
        WHERE NOT existed OR NOT EXISTS (SELECT 1 FROM side_effects s WHERE s.source_id = ev_id AND s.kind = u.kind)
        ON CONFLICT DO NOTHING
        RETURNING id, provider
    ), q AS (
        INSERT INTO outbox_intake (effect_id, provider) SELECT id, provider FROM eff
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

    IF wake_dispatchers AND cardinality(inserted) > 0 THEN
        PERFORM pg_notify('outboxd_intake', current_schema());
    END IF;

    RETURN QUERY
    SELECT ev_id, existed, coalesce(s.id, u.id), u.kind, u.key, NOT u.id = ANY(inserted)
    FROM unnest(ids, kinds, keys) WITH ORDINALITY AS u(id, kind, key, ord)
    LEFT JOIN side_effects s ON existed AND s.source_id = ev_id AND s.kind = u.kind
    ORDER BY u.ord;
END
$fn$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION outboxd_enqueue(jsonb, jsonb, boolean);
DROP FUNCTION outboxd_enqueue_invalid(text, text);
ALTER TABLE outbox_events DROP COLUMN traceparent;
