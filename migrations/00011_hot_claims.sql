-- +goose Up
-- Claims that write no index entries.
--
-- Postgres updates a row in place (a HOT update: no new entry in any index)
-- only when no indexed column changes, counting key columns, INCLUDE
-- columns and the columns of partial-index predicates, and the new version
-- fits on the same page. A claim (pending -> fired), a retry's release
-- (fired -> pending) and an in-doubt record change state, attempts,
-- fired_at and updated_at. So no index may name those columns; the partial
-- indexes name two generated columns instead, which keep their value while
-- an effect is live:
--
-- phase:    'live' for pending and fired; otherwise the state, with failed
--           effects an operator acknowledged as 'acknowledged'.
-- ended_at: when the effect reached confirmed, failed or cancelled (its
--           updated_at then); NULL while it is live.
-- ended_attempts: its attempts then, for the statistics; NULL while live.
--
-- Only transitions that change phase (confirm, fail, cancel, redrive) write
-- index entries. The fillfactor leaves room on each page for the new
-- versions of the rows on it: with 75, a burn-down of 30,000 effects made
-- 18% of its claims HOT (the confirmations' new versions take the room);
-- with 50, 90%. Adding stored generated columns rewrites the
-- table once, under an exclusive lock: on a large table, run this
-- migration in a quiet moment.
ALTER TABLE side_effects
    ADD COLUMN phase text NOT NULL GENERATED ALWAYS AS (
        CASE WHEN state IN ('pending', 'fired') THEN 'live'
             WHEN state = 'failed' AND acknowledged_at IS NOT NULL THEN 'acknowledged'
             ELSE state END) STORED,
    ADD COLUMN ended_at timestamptz GENERATED ALWAYS AS (
        CASE WHEN state IN ('confirmed', 'failed', 'cancelled') THEN updated_at END) STORED,
    ADD COLUMN ended_attempts integer GENERATED ALWAYS AS (
        CASE WHEN state IN ('confirmed', 'failed', 'cancelled') THEN attempts END) STORED;
ALTER TABLE side_effects SET (fillfactor = 50);

DROP INDEX side_effects_live_idx;
DROP INDEX side_effects_failed_idx;
DROP INDEX side_effects_failed_acknowledged_idx;
DROP INDEX side_effects_terminal_idx;

-- Live effects, oldest first: stuck, the sweeper, gauges. Few rows, read
-- through to the heap.
CREATE INDEX side_effects_live_idx ON side_effects (created_at) WHERE phase = 'live';
-- Failed effects not acknowledged, by when they failed.
CREATE INDEX side_effects_failed_idx ON side_effects (ended_at)
    INCLUDE (kind, created_at)
    WHERE phase = 'failed';
-- Acknowledged failures are rare; stats counts them from this index.
CREATE INDEX side_effects_failed_acknowledged_idx ON side_effects (kind)
    WHERE phase = 'acknowledged';
-- Ended effects by when they ended: statistics (index-only) and purge.
CREATE INDEX side_effects_terminal_idx ON side_effects (ended_at)
    INCLUDE (phase, kind, ended_attempts, created_at, confirmed_at)
    WHERE phase <> 'live';

-- +goose Down
DROP INDEX side_effects_terminal_idx;
DROP INDEX side_effects_failed_acknowledged_idx;
DROP INDEX side_effects_failed_idx;
DROP INDEX side_effects_live_idx;
ALTER TABLE side_effects RESET (fillfactor);
ALTER TABLE side_effects DROP COLUMN ended_attempts, DROP COLUMN ended_at, DROP COLUMN phase;
CREATE INDEX side_effects_live_idx ON side_effects (updated_at)
    INCLUDE (state, kind, created_at, fired_at)
    WHERE state IN ('pending', 'fired');
CREATE INDEX side_effects_failed_idx ON side_effects (updated_at)
    INCLUDE (kind, created_at)
    WHERE state = 'failed' AND acknowledged_at IS NULL;
CREATE INDEX side_effects_failed_acknowledged_idx ON side_effects (kind)
    WHERE state = 'failed' AND acknowledged_at IS NOT NULL;
CREATE INDEX side_effects_terminal_idx ON side_effects (updated_at)
    INCLUDE (state, kind, attempts, created_at, confirmed_at)
    WHERE state IN ('confirmed', 'failed', 'cancelled');
