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

-- outboxd_enqueue's lock statement, replaced in its definition, and a
-- check added before its wake (the rest of the function is 00017's); the
-- migration fails if the function is not as 00017 wrote it.
-- 3. An effect whose derived id another event's effect already holds was
--    reported as a duplicate and not written; it is a conflict (OB409), as
--    outbox.Enqueue reports it.
-- +goose StatementBegin
DO $$
DECLARE
    s text := current_schema();
    def text := pg_get_functiondef(format('%I.outboxd_enqueue(jsonb, jsonb, boolean)', s)::regprocedure);
    old text := $old$PERFORM pg_advisory_xact_lock(1869574516, h) FROM (
            SELECT DISTINCT hashtext(x) AS h FROM unnest(okeys) AS x WHERE x IS NOT NULL ORDER BY 1) AS l;$old$;
    new text := $new$PERFORM pg_advisory_xact_lock(h) FROM (
            SELECT DISTINCT hashtextextended('outboxd order ' || current_schema() || ':' || x, 0) AS h
            FROM unnest(okeys) AS x WHERE x IS NOT NULL ORDER BY 1) AS l;$new$;
    wake text := $wake$    IF wake_dispatchers AND cardinality(inserted) > 0 THEN$wake$;
    squatted text := $sq$    -- An effect not inserted whose (event, kind) has no row: its derived
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

$sq$;
BEGIN
    IF position(old IN def) = 0 OR position(wake IN def) = 0 THEN
        RAISE EXCEPTION 'outboxd migration 00023: outboxd_enqueue in schema % is not as migration 00017 made it', s;
    END IF;
    EXECUTE replace(replace(def, old, new), wake, squatted || wake);
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
BEGIN
    def := replace(def, $sq$    -- An effect not inserted whose (event, kind) has no row: its derived
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

$sq$, '');
    EXECUTE replace(def, $new$PERFORM pg_advisory_xact_lock(h) FROM (
            SELECT DISTINCT hashtextextended('outboxd order ' || current_schema() || ':' || x, 0) AS h
            FROM unnest(okeys) AS x WHERE x IS NOT NULL ORDER BY 1) AS l;$new$, $old$PERFORM pg_advisory_xact_lock(1869574516, h) FROM (
            SELECT DISTINCT hashtext(x) AS h FROM unnest(okeys) AS x WHERE x IS NOT NULL ORDER BY 1) AS l;$old$);
    EXECUTE format('ALTER FUNCTION %I.outboxd_enqueue(jsonb, jsonb, boolean) SET search_path FROM CURRENT', s);
    EXECUTE format('ALTER FUNCTION %I.outboxd_order_wake() SET search_path FROM CURRENT', s);
END
$$;
-- +goose StatementEnd
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
