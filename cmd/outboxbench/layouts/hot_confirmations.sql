-- A candidate layout (docs/storage.md, "HOT confirmations, with homes"):
-- no index of side_effects reads a column a confirmation changes, so that
-- fired -> confirmed is a HOT update, and every read that used such an
-- index has another home, kept by triggers so that any writer (an older
-- outboxd, the SQL enqueue function, a row written by hand) keeps it:
--   the live set    -> side_effects_live (id, created_at), one row per live effect
--   ended effects   -> side_effect_ends, a log the minute summary consumes
--   failures        -> plain columns failure / failed_at, set only when an
--                      effect fails, is acknowledged or leaves failed
--   open chains     -> a plain column chain_open, set only for ordered effects
-- Run by outboxbench -layout-sql on its migrated schema (search_path set).

DROP INDEX side_effects_live_idx, side_effects_terminal_idx, side_effects_failed_idx,
	side_effects_failed_kind_idx, side_effects_failed_list_idx, side_effects_failed_acknowledged_idx,
	side_effects_ordering_open_idx;

CREATE TABLE side_effects_live (
	id uuid PRIMARY KEY,
	created_at timestamptz NOT NULL
);
INSERT INTO side_effects_live SELECT id, created_at FROM side_effects WHERE state IN ('pending', 'fired');

CREATE TABLE side_effect_ends (
	id uuid NOT NULL,
	ended_at timestamptz NOT NULL
);

ALTER TABLE side_effects ADD COLUMN failure text, ADD COLUMN failed_at timestamptz, ADD COLUMN chain_open boolean;

CREATE FUNCTION outboxd_live_inserted() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
	INSERT INTO side_effects_live (id, created_at)
	SELECT id, created_at FROM new_rows WHERE state IN ('pending', 'fired');
	RETURN NULL;
END $$;

-- Ending an effect (and bringing one back): a row trigger that fires only
-- for the rows that leave or re-enter the live set, so that claims and
-- retries pay nothing.
CREATE FUNCTION outboxd_live_ended() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
	DELETE FROM side_effects_live WHERE id = OLD.id;
	INSERT INTO side_effect_ends (id, ended_at) VALUES (NEW.id, NEW.updated_at);
	RETURN NULL;
END $$;
CREATE FUNCTION outboxd_live_again() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
	INSERT INTO side_effects_live (id, created_at) VALUES (NEW.id, NEW.created_at) ON CONFLICT DO NOTHING;
	RETURN NULL;
END $$;

CREATE TRIGGER side_effects_live_inserted AFTER INSERT ON side_effects
	REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION outboxd_live_inserted();
CREATE TRIGGER side_effects_live_ended AFTER UPDATE ON side_effects FOR EACH ROW
	WHEN (OLD.state IN ('pending', 'fired') AND NEW.state NOT IN ('pending', 'fired'))
	EXECUTE FUNCTION outboxd_live_ended();
CREATE TRIGGER side_effects_live_again AFTER UPDATE ON side_effects FOR EACH ROW
	WHEN (OLD.state NOT IN ('pending', 'fired') AND NEW.state IN ('pending', 'fired'))
	EXECUTE FUNCTION outboxd_live_again();

CREATE FUNCTION outboxd_failure_columns() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	NEW.failure := CASE WHEN NEW.state = 'failed' THEN CASE WHEN NEW.acknowledged_at IS NULL THEN 'failed' ELSE 'acknowledged' END END;
	NEW.failed_at := CASE WHEN NEW.state = 'failed' THEN NEW.updated_at END;
	NEW.chain_open := CASE WHEN NEW.ordering_key IS NOT NULL THEN
		NEW.ordering_released_at IS NULL AND NEW.state NOT IN ('confirmed', 'cancelled')
		AND (NEW.state IN ('pending', 'fired') OR NOT NEW.ordering_skip_failed) END;
	RETURN NEW;
END $$;
CREATE TRIGGER side_effects_failure_columns BEFORE UPDATE ON side_effects FOR EACH ROW
	WHEN (NEW.state = 'failed' OR OLD.state = 'failed' OR NEW.ordering_key IS NOT NULL)
	EXECUTE FUNCTION outboxd_failure_columns();
CREATE TRIGGER side_effects_failure_columns_insert BEFORE INSERT ON side_effects FOR EACH ROW
	WHEN (NEW.state = 'failed' OR NEW.ordering_key IS NOT NULL)
	EXECUTE FUNCTION outboxd_failure_columns();

CREATE INDEX side_effects_failed_idx ON side_effects (failed_at) INCLUDE (kind, created_at) WHERE failure = 'failed';
CREATE INDEX side_effects_failed_kind_idx ON side_effects (kind, created_at DESC, id DESC) WHERE failure IS NOT NULL;
CREATE INDEX side_effects_failed_list_idx ON side_effects (created_at DESC, id DESC) WHERE failure IS NOT NULL;
CREATE INDEX side_effects_chain_open_idx ON side_effects (ordering_key, ordering_seq) WHERE chain_open;
