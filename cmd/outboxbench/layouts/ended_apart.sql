-- A candidate layout (docs/storage.md, "Ended effects apart"): side_effects
-- partitioned by state, so that an effect that ends leaves the table the
-- enqueue writes into. The live partition holds only pending and fired
-- effects: its random-key indexes (id, (source_id, kind)) stay as small as
-- the backlog whatever the history, so an enqueue's index inserts land on
-- pages in memory and rarely write a full-page image; ended effects (and
-- their indexes for retention, failures and the minute summary) live in
-- the other partition, which only confirmations and the rare failure,
-- cancel or redrive write.
--
-- What each step writes here:
--   enqueue       the live partition: heap, id, (source_id, kind), and
--                 (created_at, id), which serves both time order and the
--                 live set (no live index: every row there is live);
--   claim, retry  a HOT update in the live partition (nothing indexed
--                 changes: state is not indexed there);
--   confirmation  a move: the row is deleted from the live partition (no
--                 index entry) and inserted into the ended one with its
--                 entries (id, (source_id, kind), time, terminal), the
--                 same number as today's non-HOT update.
--
-- What adoption would need and this file does not do (docs/storage.md):
-- id and (source_id, kind) are unique per partition, not across them (a
-- partitioned table's unique index must hold the partition key), so
-- adding effects to an existing event must lock the event row and look in
-- both (the default enqueue inserts effects only with a new event row,
-- whose primary key already serializes it); the six foreign keys that
-- reference side_effects(id) go (dropped here); and a move runs the
-- partitions' DELETE and INSERT row triggers, not AFTER UPDATE ones, so
-- the triggers that end a chain's turn or a tenant's slot must move to
-- the ended partition's AFTER INSERT. The bench's no-op burn-down uses
-- neither chains nor tenants.
--
-- Run by outboxbench -layout-sql on its migrated, still empty schema
-- (search_path set).

DO $$ BEGIN
	IF EXISTS (SELECT 1 FROM side_effects) THEN
		RAISE EXCEPTION 'ended_apart.sql rebuilds side_effects: run it on an empty schema';
	END IF;
END $$;

ALTER TABLE outboxd_tenant_inflight DROP CONSTRAINT outboxd_tenant_inflight_effect_id_fkey;
ALTER TABLE outboxd_tenant_queue DROP CONSTRAINT outboxd_tenant_queue_effect_id_fkey;
ALTER TABLE provider_drift DROP CONSTRAINT provider_drift_effect_id_fkey;
ALTER TABLE side_effect_attempts DROP CONSTRAINT side_effect_attempts_effect_id_fkey;
ALTER TABLE side_effect_audit DROP CONSTRAINT side_effect_audit_effect_id_fkey;
ALTER TABLE side_effect_deliveries DROP CONSTRAINT side_effect_deliveries_effect_id_fkey;

ALTER TABLE side_effects RENAME TO side_effects_unpartitioned;
CREATE TABLE side_effects (LIKE side_effects_unpartitioned INCLUDING DEFAULTS INCLUDING GENERATED INCLUDING CONSTRAINTS)
	PARTITION BY LIST (state);
DROP TABLE side_effects_unpartitioned;
ALTER TABLE side_effects ADD CONSTRAINT side_effects_source_id_fkey FOREIGN KEY (source_id) REFERENCES outbox_events (id);

CREATE TABLE side_effects_live PARTITION OF side_effects FOR VALUES IN ('pending', 'fired') WITH (fillfactor = 50);
CREATE TABLE side_effects_ended PARTITION OF side_effects FOR VALUES IN ('confirmed', 'failed', 'cancelled');

-- Per partition: what is unique, and time order.
CREATE UNIQUE INDEX side_effects_live_id ON side_effects_live (id);
CREATE UNIQUE INDEX side_effects_live_source_kind ON side_effects_live (source_id, kind);
CREATE INDEX side_effects_live_created_at ON side_effects_live (created_at DESC, id DESC);
CREATE UNIQUE INDEX side_effects_ended_id ON side_effects_ended (id);
CREATE UNIQUE INDEX side_effects_ended_source_kind ON side_effects_ended (source_id, kind);
CREATE INDEX side_effects_ended_created_at ON side_effects_ended (created_at DESC, id DESC);
-- The live reads name phase = 'live', which does not prune partitions:
-- this index on the ended partition is always empty, so that they skip it.
CREATE INDEX side_effects_ended_live ON side_effects_ended (created_at) WHERE phase = 'live';

-- Today's partial indexes, on the parent: each partition has them, and a
-- row enters only those whose predicate it meets (the live partition's
-- rows none of them but an ordered chain's and a provider reference's).
CREATE INDEX side_effects_failed_acknowledged_idx ON side_effects (kind) WHERE phase = 'acknowledged';
CREATE INDEX side_effects_failed_idx ON side_effects (ended_at) INCLUDE (kind, created_at) WHERE phase = 'failed';
CREATE INDEX side_effects_failed_kind_idx ON side_effects (kind, created_at DESC, id DESC) WHERE phase IN ('failed', 'acknowledged');
CREATE INDEX side_effects_failed_list_idx ON side_effects (created_at DESC, id DESC) WHERE phase IN ('failed', 'acknowledged');
CREATE INDEX side_effects_ordering_open_idx ON side_effects (ordering_key, ordering_seq)
	WHERE ordering_key IS NOT NULL AND ordering_released_at IS NULL AND phase NOT IN ('confirmed', 'cancelled');
CREATE INDEX side_effects_other_id_key_idx ON side_effects (outboxd_idempotency_key(source_id, kind)) WHERE substr(id::text, 15, 1) <> '8';
CREATE INDEX side_effects_provider_ref_idx ON side_effects (provider_ref) WHERE provider_ref IS NOT NULL;
CREATE INDEX side_effects_terminal_idx ON side_effects (ended_at) INCLUDE (phase, kind, ended_attempts, created_at, confirmed_at) WHERE phase <> 'live';

-- Today's row triggers, on the parent (see the header for what a move
-- does to the AFTER UPDATE ones).
CREATE TRIGGER side_effects_failed_event AFTER UPDATE OF state ON side_effects FOR EACH ROW
	WHEN (NEW.state = 'failed' AND OLD.state IS DISTINCT FROM 'failed') EXECUTE FUNCTION outboxd_effect_failed_event();
CREATE TRIGGER side_effects_order_end AFTER UPDATE ON side_effects FOR EACH ROW
	WHEN (NEW.ordering_key IS NOT NULL AND current_setting('outboxd.chain_moved', true) IS DISTINCT FROM 'on'
		AND ((NEW.state IS DISTINCT FROM OLD.state AND (NEW.state IN ('confirmed', 'cancelled') OR (NEW.state = 'failed' AND NEW.ordering_skip_failed)))
			OR (NEW.ordering_released_at IS NOT NULL AND OLD.ordering_released_at IS NULL)))
	EXECUTE FUNCTION outboxd_order_wake();
CREATE TRIGGER side_effects_order_insert BEFORE INSERT ON side_effects FOR EACH ROW
	WHEN (NEW.ordering_key IS NOT NULL) EXECUTE FUNCTION outboxd_order_effect();
CREATE TRIGGER side_effects_tenant_end AFTER UPDATE ON side_effects FOR EACH ROW
	WHEN (NEW.tenant IS NOT NULL AND NEW.state IS DISTINCT FROM OLD.state AND NEW.state IN ('confirmed', 'failed', 'cancelled'))
	EXECUTE FUNCTION outboxd_tenant_end();
CREATE TRIGGER side_effects_tenant_queue AFTER INSERT ON side_effects FOR EACH ROW
	WHEN (NEW.tenant IS NOT NULL AND NEW.ordering_key IS NULL) EXECUTE FUNCTION outboxd_tenant_queue();

ALTER TABLE side_effects_live SET (autovacuum_vacuum_scale_factor = 0.05, autovacuum_vacuum_threshold = 10000,
	autovacuum_vacuum_insert_scale_factor = 0.05, autovacuum_analyze_scale_factor = 0.05);
