-- +goose Up
-- Failed effects, newest first: the web view's and outboxctl list's
-- "failed" filter (state = failed, acknowledged or not), which otherwise
-- walks the created_at index through every confirmed effect (153ms at
-- 1,000,000 effects with 0.5% failed). Failures are rare, so the index is
-- small, and an effect enters it on the transition to failed, which writes
-- index entries anyway (it leaves the live index).
CREATE INDEX side_effects_failed_list_idx ON side_effects (created_at DESC, id DESC)
    WHERE phase IN ('failed', 'acknowledged');

-- +goose Down
DROP INDEX side_effects_failed_list_idx;
