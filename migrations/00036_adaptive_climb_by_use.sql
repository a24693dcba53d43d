-- +goose Up
-- A key with no rate of its own climbs after a 429 while its requests fill
-- its schedule, one lease at a time, not by the clock up to twice what it
-- was seen to take: the count kept for that bound goes.
ALTER TABLE outboxd_limits DROP COLUMN granted_at_throttle;

-- +goose Down
ALTER TABLE outboxd_limits ADD COLUMN granted_at_throttle bigint NOT NULL DEFAULT 0;
