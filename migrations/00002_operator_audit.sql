-- +goose Up
-- Every operator action (outboxctl retry, cancel, confirm) leaves a row here,
-- written in the same transaction as the transition it records.
CREATE TABLE side_effect_audit (
    id          bigserial PRIMARY KEY,
    effect_id   uuid NOT NULL REFERENCES side_effects (id) ON DELETE CASCADE,
    action      text NOT NULL,
    actor       text NOT NULL,
    reason      text NOT NULL DEFAULT '',
    from_state  text NOT NULL,
    to_state    text NOT NULL,
    details     jsonb NOT NULL DEFAULT '{}',
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX side_effect_audit_effect_idx ON side_effect_audit (effect_id, id);

-- Terminal effects by age: recent ones for statistics, old ones for purge.
-- The included columns let the statistics be index-only scans: terminal
-- rows are rarely touched again, so their pages stay all-visible.
CREATE INDEX side_effects_terminal_idx ON side_effects (updated_at)
    INCLUDE (state, kind, attempts, created_at, confirmed_at)
    WHERE state IN ('confirmed', 'failed', 'cancelled');

-- +goose Down
DROP INDEX side_effects_terminal_idx;
DROP TABLE side_effect_audit;
