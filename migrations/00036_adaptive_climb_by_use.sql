-- +goose Up
-- A key with no rate of its own climbs after a 429 while its requests fill
-- its schedule, one lease at a time, not by the clock up to twice what it
-- was seen to take: the count kept for that bound goes. slow_start: the
-- key's rate was guessed when its first 429 came (nothing told what the
-- partner accepts); it doubles each second its requests fill it, until
-- its next 429.
ALTER TABLE outboxd_limits DROP COLUMN granted_at_throttle;
ALTER TABLE outboxd_limits ADD COLUMN slow_start boolean NOT NULL DEFAULT false;

-- +goose Down
ALTER TABLE outboxd_limits DROP COLUMN slow_start;
ALTER TABLE outboxd_limits ADD COLUMN granted_at_throttle bigint NOT NULL DEFAULT 0;
