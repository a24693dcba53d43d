-- +goose Up
-- in_any_second: the key's rate is held as "at most N in any second" (a
-- partner's contract stated that way), not as an average: no burst when
-- the key was idle, and request times spaced so that any N + 1 of them
-- span more than a second even when some leave late (docs/limits.md).
ALTER TABLE outboxd_limits ADD COLUMN in_any_second boolean NOT NULL DEFAULT false;
-- What a change set it to; NULL on changes recorded before it existed.
ALTER TABLE outboxd_limit_audit ADD COLUMN in_any_second boolean;

-- +goose Down
ALTER TABLE outboxd_limit_audit DROP COLUMN in_any_second;
ALTER TABLE outboxd_limits DROP COLUMN in_any_second;
