-- +goose Up
-- Every failed attempt of an effect, for outboxctl show: when, how long,
-- what the provider (or the network) answered, and which host. Successful
-- attempts are on the effect row itself (fired_at, confirmed_at,
-- provider_ref), so the hot path writes nothing here.
CREATE TABLE side_effect_attempts (
    effect_id   uuid NOT NULL REFERENCES side_effects (id) ON DELETE CASCADE,
    attempt     integer NOT NULL,
    started_at  timestamptz NOT NULL,
    duration_ms integer NOT NULL,
    outcome     text NOT NULL,
    error       text NOT NULL,
    host        text NOT NULL DEFAULT ''
);
CREATE INDEX side_effect_attempts_effect_idx ON side_effect_attempts (effect_id, attempt);

-- +goose Down
DROP TABLE side_effect_attempts;
