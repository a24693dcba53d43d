-- A candidate layout (docs/storage.md, "Fewest entries at enqueue"): a new
-- effect enters the fewest indexes the product's reads allow, so that the
-- caller's transaction writes as little as the contract's rows permit.
--
-- A new effect enters today: pkey, (source_id, kind), created_at, live.
-- Here: pkey, (source_id, kind), and one index on (phase, created_at, id)
-- that serves both the live set (its phase = 'live' range, which every
-- live read already names) and time order (a list across phases would
-- merge one ordered range per phase: five index scans, each LIMIT n, then
-- the newest n; the bench measures writes, and its lists still run
-- today's statement, which sorts here). The event's created_at
-- (retention's scan of events with no effects left, the events list) is
-- a BRIN range index instead of a B-tree: an insert touches it only when
-- its page range's summary grows.
--
-- A claim stays HOT (phase stays live); a confirmation writes what it
-- writes today (pkey, (source_id, kind), the phase index, terminal).
-- Run by outboxbench -layout-sql on its migrated schema (search_path set).

DROP INDEX side_effects_created_at_idx, side_effects_live_idx, outbox_events_created_at_idx;

CREATE INDEX side_effects_phase_time_idx ON side_effects (phase, created_at DESC, id DESC);
CREATE INDEX outbox_events_created_at_brin ON outbox_events USING brin (created_at) WITH (pages_per_range = 32);
