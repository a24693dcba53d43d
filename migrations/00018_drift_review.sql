-- +goose Up
-- Drift records say what the provider's object was (details: status,
-- amount, currency, the provider's explanation, when) and can be
-- acknowledged by an operator who reviewed them (outboxctl drift ack):
-- acknowledged ones leave the default list and the
-- outboxd_drift_unacknowledged gauge. Adding columns with constant or no
-- defaults rewrites nothing.
ALTER TABLE provider_drift
    ADD COLUMN details jsonb NOT NULL DEFAULT '{}',
    ADD COLUMN acknowledged_at timestamptz,
    ADD COLUMN acknowledged_by text,
    ADD COLUMN ack_reason text;

-- What the gauge counts and the default list shows.
CREATE INDEX provider_drift_unacknowledged_idx ON provider_drift (created_at) WHERE acknowledged_at IS NULL;

-- +goose Down
DROP INDEX provider_drift_unacknowledged_idx;
ALTER TABLE provider_drift
    DROP COLUMN ack_reason,
    DROP COLUMN acknowledged_by,
    DROP COLUMN acknowledged_at,
    DROP COLUMN details;
