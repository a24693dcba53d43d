-- +goose Up
-- outbox.EffectsByDispatcher: the caller's transaction writes its event
-- with the effects in it (outbox_events.effects, a JSON array of
-- {kind, provider, payload, not_before}) and one narrow row naming the
-- event in outbox_event_intake, instead of the effects' rows, their index
-- entries and an intake row each. A dispatcher that takes the intake row
-- writes the effects' rows (each with the id and key derived from the
-- event and its kind, created when the event was) and sets effects to
-- NULL, in one transaction; so do a replay of the event and a cancel,
-- in the caller's transaction, before they read the effects. effects IS
-- NOT NULL is therefore "not yet written out": retention keeps such an
-- event. Both are additions a running outboxd ignores (docs/storage.md).
ALTER TABLE outbox_events ADD COLUMN effects jsonb
	CONSTRAINT outbox_events_effects_check CHECK (effects IS NULL OR jsonb_typeof(effects) = 'array');

CREATE TABLE outbox_event_intake (
	event_id uuid NOT NULL,
	watch bigint NOT NULL DEFAULT nextval('outbox_intake_watch')
);

-- +goose Down
-- Effects not yet written out live only in the column: refuse to drop it
-- while any do (run a dispatcher until none do).
-- +goose StatementBegin
DO $$ BEGIN
	IF EXISTS (SELECT 1 FROM outbox_events WHERE effects IS NOT NULL) THEN
		RAISE EXCEPTION 'outbox_events holds effects no dispatcher has written out yet: run outboxd until none do, then migrate down';
	END IF;
END $$;
-- +goose StatementEnd
DROP TABLE outbox_event_intake;
ALTER TABLE outbox_events DROP COLUMN effects;
