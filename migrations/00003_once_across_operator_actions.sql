-- +goose Up
-- What an effect's history must keep across operator actions.
--
-- in_doubt: an earlier request may have reached the provider without an
--   acknowledgement. Set by every claim, cleared only by an acknowledgement
--   or by an answer that proves the provider did nothing. It survives
--   failed, cancelled and a redrive, so every path that fires the effect
--   again applies the in-doubt policy.
-- total_attempts: fires over the effect's whole life; attempts counts those
--   since the last redrive (the retry schedule's budget).
-- redrives: operator redrives so far.
-- key_window_from: start of the provider's key window: the first request
--   that carried the key. No redrive, sweep or rescue resets it; only an
--   operator's forced retry after checking the provider does (audited).
ALTER TABLE side_effects
    ADD COLUMN in_doubt        boolean NOT NULL DEFAULT false,
    ADD COLUMN total_attempts  integer NOT NULL DEFAULT 0,
    ADD COLUMN redrives        integer NOT NULL DEFAULT 0,
    ADD COLUMN key_window_from timestamptz;

UPDATE side_effects SET
    total_attempts = attempts,
    key_window_from = first_fired_at,
    in_doubt = state = 'fired'
        OR (state IN ('failed', 'cancelled') AND coalesce(last_error LIKE 'in doubt%', false));

-- A live effect's provider is a River queue name: a row written by plain
-- SQL with another name could never be given a job, and used to make the
-- sweeper's whole batch fail. Live rows already there are failed with the
-- reason first; fix the provider, then retry them.
UPDATE side_effects SET state = 'failed', updated_at = now(),
    last_error = 'cannot be dispatched: provider ' || quote_literal(provider)
        || ' is not a valid River queue name: fix the row (provider must name a configured provider) and retry it, or cancel it'
WHERE state IN ('pending', 'fired')
    AND NOT (provider ~ '^[a-z0-9]+([_-][a-z0-9]+)*$' AND length(provider) <= 64);

ALTER TABLE side_effects ADD CONSTRAINT side_effects_provider_queue_name
    CHECK (state NOT IN ('pending', 'fired')
        OR (provider ~ '^[a-z0-9]+([_-][a-z0-9]+)*$' AND length(provider) <= 64));

-- +goose Down
ALTER TABLE side_effects DROP CONSTRAINT side_effects_provider_queue_name;
ALTER TABLE side_effects
    DROP COLUMN in_doubt,
    DROP COLUMN total_attempts,
    DROP COLUMN redrives,
    DROP COLUMN key_window_from;
