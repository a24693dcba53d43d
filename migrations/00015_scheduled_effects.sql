-- +goose Up
-- An effect may wait: not_before is the earliest time the dispatcher fires
-- it (NULL: at once). Its River job is scheduled for that time, and the
-- claim refuses it before, so a job run early (a sweep, a redrive) cannot
-- fire it. A later transaction can cancel it while it has not fired. Its
-- key window still starts at its first request (key_window_from).
-- A nullable column without a default: no table rewrite.
ALTER TABLE side_effects ADD COLUMN not_before timestamptz;

-- +goose Down
ALTER TABLE side_effects DROP COLUMN not_before;
