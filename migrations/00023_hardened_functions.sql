-- +goose Up
-- The SQL functions and triggers resolve only outboxd's own objects, and
-- ordering keys lock apart per schema with 64-bit keys.
--
-- 1. SET search_path FROM CURRENT left pg_temp first for relations: a role
--    allowed to insert into side_effects could create a temporary
--    side_effects_ordering_seq and choose its effect's position in a
--    chain. Each function's search_path is now outboxd's schema, then
--    pg_temp, last.
-- 2. The ordering-key lock was pg_advisory_xact_lock(1869574516,
--    hashtext(key)): one 32-bit space per database, so the same key in two
--    outboxd schemas, and unrelated keys whose hashes collide
--    (customer:108125 and customer:22402), blocked each other. It is now
--    pg_advisory_xact_lock(hashtextextended('outboxd order ' || schema ||
--    ':' || key, 0)): per schema, 64 bits (docs/ordering.md gives the
--    residual collision rate). outbox.Enqueue takes the same lock
--    (engine.sqlLockOrderingKeys). Deploy this with the binaries of the
--    same release: an older binary's lock would not exclude a newer one's.

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outboxd_order_effect() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('outboxd order ' || TG_TABLE_SCHEMA || ':' || NEW.ordering_key, 0));
    NEW.ordering_seq := nextval(format('%I.side_effects_ordering_seq', TG_TABLE_SCHEMA));
    INSERT INTO outbox_order_wake (ordering_key) VALUES (NEW.ordering_key)
        ON CONFLICT (ordering_key) DO UPDATE SET ordering_key = EXCLUDED.ordering_key;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

-- outboxd_enqueue is changed by replacing statements in its definition
-- (the rest is 00017's), each pair (as 00017 wrote it, as it becomes)
-- below; the migration fails if one is not found.
-- 3. An effect whose derived id another event's effect already holds was
--    reported as a duplicate and not written; it is a conflict (OB409), as
--    outbox.Enqueue reports it.
-- 4. A provider name that is no River queue name, and a not_before out of
--    range (month 13, year 10000), raised raw errors (23514, 22008) whose
--    DETAIL held the whole row, payload included: they are OB400 naming
--    the field. A traceparent of version ff or with an all-zero id is
--    refused, as W3C Trace Context says.
-- The edits are kept (outboxd_enqueue_edits) so that Down can undo them.
CREATE TABLE outboxd_enqueue_edits (n int PRIMARY KEY, before text NOT NULL, after text NOT NULL);
-- +goose StatementBegin
INSERT INTO outboxd_enqueue_edits VALUES
(1, $e$PERFORM pg_advisory_xact_lock(1869574516, h) FROM (
            SELECT DISTINCT hashtext(x) AS h FROM unnest(okeys) AS x WHERE x IS NOT NULL ORDER BY 1) AS l;$e$,
$e$PERFORM pg_advisory_xact_lock(h) FROM (
            SELECT DISTINCT hashtextextended('outboxd order ' || current_schema() || ':' || x, 0) AS h
            FROM unnest(okeys) AS x WHERE x IS NOT NULL ORDER BY 1) AS l;$e$),
(2, $e$    IF wake_dispatchers AND cardinality(inserted) > 0 THEN$e$,
$e$    -- An effect not inserted whose (event, kind) has no row: its derived
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

    IF wake_dispatchers AND cardinality(inserted) > 0 THEN$e$),
(3, $e$            WHEN coalesce(a.x -> 'payload', 'null') = 'null' THEN$e$,
$e$            WHEN a.provider !~ '^[a-z0-9]+([_-][a-z0-9]+)*$' OR length(a.provider) > 64 THEN
                ARRAY[a.f || '.provider', format('"%s": a provider name is lower-case letters and digits, words joined by _ or - (at most 64), such as webhook', left(a.provider, 64))]
            WHEN coalesce(a.x -> 'payload', 'null') = 'null' THEN$e$),
(4, $e$    -- The keys and ids as outboxd_idempotency_key and outboxd_effect_id$e$,
$e$    -- A not_before of the right shape that is no time (month 13, year
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

    -- The keys and ids as outboxd_idempotency_key and outboxd_effect_id$e$),
(5, $e$    IF ev_trace !~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$' THEN$e$,
$e$    IF ev_trace !~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$' OR left(ev_trace, 2) = 'ff'
            OR substr(ev_trace, 4, 32) = repeat('0', 32) OR substr(ev_trace, 37, 16) = repeat('0', 16) THEN$e$);
-- +goose StatementEnd

-- +goose StatementBegin
DO $$
DECLARE
    s text := current_schema();
    def text := pg_get_functiondef(format('%I.outboxd_enqueue(jsonb, jsonb, boolean)', s)::regprocedure);
    e record;
BEGIN
    FOR e IN SELECT * FROM outboxd_enqueue_edits ORDER BY n LOOP
        IF position(e.before IN def) = 0 THEN
            RAISE EXCEPTION 'outboxd migration 00023: outboxd_enqueue in schema % is not as migration 00017 made it (edit %)', s, e.n;
        END IF;
        def := replace(def, e.before, e.after);
    END LOOP;
    EXECUTE def;
    EXECUTE format('ALTER FUNCTION %I.outboxd_enqueue(jsonb, jsonb, boolean) SET search_path = %I, pg_temp', s, s);
    EXECUTE format('ALTER FUNCTION %I.outboxd_order_effect() SET search_path = %I, pg_temp', s, s);
    EXECUTE format('ALTER FUNCTION %I.outboxd_order_wake() SET search_path = %I, pg_temp', s, s);
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
    FOR e IN SELECT * FROM outboxd_enqueue_edits ORDER BY n DESC LOOP
        def := replace(def, e.after, e.before);
    END LOOP;
    EXECUTE def;
    EXECUTE format('ALTER FUNCTION %I.outboxd_enqueue(jsonb, jsonb, boolean) SET search_path FROM CURRENT', s);
    EXECUTE format('ALTER FUNCTION %I.outboxd_order_wake() SET search_path FROM CURRENT', s);
END
$$;
-- +goose StatementEnd
DROP TABLE outboxd_enqueue_edits;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outboxd_order_effect() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(1869574516, hashtext(NEW.ordering_key));
    NEW.ordering_seq := nextval('side_effects_ordering_seq');
    INSERT INTO outbox_order_wake (ordering_key) VALUES (NEW.ordering_key)
        ON CONFLICT (ordering_key) DO UPDATE SET ordering_key = EXCLUDED.ordering_key;
    RETURN NEW;
END
$$;
-- +goose StatementEnd
