-- +goose Up
-- The web view and outboxctl events search events by aggregate (type and
-- id): "did the refund for order 1022 go out?". Partial: an application
-- that records no aggregate pays nothing for it at enqueue.
CREATE INDEX outbox_events_aggregate_idx ON outbox_events (aggregate_type, aggregate_id)
    WHERE aggregate_type <> '';

-- +goose Down
DROP INDEX outbox_events_aggregate_idx;
