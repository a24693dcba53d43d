-- +goose Up
-- Failed effects of one kind, newest first (outboxctl list --state failed
-- --kind, the web view's same search and the overview's links): the list
-- stops at its page instead of reading every failure of the kind through
-- side_effects_failed_list_idx (16,667 at 10 M effects: 161 ms). An
-- effect enters it on the transition to failed, which writes every index
-- of the row anyway.
CREATE INDEX IF NOT EXISTS side_effects_failed_kind_idx ON side_effects (kind, created_at DESC, id DESC)
    WHERE phase IN ('failed', 'acknowledged');

-- +goose Down
DROP INDEX side_effects_failed_kind_idx;
