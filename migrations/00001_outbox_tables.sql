-- +goose Up
-- Tables are created unqualified: outboxd migrate runs goose with search_path
-- set to the configured schema, so the same files serve every schema.

-- The idempotency key, computable without Go:
-- lowercase hex(SHA-256(event_id || ':' || kind)). Marked IMMUTABLE so it can
-- back a generated column: its only encoding-dependent step converts to UTF-8,
-- and a database's encoding never changes.
-- +goose StatementBegin
CREATE FUNCTION outboxd_idempotency_key(event_id uuid, kind text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT encode(sha256(convert_to(event_id::text || ':' || kind, 'UTF8')), 'hex') $$;
-- +goose StatementEnd

CREATE TABLE outbox_events (
    id             uuid PRIMARY KEY,
    aggregate_type text NOT NULL DEFAULT '',
    aggregate_id   text NOT NULL DEFAULT '',
    event_type     text NOT NULL,
    payload        jsonb NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE side_effects (
    id              uuid PRIMARY KEY,
    source_id       uuid NOT NULL REFERENCES outbox_events (id),
    kind            text NOT NULL CHECK (kind <> ''),
    provider        text NOT NULL CHECK (provider <> ''),
    -- Generated, so a row written by plain SQL can never carry a wrong key.
    idempotency_key text NOT NULL UNIQUE
        GENERATED ALWAYS AS (outboxd_idempotency_key(source_id, kind)) STORED,
    payload         jsonb NOT NULL CHECK (jsonb_typeof(payload) = 'object'),
    state           text NOT NULL DEFAULT 'pending'
        CHECK (state IN ('pending', 'fired', 'confirmed', 'failed', 'cancelled')),
    attempts        integer NOT NULL DEFAULT 0,
    last_error      text,
    provider_ref    text,
    -- The provider answered a re-fire from its idempotency record
    -- (Stripe's Idempotent-Replayed): evidence the key did its job.
    replayed        boolean NOT NULL DEFAULT false,
    next_attempt_at timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    fired_at        timestamptz,
    first_fired_at  timestamptz,
    confirmed_at    timestamptz,
    UNIQUE (source_id, kind)
);

-- "Stuck" questions only ever look at live and failed effects; partial
-- indexes keep them index scans however many confirmed rows pile up, and the
-- included columns let counts and ages be read from the index alone.
CREATE INDEX side_effects_live_idx ON side_effects (updated_at)
    INCLUDE (state, kind, created_at, fired_at)
    WHERE state IN ('pending', 'fired');
CREATE INDEX side_effects_failed_idx ON side_effects (updated_at)
    INCLUDE (kind, created_at)
    WHERE state = 'failed';
CREATE INDEX side_effects_created_at_idx ON side_effects (created_at DESC, id DESC);

-- +goose Down
DROP TABLE side_effects;
DROP TABLE outbox_events;
DROP FUNCTION outboxd_idempotency_key(uuid, text);
