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
    e jsonb;
    i int;
    f text;
    v jsonb;
    bad text;
    k text;
    prov text;
    p jsonb;
    nb timestamptz;
    okey text;
    skip boolean;
    kinds text[] := '{}';
    provs text[] := '{}';
    payloads jsonb[] := '{}';
    nbs timestamptz[] := '{}';
    okeys text[] := '{}';
    skips boolean[] := '{}';
    ids uuid[] := '{}';
    inserted uuid[] := '{}';
BEGIN
    -- The event.
    IF event IS NULL OR jsonb_typeof(event) <> 'object' THEN
        PERFORM outboxd_enqueue_invalid('event', 'a JSON object: {"id": ..., "type": ..., "payload": {...}}');
    END IF;
    SELECT string_agg(x, ', ') INTO bad FROM jsonb_object_keys(event) AS x
    WHERE x NOT IN ('id', 'type', 'aggregate_type', 'aggregate_id', 'payload', 'ordering_key', 'traceparent');
    IF bad IS NOT NULL THEN
        PERFORM outboxd_enqueue_invalid('event', format('unknown field %s: use id, type, aggregate_type, aggregate_id, payload, ordering_key, traceparent', bad));
    END IF;
    FOREACH f IN ARRAY ARRAY['id', 'type', 'aggregate_type', 'aggregate_id', 'ordering_key', 'traceparent'] LOOP
        v := event -> f;
        IF v IS NOT NULL AND v <> 'null' AND jsonb_typeof(v) <> 'string' THEN
            PERFORM outboxd_enqueue_invalid('event.' || f, format('a JSON string, not %s', jsonb_typeof(v)));
        END IF;
        IF f IN ('type', 'aggregate_type', 'aggregate_id') AND octet_length(v #>> '{}') > 512 THEN
            PERFORM outboxd_enqueue_invalid('event.' || f, format('%s bytes, over the limit of 512', octet_length(v #>> '{}')));
        END IF;
    END LOOP;
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

    -- The effects, in the order given.
    effects := coalesce(nullif(effects, 'null'), '[]');
    IF jsonb_typeof(effects) <> 'array' THEN
        PERFORM outboxd_enqueue_invalid('effects', 'a JSON array of effects: [{"kind": ..., "provider": ..., "payload": {...}}]');
    END IF;
    IF jsonb_array_length(effects) > max_effects THEN
        PERFORM outboxd_enqueue_invalid('effects', format('%s effects, over the limit of %s per event', jsonb_array_length(effects), max_effects));
    END IF;
    FOR e, i IN SELECT x, (o - 1)::int FROM jsonb_array_elements(effects) WITH ORDINALITY AS a(x, o) LOOP
        f := format('effects[%s]', i);
        IF jsonb_typeof(e) <> 'object' THEN
            PERFORM outboxd_enqueue_invalid(f, 'a JSON object: {"kind": ..., "provider": ..., "payload": {...}}');
        END IF;
        SELECT string_agg(x, ', ') INTO bad FROM jsonb_object_keys(e) AS x
        WHERE x NOT IN ('kind', 'provider', 'payload', 'not_before', 'ordering_key', 'on_failure');
        IF bad IS NOT NULL THEN
            PERFORM outboxd_enqueue_invalid(f, format('unknown field %s: use kind, provider, payload, not_before, ordering_key, on_failure', bad));
        END IF;
        FOREACH k IN ARRAY ARRAY['kind', 'provider', 'not_before', 'ordering_key', 'on_failure'] LOOP
            v := e -> k;
            IF v IS NOT NULL AND v <> 'null' AND jsonb_typeof(v) <> 'string' THEN
                PERFORM outboxd_enqueue_invalid(f || '.' || k, format('a JSON string, not %s', jsonb_typeof(v)));
            END IF;
        END LOOP;

        k := coalesce(e ->> 'kind', '');
        IF k = '' THEN
            PERFORM outboxd_enqueue_invalid(f || '.kind', 'required, for example "webhook.order_paid"');
        ELSIF length(k) > 128 THEN
            PERFORM outboxd_enqueue_invalid(f || '.kind', format('%s characters, over the limit of 128', length(k)));
        ELSIF k !~ '^[A-Za-z0-9][A-Za-z0-9_.:-]*$' THEN
            PERFORM outboxd_enqueue_invalid(f || '.kind', format('"%s": use letters, digits and _ . : - only, starting with a letter or digit', k));
        ELSIF k = ANY(kinds) THEN
            PERFORM outboxd_enqueue_invalid(f || '.kind', format('"%s" repeats effects[%s]: each kind at most once per event', k, array_position(kinds, k) - 1));
        END IF;

        prov := coalesce(e ->> 'provider', '');
        IF prov = '' THEN
            PERFORM outboxd_enqueue_invalid(f || '.provider', 'required: webhook, stripe, sendgrid or the name of a provider your outboxd runs');
        ELSIF length(prov) > 128 THEN
            PERFORM outboxd_enqueue_invalid(f || '.provider', format('%s characters, over the limit of 128', length(prov)));
        END IF;

        p := e -> 'payload';
        IF p IS NULL OR p = 'null' THEN
            PERFORM outboxd_enqueue_invalid(f || '.payload', 'required: a JSON object');
        ELSIF jsonb_typeof(p) <> 'object' THEN
            PERFORM outboxd_enqueue_invalid(f || '.payload', 'must be a JSON object, not ' || jsonb_typeof(p));
        ELSIF octet_length(p::text) > max_payload THEN
            PERFORM outboxd_enqueue_invalid(f || '.payload', format('%s bytes, over the limit of %s', octet_length(p::text), max_payload));
        END IF;
        -- The built-in providers' required fields; the rest of each schema
        -- is checked by the dispatcher before the first request.
        CASE prov
        WHEN 'webhook' THEN
            IF coalesce(p ->> 'url', '') !~* '^https?://[^/?#]' THEN
                PERFORM outboxd_enqueue_invalid(f || '.payload.url', 'required: the https URL to POST to');
            ELSIF coalesce(p -> 'body', 'null') = 'null' THEN
                PERFORM outboxd_enqueue_invalid(f || '.payload.body', 'required: the JSON value to POST');
            END IF;
        WHEN 'stripe' THEN
            IF coalesce(p ->> 'operation', '') = '' THEN
                PERFORM outboxd_enqueue_invalid(f || '.payload.operation', 'required, for example "refund.create"');
            ELSIF jsonb_typeof(p -> 'params') IS DISTINCT FROM 'object' THEN
                PERFORM outboxd_enqueue_invalid(f || '.payload.params', 'required: the operation''s parameters as a JSON object');
            END IF;
        WHEN 'sendgrid' THEN
            IF coalesce(p #>> '{from,email}', '') = '' THEN
                PERFORM outboxd_enqueue_invalid(f || '.payload.from.email', 'required');
            ELSIF jsonb_typeof(p -> 'to') IS DISTINCT FROM 'array' OR jsonb_array_length(p -> 'to') = 0 THEN
                PERFORM outboxd_enqueue_invalid(f || '.payload.to', 'required: at least one recipient');
            END IF;
        ELSE
        END CASE;

        nb := NULL;
        IF coalesce(e ->> 'not_before', '') <> '' THEN
            IF e ->> 'not_before' !~ '^\d{4}-\d\d-\d\d[T ]\d\d:\d\d(:\d\d(\.\d+)?)?(Z|z|[+-]\d\d(:?\d\d)?)$' THEN
                PERFORM outboxd_enqueue_invalid(f || '.not_before', 'an RFC 3339 time with its offset, for example "2026-12-01T09:00:00Z"');
            END IF;
            nb := (e ->> 'not_before')::timestamptz;
        END IF;

        okey := coalesce(nullif(e ->> 'ordering_key', ''), ev_okey);
        IF octet_length(okey) > 256 THEN
            PERFORM outboxd_enqueue_invalid(f || '.ordering_key', format('%s bytes, over the limit of 256', octet_length(okey)));
        END IF;
        skip := CASE coalesce(e ->> 'on_failure', 'block_key') WHEN 'block_key' THEN false WHEN 'skip_failed' THEN true END;
        IF skip IS NULL THEN
            PERFORM outboxd_enqueue_invalid(f || '.on_failure', format('unknown policy "%s": use block_key (the default) or skip_failed', e ->> 'on_failure'));
        END IF;

        kinds := kinds || k;
        provs := provs || prov;
        payloads := payloads || p;
        nbs := nbs || nb;
        okeys := okeys || okey;
        skips := skips || skip;
        ids := ids || outboxd_effect_id(ev_id, k);
    END LOOP;

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

    IF existed THEN
        -- A replay: compare before writing, so a conflict writes nothing.
        SELECT u.kind INTO k
        FROM unnest(kinds, provs, payloads, nbs, okeys, skips) WITH ORDINALITY AS u(kind, provider, payload, not_before, okey, oskip, ord)
        JOIN side_effects s ON s.source_id = ev_id AND s.kind = u.kind
        WHERE NOT (s.provider = u.provider AND s.payload = u.payload AND s.not_before IS NOT DISTINCT FROM u.not_before
            AND s.ordering_key IS NOT DISTINCT FROM u.okey AND s.ordering_skip_failed = u.oskip)
        ORDER BY u.ord LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'OB409', COLUMN = k,
                MESSAGE = format('outboxd_enqueue: conflict: effect "%s" of event %s exists with a different provider or payload', k, ev_id);
        END IF;
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
        -- Another transaction added some of these effects after the
        -- comparison: a difference is still a conflict.
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
    SELECT ev_id, existed, coalesce(s.id, u.id), u.kind, outboxd_idempotency_key(ev_id, u.kind), NOT u.id = ANY(inserted)
    FROM unnest(ids, kinds) WITH ORDINALITY AS u(id, kind, ord)
    LEFT JOIN side_effects s ON existed AND s.source_id = ev_id AND s.kind = u.kind
    ORDER BY u.ord;
END
$fn$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION outboxd_enqueue(jsonb, jsonb, boolean);
DROP FUNCTION outboxd_enqueue_invalid(text, text);
ALTER TABLE outbox_events DROP COLUMN traceparent;
