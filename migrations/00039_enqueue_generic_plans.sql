-- +goose Up
-- outboxd_enqueue runs a dozen statements a call. The plan cache settled
-- on a generic plan for each after five calls but one: the effects'
-- INSERT, whose custom plan looked cheaper than its generic one, so it
-- was planned again on every call (2,974 plans in 2,973 calls, 163 us
-- each, against 329 us executing it; pg_stat_statements with
-- track_planning). Its generic plan is the same inserts and index
-- lookups. Planned once per session, the function takes 1.11 ms instead
-- of 1.35 ms and the SQL enqueue's transaction runs 20-28% more often at
-- c1 (docs/storage.md). A setting of the function, as its search_path:
-- nested calls (outboxd_subscriber_effects) run with it too, and a
-- CREATE OR REPLACE of the function drops it (00032).
ALTER FUNCTION outboxd_enqueue(jsonb, jsonb, boolean) SET plan_cache_mode = force_generic_plan;

-- +goose Down
ALTER FUNCTION outboxd_enqueue(jsonb, jsonb, boolean) RESET plan_cache_mode;
