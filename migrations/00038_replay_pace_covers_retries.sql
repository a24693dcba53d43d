-- +goose Up
-- replay_id: the paced replay that last retried the effect. Every request
-- of the effect after that (its first, and each retry of a failure) takes
-- a time of the replay's limit key, replay:<id>, whose rate is the
-- replay's pace: slowing a replay slows all of its traffic. An operator's
-- own retry clears it. A nullable column without a default: adding it
-- rewrites nothing, so replicas of the previous version keep running.
ALTER TABLE side_effects ADD COLUMN replay_id bigint;

-- The running replays' paces as limit keys (a replay started before this
-- migration keeps its pace for the effects it retries from now on).
INSERT INTO outboxd_limits (key, rate, rate_source)
SELECT 'replay:' || id, pace, 'replay' FROM outboxd_replays WHERE state = 'running'
ON CONFLICT (key) DO NOTHING;

-- +goose Down
DELETE FROM outboxd_limits WHERE key LIKE 'replay:%';
ALTER TABLE side_effects DROP COLUMN replay_id;
