-- +goose Up
-- A key with no rate of its own climbs back after a 429 to twice the rate
-- the 429 lowered it to, and higher only while requests use it: the
-- requests let through since the episode began (granted less this) over
-- the time since its pause ended are the rate it was seen to take.
ALTER TABLE outboxd_limits ADD COLUMN granted_at_throttle bigint NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE outboxd_limits DROP COLUMN granted_at_throttle;
