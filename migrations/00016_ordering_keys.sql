-- +goose Up
-- Ordering keys: effects that share an ordering_key fire one after the
-- other, in the order their transactions committed (and in insert order
-- within one transaction).
--
-- ordering_seq is the position within the key. It is drawn from a
-- sequence while the inserting transaction holds a transaction-level
-- advisory lock on the key (classid 1869574516, objid hashtext(key)), so
-- two transactions enqueueing on one key are serialised from that insert
-- to their commit: a later position is always a later commit. The
-- trigger below does both, so rows written by plain SQL are ordered the
-- same way as rows written by outbox.Enqueue.
--
-- An effect may fire once every earlier effect of its key has ended:
-- confirmed, cancelled, released by an operator (ordering_released_at),
-- or failed when the failed effect's own policy says the chain may go on
-- (ordering_skip_failed). Until then it is blocked: the claim refuses it.
--
-- outbox_order_wake: a key whose chain may have moved (an effect of it was
-- inserted or ended). The dispatchers' intake reads it, finds the key's
-- first effect that has not ended and gives it a job if it is pending.
-- Rows are written by the triggers in the same transaction as the change,
-- so the intake only ever sees a change that has committed. (A dispatcher
-- that confirms an effect also gives the next one its job in the same
-- transaction; the wake is for every other path: operators, Cancel, SQL.
-- The intake polls for wakes; no NOTIFY here, which would serialise the
-- commits of every transaction that ends an ordered effect.)
--
-- The partial index names phase, not state, so claims stay HOT updates
-- (see 00011); it holds only effects of a key that have not ended.
ALTER TABLE side_effects
    ADD COLUMN ordering_key text,
    ADD COLUMN ordering_seq bigint,
    ADD COLUMN ordering_skip_failed boolean NOT NULL DEFAULT false,
    ADD COLUMN ordering_released_at timestamptz,
    ADD CONSTRAINT side_effects_ordering_key_check
        CHECK (ordering_key IS NULL OR (length(ordering_key) BETWEEN 1 AND 256));

CREATE SEQUENCE side_effects_ordering_seq AS bigint;

CREATE INDEX side_effects_ordering_open_idx ON side_effects (ordering_key, ordering_seq)
    WHERE ordering_key IS NOT NULL AND ordering_released_at IS NULL AND phase NOT IN ('confirmed', 'cancelled');

-- One row per key however many changes it had: a change upserts the row,
-- which also locks it until the change commits, so the intake (SKIP
-- LOCKED) never takes a wake before the change it stands for is visible.
CREATE TABLE outbox_order_wake (
    ordering_key text PRIMARY KEY
);

-- +goose StatementBegin
CREATE FUNCTION outboxd_order_effect() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(1869574516, hashtext(NEW.ordering_key));
    NEW.ordering_seq := nextval('side_effects_ordering_seq');
    INSERT INTO outbox_order_wake (ordering_key) VALUES (NEW.ordering_key)
        ON CONFLICT (ordering_key) DO UPDATE SET ordering_key = EXCLUDED.ordering_key;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION outboxd_order_wake() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT
AS $$
BEGIN
    INSERT INTO outbox_order_wake (ordering_key) VALUES (NEW.ordering_key)
        ON CONFLICT (ordering_key) DO UPDATE SET ordering_key = EXCLUDED.ordering_key;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER side_effects_order_insert BEFORE INSERT ON side_effects
    FOR EACH ROW WHEN (NEW.ordering_key IS NOT NULL)
    EXECUTE FUNCTION outboxd_order_effect();

-- An effect of a key ended, or was released: the next may go. A
-- dispatcher's confirming transaction moves the chain itself and says so
-- (outboxd.chain_moved, local to the transaction): no wake then.
CREATE TRIGGER side_effects_order_end AFTER UPDATE ON side_effects
    FOR EACH ROW WHEN (NEW.ordering_key IS NOT NULL
        AND current_setting('outboxd.chain_moved', true) IS DISTINCT FROM 'on' AND (
        (NEW.state IS DISTINCT FROM OLD.state AND (NEW.state IN ('confirmed', 'cancelled')
            OR (NEW.state = 'failed' AND NEW.ordering_skip_failed)))
        OR (NEW.ordering_released_at IS NOT NULL AND OLD.ordering_released_at IS NULL)))
    EXECUTE FUNCTION outboxd_order_wake();

-- +goose Down
DROP TRIGGER side_effects_order_end ON side_effects;
DROP TRIGGER side_effects_order_insert ON side_effects;
DROP FUNCTION outboxd_order_wake();
DROP FUNCTION outboxd_order_effect();
DROP TABLE outbox_order_wake;
DROP INDEX side_effects_ordering_open_idx;
DROP SEQUENCE side_effects_ordering_seq;
ALTER TABLE side_effects
    DROP CONSTRAINT side_effects_ordering_key_check,
    DROP COLUMN ordering_released_at,
    DROP COLUMN ordering_skip_failed,
    DROP COLUMN ordering_seq,
    DROP COLUMN ordering_key;
