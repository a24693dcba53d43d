-- +goose Up
-- Effects waiting for their River job, when applications enqueue with
-- outbox.JobsByDispatcher: the application's transaction writes one narrow
-- row here per effect (no index to maintain), and outboxd moves them into
-- River jobs in batches, deleting the rows in the same transaction.
CREATE TABLE outbox_intake (
    effect_id uuid NOT NULL,
    provider  text NOT NULL
);

-- +goose Down
DROP TABLE outbox_intake;
