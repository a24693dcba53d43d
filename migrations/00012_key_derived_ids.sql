-- +goose Up
-- The key is derived, not stored; an effect is found by its key through its
-- id.
--
-- An effect's id is now the first 16 bytes of its idempotency key, as a
-- UUID with version 8 (RFC 9562, custom) and the RFC variant:
-- outboxd_effect_id(event_id, kind). Both are functions of
-- (source_id, kind), so looking an effect up by key is a primary-key
-- lookup, and neither the stored key column (64 bytes a row, hashed on
-- every insert) nor its unique index (one more entry per effect) is
-- needed. The key stays readable as outboxd_idempotency_key(source_id,
-- kind). (source_id, kind) stays unique: its constraint is untouched.
--
-- Rows written before this migration (their ids are name-based, version 5
-- UUIDs) and rows written by hand with a random id (gen_random_uuid(),
-- version 4) are still found by key: every row whose id is not a version 8
-- UUID is in side_effects_other_id_key_idx; an effect with a derived id
-- writes no entry there. The predicate reads the id's version digit, not
-- the derived id, because it is evaluated on every insert: comparing with
-- outboxd_effect_id cost about 9us a row, the digit 0.4us. So a row
-- written by hand must take outboxd_effect_id(event_id, kind) or a UUID of
-- another version as its id.
--
-- Dropping a column and creating the index scan side_effects once; on a
-- large table run this in a quiet moment (the index build holds a SHARE
-- lock: enqueues wait, reads do not).

-- +goose StatementBegin
CREATE FUNCTION outboxd_key_effect_id(key text) RETURNS uuid
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT (substr(key, 1, 12) || '8' || substr(key, 14, 3)
    || substr('89ab', (('x' || substr(key, 17, 1))::bit(4)::int & 3) + 1, 1)
    || substr(key, 18, 15))::uuid $$;
-- +goose StatementEnd

-- A SQL-standard body: the functions it calls are bound when it is
-- created, so it works whatever the caller's search_path.
-- +goose StatementBegin
CREATE FUNCTION outboxd_effect_id(event_id uuid, kind text) RETURNS uuid
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN outboxd_key_effect_id(outboxd_idempotency_key(event_id, kind));
-- +goose StatementEnd

CREATE INDEX side_effects_other_id_key_idx ON side_effects (outboxd_idempotency_key(source_id, kind))
    WHERE substr(id::text, 15, 1) <> '8';

ALTER TABLE side_effects DROP COLUMN idempotency_key;

-- +goose Down
ALTER TABLE side_effects ADD COLUMN idempotency_key text NOT NULL UNIQUE
    GENERATED ALWAYS AS (outboxd_idempotency_key(source_id, kind)) STORED;
DROP INDEX side_effects_other_id_key_idx;
DROP FUNCTION outboxd_effect_id(uuid, text);
DROP FUNCTION outboxd_key_effect_id(text);
