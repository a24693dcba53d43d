-- +goose Up
-- Events older than the retention that never had effects: the purge's one
-- look at outbox_events per run reads this index instead of the table (an
-- event with effects goes with its last effect and is never looked for).
-- One entry per event, in the order they come.
CREATE INDEX outbox_events_created_at_idx ON outbox_events (created_at);

-- Autovacuum by a share of 5% instead of Postgres's 20%: side_effects
-- leaves two dead row versions per effect (the claim's, pruned in place,
-- and the confirmation's) and river_job three per job (running, completed,
-- the cleaner's delete), so at the default the dead rows of a table that
-- holds weeks of history reach a fifth of it between vacuums, and every
-- scan of the live index steps over them. The thresholds keep small tables
-- from being vacuumed for a handful of rows. Measured with `outboxbench
-- -soak` (docs/scaling.md).
ALTER TABLE side_effects SET (autovacuum_vacuum_scale_factor = 0.05, autovacuum_vacuum_threshold = 10000,
    autovacuum_vacuum_insert_scale_factor = 0.05, autovacuum_analyze_scale_factor = 0.05);
ALTER TABLE river_job SET (autovacuum_vacuum_scale_factor = 0.05, autovacuum_vacuum_threshold = 10000,
    autovacuum_analyze_scale_factor = 0.05);

-- +goose Down
ALTER TABLE river_job RESET (autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold, autovacuum_analyze_scale_factor);
ALTER TABLE side_effects RESET (autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold,
    autovacuum_vacuum_insert_scale_factor, autovacuum_analyze_scale_factor);
DROP INDEX outbox_events_created_at_idx;
