-- +goose Up
-- An operator can acknowledge a failed effect as reviewed and correctly
-- failed (a card decline, a retired endpoint): it leaves "stuck" and the
-- failed-effects gauge without pretending it was done. Who and why are in
-- the audit trail; a redrive clears it.
ALTER TABLE side_effects ADD COLUMN acknowledged_at timestamptz;

DROP INDEX side_effects_failed_idx;
CREATE INDEX side_effects_failed_idx ON side_effects (updated_at)
    INCLUDE (kind, created_at)
    WHERE state = 'failed' AND acknowledged_at IS NULL;
-- Acknowledged failures are rare; stats counts them from this index.
CREATE INDEX side_effects_failed_acknowledged_idx ON side_effects (kind)
    WHERE state = 'failed' AND acknowledged_at IS NOT NULL;

-- +goose Down
DROP INDEX side_effects_failed_acknowledged_idx;
DROP INDEX side_effects_failed_idx;
CREATE INDEX side_effects_failed_idx ON side_effects (updated_at)
    INCLUDE (kind, created_at)
    WHERE state = 'failed';
ALTER TABLE side_effects DROP COLUMN acknowledged_at;
