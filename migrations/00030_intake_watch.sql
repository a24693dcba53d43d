-- +goose Up
-- A dispatcher with nothing to do watches one sequence instead of reading
-- the intake: every insert into outbox_intake, outbox_order_wake or
-- outboxd_tenant_queue draws a number from it (a column default, so every
-- path that writes them, Go, outboxd_enqueue, triggers and plain SQL,
-- does), and reading its last value costs the same whatever the tables
-- hold, where a look at an intake a burst just emptied reads every dead
-- row until vacuum. When the number moves, the dispatcher reads the intake
-- at once and then every millisecond for a while, for the transaction
-- that drew the number may commit a little later.
--
-- A number is drawn with its caller's rights: USAGE is PUBLIC's, so the
-- roles that enqueue need no new grant. Drawing one only makes the
-- dispatchers look.
CREATE SEQUENCE outbox_intake_watch AS bigint;
GRANT USAGE, SELECT ON SEQUENCE outbox_intake_watch TO PUBLIC;
ALTER TABLE outbox_intake ADD COLUMN watch bigint NOT NULL DEFAULT nextval('outbox_intake_watch');
ALTER TABLE outbox_order_wake ADD COLUMN watch bigint NOT NULL DEFAULT nextval('outbox_intake_watch');
ALTER TABLE outboxd_tenant_queue ADD COLUMN watch bigint NOT NULL DEFAULT nextval('outbox_intake_watch');

-- +goose Down
ALTER TABLE outboxd_tenant_queue DROP COLUMN watch;
ALTER TABLE outbox_order_wake DROP COLUMN watch;
ALTER TABLE outbox_intake DROP COLUMN watch;
DROP SEQUENCE outbox_intake_watch;
