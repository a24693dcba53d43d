package store

import (
	"fmt"
	"strings"
)

// The idempotency key is not a column: Go derives it from (source_id,
// kind) after reading a row (rowToEffect); SQL reads it as
// outboxd_idempotency_key(source_id, kind).
const effectColumns = `id, source_id, kind, provider, payload, state, attempts,
	last_error, provider_ref, replayed, next_attempt_at, created_at, updated_at, fired_at, first_fired_at, confirmed_at,
	in_doubt, total_attempts, redrives, key_window_from, acknowledged_at, not_before,
	ordering_key, ordering_seq, ordering_skip_failed, ordering_released_at, waiting_for, waiting_since, tenant, replay_id`

// openInChain is true of an effect s of an ordering key that has not
// ended: the effects after it wait. Its terms are those of
// side_effects_ordering_open_idx, so the planner reads that index.
const openInChain = `s.ordering_released_at IS NULL AND s.phase NOT IN ('confirmed', 'cancelled')
		AND (s.phase = 'live' OR NOT s.ordering_skip_failed)`

// holdsAChain is true of a failed effect e that holds the effects after it
// on its ordering key (BlockKey, not released) while one of them is live:
// retention keeps it, since deleting it would let them go without anyone
// deciding so.
const holdsAChain = `(e.ordering_key IS NOT NULL AND e.ordering_released_at IS NULL AND NOT e.ordering_skip_failed
	AND e.phase IN ('failed', 'acknowledged') AND EXISTS (
		SELECT 1 FROM /*schema*/side_effects s
		WHERE s.ordering_key = e.ordering_key AND s.ordering_seq > e.ordering_seq AND s.phase = 'live'))`

// blockedInChain is true of the effect e while an earlier effect of its
// ordering key has not ended; blockedInChainUnaliased of side_effects
// named by its table name.
const (
	blockedInChain = `(e.ordering_key IS NOT NULL AND EXISTS (
		SELECT 1 FROM /*schema*/side_effects s
		WHERE s.ordering_key = e.ordering_key AND s.ordering_seq < e.ordering_seq
		AND ` + openInChain + `))`
	blockedInChainUnaliased = `(side_effects.ordering_key IS NOT NULL AND EXISTS (
		SELECT 1 FROM /*schema*/side_effects s
		WHERE s.ordering_key = side_effects.ordering_key AND s.ordering_seq < side_effects.ordering_seq
		AND ` + openInChain + `))`
)

const (
	sqlInsertEvent = `
INSERT INTO /*schema*/outbox_events (id, aggregate_type, aggregate_id, event_type, payload, traceparent)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (id) DO NOTHING`

	// A new event and its effects in one statement: the effects are
	// inserted only if the event was. $6.. are the effects' arrays.
	sqlInsertEventWithEffects = `
WITH ev AS (
	INSERT INTO /*schema*/outbox_events (id, aggregate_type, aggregate_id, event_type, payload, traceparent)
	VALUES ($1, $2, $3, $4, $5, $13)
	ON CONFLICT (id) DO NOTHING
	RETURNING id
)
INSERT INTO /*schema*/side_effects (id, source_id, kind, provider, payload, not_before, ordering_key, ordering_skip_failed,
	tenant, waiting_for, waiting_since)
SELECT u.id, ev.id, u.kind, u.provider, u.payload, u.not_before, u.okey, u.oskip,
	u.tenant, CASE WHEN u.okey IS NULL THEN 'turn:' || u.tenant END, CASE WHEN u.okey IS NULL AND u.tenant IS NOT NULL THEN now() END
FROM ev, unnest($6::uuid[], $7::text[], $8::text[], $9::jsonb[], $10::timestamptz[], $11::text[], $12::boolean[], $14::text[])
	AS u(id, kind, provider, payload, not_before, okey, oskip, tenant)
RETURNING id`

	// sqlInsertEventWithEffects, also queueing each effect in the intake
	// for a dispatcher to give it a River job.
	sqlInsertEventWithEffectsIntake = `
WITH ev AS (
	INSERT INTO /*schema*/outbox_events (id, aggregate_type, aggregate_id, event_type, payload, traceparent)
	VALUES ($1, $2, $3, $4, $5, $13)
	ON CONFLICT (id) DO NOTHING
	RETURNING id
), eff AS (
	INSERT INTO /*schema*/side_effects (id, source_id, kind, provider, payload, not_before, ordering_key, ordering_skip_failed,
		tenant, waiting_for, waiting_since)
	SELECT u.id, ev.id, u.kind, u.provider, u.payload, u.not_before, u.okey, u.oskip,
		u.tenant, CASE WHEN u.okey IS NULL THEN 'turn:' || u.tenant END, CASE WHEN u.okey IS NULL AND u.tenant IS NOT NULL THEN now() END
	FROM ev, unnest($6::uuid[], $7::text[], $8::text[], $9::jsonb[], $10::timestamptz[], $11::text[], $12::boolean[], $14::text[])
		AS u(id, kind, provider, payload, not_before, okey, oskip, tenant)
	RETURNING id, provider, tenant, ordering_key
)
INSERT INTO /*schema*/outbox_intake (effect_id, provider) SELECT id, provider FROM eff WHERE tenant IS NULL OR ordering_key IS NOT NULL`

	// A new event carrying its effects ($6, a JSON array of {kind,
	// provider, payload, not_before}), and the event's row in
	// outbox_event_intake: the effects' rows are written later, by
	// sqlTakeIntake or sqlWriteOutEvent (outbox.EffectsByDispatcher).
	sqlInsertEventCarryingEffects = `
WITH ev AS (
	INSERT INTO /*schema*/outbox_events (id, aggregate_type, aggregate_id, event_type, payload, traceparent, effects)
	VALUES ($1, $2, $3, $4, $5, $7, $6)
	ON CONFLICT (id) DO NOTHING
	RETURNING id
)
INSERT INTO /*schema*/outbox_event_intake (event_id) SELECT id FROM ev`

	// writtenOut writes the effects' rows of the events in ev (id,
	// created_at, effects: the effects an event carried) as the enqueue
	// would have, with the ids and keys derived from the event and the
	// kind and the event's time; a row that exists already is left alone.
	writtenOut = `
	INSERT INTO /*schema*/side_effects (id, source_id, kind, provider, payload, not_before, created_at)
	SELECT /*schema*/outboxd_effect_id(ev.id, x.kind), ev.id, x.kind, x.provider, x.payload, x.not_before, ev.created_at
	FROM ev, jsonb_to_recordset(ev.effects) AS x(kind text, provider text, payload jsonb, not_before timestamptz)
	ON CONFLICT DO NOTHING
	RETURNING id, provider, not_before`

	// Writes out, in the caller's transaction, the effects event $1
	// carries if no dispatcher has yet, each queued in the intake for a
	// dispatcher to give it a job, and returns how many it wrote. The
	// event's row lock orders it with a dispatcher doing the same
	// (sqlTakeIntake): whichever comes second finds effects NULL and
	// writes nothing.
	sqlWriteOutEvent = `
WITH ev AS (
	UPDATE /*schema*/outbox_events e SET effects = NULL
	FROM /*schema*/outbox_events old
	WHERE e.id = $1 AND old.id = e.id AND e.effects IS NOT NULL
	RETURNING e.id, e.created_at, old.effects
), eff AS (` + writtenOut + `
), q AS (
	INSERT INTO /*schema*/outbox_intake (effect_id, provider) SELECT id, provider FROM eff
)
SELECT count(*) FROM eff`

	// sqlInsertEffects, also queueing each inserted effect in the intake.
	sqlInsertEffectsIntake = `
WITH eff AS (
	INSERT INTO /*schema*/side_effects (id, source_id, kind, provider, payload, not_before, ordering_key, ordering_skip_failed,
		tenant, waiting_for, waiting_since)
	SELECT u.id, $1, u.kind, u.provider, u.payload, u.not_before, u.okey, u.oskip,
		u.tenant, CASE WHEN u.okey IS NULL THEN 'turn:' || u.tenant END, CASE WHEN u.okey IS NULL AND u.tenant IS NOT NULL THEN now() END
	FROM unnest($2::uuid[], $3::text[], $4::text[], $5::jsonb[], $6::timestamptz[], $7::text[], $8::boolean[], $9::text[])
		AS u(id, kind, provider, payload, not_before, okey, oskip, tenant)
	ON CONFLICT DO NOTHING
	RETURNING id, provider, tenant, ordering_key
), q AS (
	INSERT INTO /*schema*/outbox_intake (effect_id, provider) SELECT id, provider FROM eff WHERE tenant IS NULL OR ordering_key IS NOT NULL
)
SELECT id FROM eff`

	// Takes up to $1 effects from the intake, skipping rows another
	// dispatcher is taking; and up to $2 events that carry their effects
	// (outbox_event_intake), whose effects' rows it writes and returns
	// with the others (sqlWriteOutEvent says how that is ordered with a
	// replay or a cancel writing them out first).
	sqlTakeIntake = `
WITH taken AS (
	DELETE FROM /*schema*/outbox_intake WHERE ctid = ANY(ARRAY(
		SELECT ctid FROM /*schema*/outbox_intake LIMIT $1 FOR UPDATE SKIP LOCKED))
	RETURNING effect_id, provider
), events AS (
	DELETE FROM /*schema*/outbox_event_intake WHERE ctid = ANY(ARRAY(
		SELECT ctid FROM /*schema*/outbox_event_intake LIMIT $2 FOR UPDATE SKIP LOCKED))
	RETURNING event_id
), ev AS (
	UPDATE /*schema*/outbox_events e SET effects = NULL
	FROM /*schema*/outbox_events old, events t
	WHERE old.id = t.event_id AND e.id = old.id AND e.effects IS NOT NULL
	RETURNING e.id, e.created_at, old.effects
), eff AS (` + writtenOut + `
)
SELECT effect_id, provider, (SELECT not_before FROM /*schema*/side_effects WHERE id = effect_id),
	coalesce((SELECT ordering_key IS NOT NULL FROM /*schema*/side_effects WHERE id = effect_id), false)
FROM taken
UNION ALL
SELECT id, provider, not_before, false FROM eff`

	// The first effect of each key in $1 that has not ended, if pending
	// (NULLs otherwise), taking the keys' wakes: sqlTakeWakes for keys
	// a confirmation just moved.
	//
	// River notifies its producers of an insert at most once per fetch
	// cooldown per queue and client; a chain's next job, inserted a few
	// milliseconds after the last, would often wait for the next poll
	// (measured: every other step of a hot key took the 100 ms poll
	// interval). So this also notifies on River's insert topic, as River's
	// own inserts do ("<schema>.river_insert", {"queue": ...}; $2 is the
	// schema), for the queues of the effects it returns: delivered on
	// commit, after the jobs are inserted.
	sqlNextInChains = `
WITH w AS (
	DELETE FROM /*schema*/outbox_order_wake WHERE ctid = ANY(ARRAY(
		SELECT ctid FROM /*schema*/outbox_order_wake WHERE ordering_key = ANY($1) FOR UPDATE SKIP LOCKED))
), heads AS (
	SELECT h.id, h.provider, h.not_before
	FROM (SELECT DISTINCT k AS ordering_key FROM unnest($1::text[]) AS k) k
	LEFT JOIN LATERAL (
		SELECT s.id, s.provider, s.not_before, s.state FROM /*schema*/side_effects s
		WHERE s.ordering_key = k.ordering_key AND ` + openInChain + `
		ORDER BY s.ordering_seq LIMIT 1) h ON h.state = 'pending'
), notified AS (
	SELECT pg_notify(concat(coalesce(nullif($2, ''), current_schema()), '.river_insert'), json_build_object('queue', provider)::text)
	FROM (SELECT DISTINCT provider FROM heads WHERE provider IS NOT NULL) p
)
SELECT id, provider, not_before FROM heads, (SELECT count(*) FROM notified) n`

	// The last number drawn from the intake's watch sequence (migration
	// 00030): it moves with every write to the intake, the ordering keys'
	// wakes and the tenants' queues.
	sqlIntakeWatch = `SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM /*schema*/outbox_intake_watch`

	sqlIntakeWaiting = `SELECT EXISTS (SELECT 1 FROM /*schema*/outbox_intake) OR EXISTS (SELECT 1 FROM /*schema*/outbox_event_intake),
	EXISTS (SELECT 1 FROM /*schema*/outbox_order_wake),
	(` + sqlIntakeWatch + `)`

	// Takes up to $1 keys whose chain may have moved and returns, for
	// each, its first effect that has not ended if that one is pending:
	// the effect that may fire next on the key (NULLs for a key whose
	// first is not pending, or that has none).
	//
	// A key whose first effect is not pending but is being changed right
	// now (its row is locked: a dispatcher's confirming transaction), or
	// was changed since this statement's snapshot (the row as locked now,
	// its latest version, is not in the state the snapshot read), is
	// returned as held: that transaction may not see an effect enqueued
	// on the key after it began, and this one does not see the change,
	// so the wake is written again (sqlWakeAgain) for the next look.
	// (Locking the row alone is not enough: a confirmation that commits
	// between the snapshot and the lock leaves the row unlocked and reads
	// here as still fired.)
	sqlTakeWakes = `
WITH w AS (
	DELETE FROM /*schema*/outbox_order_wake WHERE ctid = ANY(ARRAY(
		SELECT ctid FROM /*schema*/outbox_order_wake LIMIT $1 FOR UPDATE SKIP LOCKED))
	RETURNING ordering_key
)
SELECT CASE WHEN h.state = 'pending' THEN h.id END, CASE WHEN h.state = 'pending' THEN h.provider END,
	CASE WHEN h.state = 'pending' THEN h.not_before END,
	CASE WHEN h.state <> 'pending' AND (
		SELECT x.state FROM /*schema*/side_effects x WHERE x.id = h.id FOR SHARE SKIP LOCKED) IS DISTINCT FROM h.state THEN k.ordering_key END
FROM (SELECT DISTINCT ordering_key FROM w) k
LEFT JOIN LATERAL (
	SELECT s.id, s.provider, s.not_before, s.state FROM /*schema*/side_effects s
	WHERE s.ordering_key = k.ordering_key AND ` + openInChain + `
	ORDER BY s.ordering_seq LIMIT 1) h ON true`

	// The wakes of keys held by a change in flight, for the next look.
	sqlWakeAgain = `INSERT INTO /*schema*/outbox_order_wake (ordering_key) SELECT unnest($1::text[]) ON CONFLICT DO NOTHING`

	// An application's cancel, in its own transaction, of the effect of
	// kind $2 of event $1 that has never fired: the row lock waits for a
	// claim in flight, so cancel and fire never both happen. Returns the
	// effect's id and state before, whether it had fired, and whether it
	// was cancelled now.
	sqlCancelUnfired = `
WITH target AS (
	SELECT id, state, first_fired_at FROM /*schema*/side_effects WHERE source_id = $1 AND kind = $2 FOR UPDATE
), upd AS (
	UPDATE /*schema*/side_effects e SET state = 'cancelled', next_attempt_at = NULL, updated_at = now()
	FROM target t
	WHERE e.id = t.id AND t.state IN ('pending', 'failed') AND t.first_fired_at IS NULL
	RETURNING e.id
)
SELECT t.id, t.state, t.first_fired_at IS NOT NULL, EXISTS (SELECT 1 FROM upd) FROM target t`

	// The first effect of effect $1's ordering key, before it, that has
	// not ended: what it waits behind.
	// The effects after $1 on its ordering key that have not ended, in
	// the order they go out once it is released (at most $2).
	sqlWaitingBehind = `
SELECT ` + effectColumns + ` FROM /*schema*/side_effects s
WHERE s.ordering_key = (SELECT ordering_key FROM /*schema*/side_effects WHERE id = $1)
	AND s.ordering_seq > (SELECT ordering_seq FROM /*schema*/side_effects WHERE id = $1)
	AND s.state IN ('pending', 'fired', 'failed')
ORDER BY s.ordering_seq LIMIT $2`

	sqlBlockedBehind = `
SELECT s.id FROM /*schema*/side_effects e JOIN /*schema*/side_effects s
	ON s.ordering_key = e.ordering_key AND s.ordering_seq < e.ordering_seq
WHERE e.id = $1 AND ` + openInChain + `
ORDER BY s.ordering_seq LIMIT 1`

	// The enqueue locks of the ordering keys $1 in schema $2 ("": the
	// search_path's), in hash order: the locks outboxd_order_effect and
	// outboxd_enqueue take (migration 00023).
	sqlLockOrderingKeys = `
SELECT pg_advisory_xact_lock(h) FROM (
	SELECT DISTINCT hashtextextended('outboxd order ' || coalesce(nullif($2, ''), current_schema()) || ':' || k, 0) AS h
	FROM unnest($1::text[]) AS k ORDER BY 1) AS x`

	// Effects whose id lies in [$1, $2]: the ids that begin with a key's
	// first hex digits (an id is derived from its key's first 16 bytes), on
	// the primary key, at most $3.
	sqlEffectsInIDRange = `SELECT ` + effectColumns + ` FROM /*schema*/side_effects
WHERE id BETWEEN $1 AND $2 ORDER BY id LIMIT $3`

	// Effects whose provider reference is $1, newest first (through
	// side_effects_provider_ref_idx).
	sqlEffectsByProviderRef = `SELECT ` + effectColumns + ` FROM /*schema*/side_effects
WHERE provider_ref = $1 AND provider_ref IS NOT NULL ORDER BY created_at DESC LIMIT $2`

	// The W3C traceparent stored with the event of effect $1 ("" if none).
	sqlEventTraceparent = `SELECT coalesce(traceparent, '') FROM /*schema*/outbox_events WHERE id = $1`

	sqlEventMatches = `
SELECT aggregate_type = $2 AND aggregate_id = $3 AND event_type = $4 AND payload = $5::jsonb, effects IS NOT NULL
FROM /*schema*/outbox_events WHERE id = $1`

	// ON CONFLICT without a target: id and (source_id, kind) both name the
	// effect (the id is derived from (source_id, kind)), so either means
	// "exists".
	sqlInsertEffects = `
INSERT INTO /*schema*/side_effects (id, source_id, kind, provider, payload, not_before, ordering_key, ordering_skip_failed,
	tenant, waiting_for, waiting_since)
SELECT u.id, $1, u.kind, u.provider, u.payload, u.not_before, u.okey, u.oskip,
	u.tenant, CASE WHEN u.okey IS NULL THEN 'turn:' || u.tenant END, CASE WHEN u.okey IS NULL AND u.tenant IS NOT NULL THEN now() END
FROM unnest($2::uuid[], $3::text[], $4::text[], $5::jsonb[], $6::timestamptz[], $7::text[], $8::boolean[], $9::text[])
	AS u(id, kind, provider, payload, not_before, okey, oskip, tenant)
ON CONFLICT DO NOTHING
RETURNING id`

	sqlCompareEffects = `
SELECT u.kind, s.id, coalesce(s.provider = u.provider AND s.payload = u.payload AND s.not_before IS NOT DISTINCT FROM u.not_before
	AND s.ordering_key IS NOT DISTINCT FROM u.okey AND s.ordering_skip_failed = u.oskip, false)
FROM unnest($2::text[], $3::text[], $4::jsonb[], $5::timestamptz[], $6::text[], $7::boolean[]) WITH ORDINALITY AS u(kind, provider, payload, not_before, okey, oskip, ord)
LEFT JOIN /*schema*/side_effects s ON s.source_id = $1 AND s.kind = u.kind
ORDER BY u.ord`

	sqlGetEffect = `SELECT ` + effectColumns + ` FROM /*schema*/side_effects WHERE id = $1`

	sqlGetEffectForUpdate = `SELECT ` + effectColumns + ` FROM /*schema*/side_effects WHERE id = $1 FOR UPDATE`

	sqlGetEffectByKeyForUpdate = sqlGetEffectByKey + ` FOR UPDATE`

	// The newest dispatch job of effect $1 in one of the states $2, or 0.
	// max(id + 0), not max(id): Postgres would read max(id) backwards
	// along river_job's primary key, filtering every finished job, when
	// the effect has none; the args index finds its few jobs at once.
	//
	// A batch job counts only while the effect has not ended: a batch
	// makes first attempts only, so it never fires again an effect that
	// ended, nor one an operator sent back (sqlClaimFirstMany).
	sqlJobIn = `
SELECT coalesce(max(id + 0), 0) FROM /*schema*/river_job
WHERE state::text = ANY($2) AND ((kind = 'outboxd.dispatch' AND args @> jsonb_build_object('effect_id', $1::uuid))
	OR (kind = 'outboxd.dispatch_batch' AND args @> jsonb_build_object('effect_ids', jsonb_build_array($1::uuid))
		AND EXISTS (SELECT 1 FROM /*schema*/side_effects WHERE id = $1 AND phase = 'live')))`

	// The effect whose key is $1: by its derived id $2 (KeyEffectID), or,
	// for a row whose id is not a version 8 UUID (written before ids were
	// derived, or by hand), through side_effects_other_id_key_idx.
	sqlGetEffectByKey = `SELECT ` + effectColumns + ` FROM /*schema*/side_effects WHERE id = coalesce(
	(SELECT id FROM /*schema*/side_effects
	 WHERE id = $2 AND /*schema*/outboxd_idempotency_key(source_id, kind) = $1),
	(SELECT id FROM /*schema*/side_effects
	 WHERE /*schema*/outboxd_idempotency_key(source_id, kind) = $1
	   AND substr(id::text, 15, 1) <> '8'
	 LIMIT 1))`

	// Transitions. Each names the states it leaves from; zero rows affected
	// means the transition no longer applies and nothing changed.

	// pending|fired -> fired, guarded on the state the worker read ($2), so
	// that an operator's action in between wins.
	sqlClaim = `
UPDATE /*schema*/side_effects
SET state = 'fired', attempts = attempts + 1, total_attempts = total_attempts + 1, in_doubt = true,
	fired_at = now(), first_fired_at = coalesce(first_fired_at, now()), key_window_from = coalesce(key_window_from, now()),
	next_attempt_at = NULL, waiting_for = NULL, waiting_since = NULL, updated_at = now()
WHERE id = $1 AND state = $2 AND state IN ('pending', 'fired') AND (not_before IS NULL OR not_before <= now())
	AND NOT ` + blockedInChainUnaliased + `
RETURNING ` + effectColumns

	// pending -> fired for the effects in $1 never fired before, of a
	// provider this process has ($2): the common first attempt, which needs
	// no in-doubt or key-window decision, for many effects in one statement.
	// Neither claim fires an effect before its not_before, nor one with
	// an earlier effect of its ordering key that has not ended. An effect
	// an operator sent back (redrives) is claimed by its own job
	// (sqlClaim), never by a batch job it was in before (batchWorker).
	sqlClaimFirstMany = `
UPDATE /*schema*/side_effects
SET state = 'fired', attempts = attempts + 1, total_attempts = total_attempts + 1, in_doubt = true,
	fired_at = now(), first_fired_at = now(), key_window_from = coalesce(key_window_from, now()),
	next_attempt_at = NULL, waiting_for = NULL, waiting_since = NULL, updated_at = now()
WHERE id = ANY($1) AND state = 'pending' AND first_fired_at IS NULL AND NOT in_doubt AND redrives = 0 AND provider = ANY($2)
	AND (not_before IS NULL OR not_before <= now()) AND NOT ` + blockedInChainUnaliased + `
RETURNING ` + effectColumns

	// sqlClaimFirstMany for a dispatcher that traces: each claimed effect
	// also returns the traceparent stored with its event, in the same
	// round trip.
	sqlClaimFirstManyTraced = `
WITH c AS (` + sqlClaimFirstMany + `)
SELECT c.*, coalesce(ev.traceparent, '') AS traceparent FROM c LEFT JOIN /*schema*/outbox_events ev ON ev.id = c.source_id`

	// fired -> confirmed on the providers' acknowledgements of many
	// effects ($1 ids, $2 refs, '' for none, $3 replayed flags): the common
	// case, in one plain guarded UPDATE that takes no separate row lock.
	// Effects it does not return were not fired: see sqlConfirmMany.
	sqlConfirmFiredMany = `
UPDATE /*schema*/side_effects e
SET state = 'confirmed', confirmed_at = now(), provider_ref = nullif(u.ref, ''), replayed = u.replayed,
	last_error = NULL, in_doubt = false, next_attempt_at = NULL, updated_at = now()
FROM unnest($1::uuid[], $2::text[], $3::boolean[]) AS u(id, ref, replayed)
WHERE e.id = u.id AND e.state = 'fired'
RETURNING e.id`

	// sqlConfirmFiredMany for a transaction that moves the chains of the
	// effects it confirms: it sets outboxd.chain_moved for the transaction
	// first (a join emits no row before both of its sides gave one, so the
	// flag is set before the first row is updated and the end trigger's
	// WHEN reads it).
	sqlConfirmFiredManyChained = `
WITH flag AS MATERIALIZED (SELECT set_config('outboxd.chain_moved', 'on', true) AS on)
UPDATE /*schema*/side_effects e
SET state = 'confirmed', confirmed_at = now(), provider_ref = nullif(u.ref, ''), replayed = u.replayed,
	last_error = NULL, in_doubt = false, next_attempt_at = NULL, updated_at = now()
FROM flag, unnest($1::uuid[], $2::text[], $3::boolean[]) AS u(id, ref, replayed)
WHERE e.id = u.id AND e.state = 'fired' AND flag.on = 'on'
RETURNING e.id`

	// fired -> confirmed on the providers' acknowledgements of many
	// effects: $1 ids, $2 refs ('' for none), $3 replayed flags. Also from
	// pending and failed: an operator's action while the call was in flight
	// does not undo what the provider did. Returns the state each left, with
	// the error it clears; no row for an effect cancelled, confirmed or gone
	// (see sqlLateAck). Rows are locked in id order.
	sqlConfirmMany = `
WITH input AS (
	SELECT * FROM unnest($1::uuid[], $2::text[], $3::boolean[]) AS u(id, ref, replayed)
), before AS (
	SELECT e.id, e.state, e.last_error FROM /*schema*/side_effects e
	WHERE e.id IN (SELECT id FROM input) ORDER BY e.id FOR UPDATE
)
UPDATE /*schema*/side_effects e
SET state = 'confirmed', confirmed_at = now(), provider_ref = nullif(input.ref, ''), replayed = input.replayed,
	last_error = NULL, in_doubt = false, next_attempt_at = NULL, updated_at = now()
FROM before JOIN input ON input.id = before.id
WHERE e.id = before.id AND before.state IN ('fired', 'pending', 'failed')
RETURNING e.id, before.state, before.last_error`

	// An acknowledgement for an effect that an operator cancelled or
	// confirmed meanwhile: kept on the row (when it has no ref yet) and in
	// the audit trail, never dropped. $3 is the audit details.
	sqlLateAck = `
WITH upd AS (
	UPDATE /*schema*/side_effects SET provider_ref = coalesce(provider_ref, $2)
	WHERE id = $1 RETURNING state
)
INSERT INTO /*schema*/side_effect_audit (effect_id, action, actor, reason, from_state, to_state, details)
SELECT $1, 'late_ack', 'outboxd', $4, upd.state, upd.state, $3 FROM upd`

	// fired -> back to what it was before a claim whose request was never
	// made ($2..$7 the columns as they were). When it was held back on
	// outboxd's side ($9 the limit key it waits for, $8 why), the effect
	// also says so; otherwise $8 and $9 are NULL and change nothing.
	sqlUnclaim = `
UPDATE /*schema*/side_effects
SET state = $2, attempts = attempts - 1, total_attempts = total_attempts - 1, in_doubt = $3,
	fired_at = $4, first_fired_at = $5, key_window_from = $6, next_attempt_at = $7,
	last_error = coalesce($8, last_error), waiting_for = coalesce($9, waiting_for),
	waiting_since = CASE WHEN $9::text IS NULL THEN waiting_since ELSE coalesce(waiting_since, now()) END, updated_at = now()
WHERE id = $1 AND state = 'fired'`

	// fired -> pending: the provider proved it did not act.
	sqlRelease = `
UPDATE /*schema*/side_effects
SET state = 'pending', in_doubt = $4, last_error = $2, next_attempt_at = $3, updated_at = now()
WHERE id = $1 AND state = 'fired'`

	// fired -> fired: outcome unknown; keep fired so the next attempt is
	// known to be a re-fire.
	sqlRecordInDoubt = `
UPDATE /*schema*/side_effects
SET last_error = $2, next_attempt_at = $3, updated_at = now()
WHERE id = $1 AND state = 'fired'`

	// pending|fired -> failed.
	sqlFail = `
UPDATE /*schema*/side_effects
SET state = 'failed', last_error = $2, next_attempt_at = NULL, updated_at = now()
WHERE id = $1 AND state IN ('pending', 'fired')`

	// fired -> failed after an answer proving the provider did not act:
	// in doubt ($3) only if an earlier request may have been applied.
	sqlFailProven = `
UPDATE /*schema*/side_effects
SET state = 'failed', last_error = $2, in_doubt = $3, next_attempt_at = NULL, updated_at = now()
WHERE id = $1 AND state = 'fired'`
)

// Operator transitions: each locks the row, checks the state it leaves from
// and returns the row as it was, for the audit trail.
const (
	// pending|fired|failed -> cancelled.
	sqlCancel = `
WITH before AS (
	SELECT ` + effectColumns + ` FROM /*schema*/side_effects
	WHERE id = $1 AND state IN ('pending', 'fired', 'failed') FOR UPDATE
)
UPDATE /*schema*/side_effects e
SET state = 'cancelled', next_attempt_at = NULL, updated_at = now()
FROM before WHERE e.id = before.id
RETURNING ` + beforeColumns

	// failed|cancelled (and, when $2, fired) -> pending: a fresh round of
	// attempts with the same key. The key window, the doubt about earlier
	// requests and the total attempts carry over; $3 clears the doubt (the
	// operator accepts the risk of a duplicate) and $4 restarts the key
	// window (the operator checked the provider), each audited.
	// An operator's corrected payload (EditPayload), in the transaction
	// that sends the effect back to pending.
	sqlEditPayload = `UPDATE /*schema*/side_effects SET payload = $2 WHERE id = $1 AND state = 'failed'`

	sqlRedrive = `
WITH before AS (
	SELECT ` + effectColumns + ` FROM /*schema*/side_effects
	WHERE id = $1 AND (state IN ('failed', 'cancelled') OR (state = 'fired' AND $2::boolean)) FOR UPDATE
)
UPDATE /*schema*/side_effects e
SET state = 'pending', attempts = 0, redrives = e.redrives + 1, next_attempt_at = NULL, updated_at = now(), acknowledged_at = NULL,
	in_doubt = e.in_doubt AND NOT $3::boolean,
	key_window_from = CASE WHEN $4::boolean THEN NULL ELSE e.key_window_from END,
	replay_id = $5
FROM before WHERE e.id = before.id
RETURNING ` + beforeColumns

	// any but confirmed -> confirmed, by hand after checking the provider.
	sqlResolveConfirmed = `
WITH before AS (
	SELECT ` + effectColumns + ` FROM /*schema*/side_effects
	WHERE id = $1 AND state IN ('pending', 'fired', 'failed', 'cancelled') FOR UPDATE
)
UPDATE /*schema*/side_effects e
SET state = 'confirmed', provider_ref = $2, confirmed_at = now(), next_attempt_at = NULL, updated_at = now(),
	last_error = NULL, in_doubt = false
FROM before WHERE e.id = before.id
RETURNING ` + beforeColumns

	// pending|fired|failed in doubt -> confirmed, by a provider event that
	// shows the request was applied ($2 the provider's object, kept when the
	// row has a ref).
	sqlEventConfirm = `
WITH before AS (
	SELECT ` + effectColumns + ` FROM /*schema*/side_effects
	WHERE id = $1 AND (state IN ('pending', 'fired') OR (state = 'failed' AND in_doubt)) FOR UPDATE
)
UPDATE /*schema*/side_effects e
SET state = 'confirmed', provider_ref = coalesce(e.provider_ref, nullif($2, '')), confirmed_at = now(), next_attempt_at = NULL,
	updated_at = now(), last_error = NULL, in_doubt = false
FROM before WHERE e.id = before.id
RETURNING ` + beforeColumns

	// A mail's delivery status from the provider's events; a later status
	// never gives way to an earlier one delivered out of order (processed <
	// deferred < delivered, bounce, dropped).
	sqlRecordDelivery = `
INSERT INTO /*schema*/side_effect_deliveries AS d (effect_id, status, detail, event_id, event_at)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (effect_id) DO UPDATE SET status = excluded.status, detail = excluded.detail, event_id = excluded.event_id,
	event_at = excluded.event_at, updated_at = now()
WHERE (CASE excluded.status WHEN 'processed' THEN 1 WHEN 'deferred' THEN 2 ELSE 3 END)
	> (CASE d.status WHEN 'processed' THEN 1 WHEN 'deferred' THEN 2 ELSE 3 END)
	OR ((CASE d.status WHEN 'processed' THEN 1 WHEN 'deferred' THEN 2 ELSE 3 END) = (CASE excluded.status WHEN 'processed' THEN 1 WHEN 'deferred' THEN 2 ELSE 3 END)
		AND excluded.event_at >= d.event_at)`

	sqlGetDelivery = `SELECT status, detail, event_id, event_at, updated_at FROM /*schema*/side_effect_deliveries WHERE effect_id = $1`

	sqlInsertDrift = `
INSERT INTO /*schema*/provider_drift (reason, provider, kind, effect_id, effect_state, idempotency_key, event_id, event_type, object_id, check_hint, details)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`

	// Drift records, newest first; $5 keeps acknowledged ones.
	sqlListDrift = `
SELECT d.id, d.reason, d.provider, d.kind, d.effect_id, d.effect_state, d.idempotency_key, d.event_id, d.event_type, d.object_id,
	d.check_hint, d.created_at, d.details, d.acknowledged_at, d.acknowledged_by, d.ack_reason, e.state, e.provider_ref
FROM /*schema*/provider_drift d LEFT JOIN /*schema*/side_effects e ON e.id = d.effect_id
WHERE d.created_at >= $1 AND ($2 = '' OR d.reason = $2) AND ($3::uuid IS NULL OR d.effect_id = $3)
	AND ($5 OR d.acknowledged_at IS NULL)
ORDER BY d.id DESC LIMIT $4`

	// Acknowledges drift records $1 (not acknowledged yet) by $2 for $3.
	sqlAckDrift = `
UPDATE /*schema*/provider_drift SET acknowledged_at = now(), acknowledged_by = $2, ack_reason = $3
WHERE id = ANY($1) AND acknowledged_at IS NULL
RETURNING id`

	sqlUnacknowledgedDrift = `SELECT count(*) FROM /*schema*/provider_drift WHERE acknowledged_at IS NULL`

	// failed -> failed, acknowledged as reviewed and correctly failed.
	// Lets the effects after $1 on its ordering key go on: the end trigger
	// (migration 00016) wakes the chain.
	sqlReleaseChain = `
WITH before AS (
	SELECT ` + effectColumns + ` FROM /*schema*/side_effects
	WHERE id = $1 AND ordering_key IS NOT NULL AND ordering_released_at IS NULL FOR UPDATE
)
UPDATE /*schema*/side_effects e
SET ordering_released_at = now()
FROM before WHERE e.id = before.id
RETURNING ` + beforeColumns

	sqlAcknowledge = `
WITH before AS (
	SELECT ` + effectColumns + ` FROM /*schema*/side_effects
	WHERE id = $1 AND state = 'failed' AND acknowledged_at IS NULL FOR UPDATE
)
UPDATE /*schema*/side_effects e
SET acknowledged_at = now()
FROM before WHERE e.id = before.id
RETURNING ` + beforeColumns

	sqlInsertAudit = `
INSERT INTO /*schema*/side_effect_audit (effect_id, action, actor, reason, from_state, to_state, details)
VALUES ($1, $2, $3, $4, $5, $6, $7)`

	sqlListAudit = `
SELECT id, effect_id, action, actor, reason, from_state, to_state, details, created_at
FROM /*schema*/side_effect_audit WHERE effect_id = $1 ORDER BY id`
)

const beforeColumns = `before.id, before.source_id, before.kind, before.provider, before.payload,
	before.state, before.attempts, before.last_error, before.provider_ref, before.replayed, before.next_attempt_at,
	before.created_at, before.updated_at, before.fired_at, before.first_fired_at, before.confirmed_at,
	before.in_doubt, before.total_attempts, before.redrives, before.key_window_from, before.acknowledged_at, before.not_before,
	before.ordering_key, before.ordering_seq, before.ordering_skip_failed, before.ordering_released_at,
	before.waiting_for, before.waiting_since, before.tenant, before.replay_id`

// Inspection: what operators and the stuck/stats commands read.
const (
	// Filters are NULL when unset. Newest first; ($7, $8) is the keyset
	// cursor (created_at, id) of the last row of the previous page.
	sqlListEffects = `
SELECT ` + effectColumns + ` FROM /*schema*/side_effects
WHERE ($1::text[] IS NULL OR state = ANY($1))
	AND ($2::text IS NULL OR kind = $2)
	AND ($3::text IS NULL OR provider = $3)
	AND ($4::uuid IS NULL OR source_id = $4)
	AND ($5::timestamptz IS NULL OR created_at >= $5)
	AND ($6::timestamptz IS NULL OR created_at < $6)
	AND ($7::timestamptz IS NULL OR (created_at, id) < ($7, $8::uuid))
ORDER BY created_at DESC, id DESC
LIMIT $9`

	// Live effects not updated since $1 (a scheduled one counts from its
	// time), and failed ones, with their newest live River job if any. Each
	// branch matches one partial index.
	sqlStuck = `
WITH stuck AS (
	(SELECT *, updated_at AS stuck_since FROM /*schema*/side_effects
	 WHERE phase = 'live' AND updated_at < $1 AND (not_before IS NULL OR not_before < $1) ORDER BY updated_at LIMIT $2)
	UNION ALL
	-- Fired before $1 and touched since: a webhook behind an open breaker
	-- is put back as it was every time its gate turns it away, so its row
	-- changes every few seconds while its call stays where it was.
	(SELECT *, fired_at AS stuck_since FROM /*schema*/side_effects
	 WHERE phase = 'live' AND state = 'fired' AND fired_at < $1 AND updated_at >= $1 ORDER BY fired_at LIMIT $2)
	UNION ALL
	(SELECT *, updated_at AS stuck_since FROM /*schema*/side_effects
	 WHERE phase = 'failed' ORDER BY ended_at LIMIT $2)
	ORDER BY stuck_since LIMIT $2
)
SELECT ` + effectColumnsE + `, j.id, j.state, j.scheduled_at, j.held_by, b.id
FROM stuck e
LEFT JOIN LATERAL (
	SELECT id, state::text, scheduled_at,
		CASE WHEN state = 'running' THEN attempted_by[array_length(attempted_by, 1)] END AS held_by
	FROM /*schema*/river_job
	WHERE ` + jobOfEffectE + `
		-- state as text: not ANDed with River's state index, which reads every
		-- live job for each effect
		AND state::text IN ('available', 'pending', 'retryable', 'running', 'scheduled')
	ORDER BY id + 0 DESC LIMIT 1 -- not id: see sqlJobIn
) j ON true
LEFT JOIN LATERAL (
	SELECT s.id FROM /*schema*/side_effects s
	WHERE e.ordering_key IS NOT NULL AND s.ordering_key = e.ordering_key AND s.ordering_seq < e.ordering_seq
		AND ` + openInChain + `
	ORDER BY s.ordering_seq LIMIT 1
) b ON true
ORDER BY e.stuck_since`

	// Stuck effects grouped by cause, the incident that began last first
	// (a live effect's began at its first attempt, or when it was due; a
	// failure's when it failed), so that the groups keep their places
	// while retries change their effects and a trickle of failures all day
	// sits below what began a minute ago: live effects
	// unchanged since $1, or retrying after an error however recently
	// (a partner that stopped answering shows in its first seconds, while
	// each attempt still changes its effects) (through the live index),
	// and failures not acknowledged that ended since $3 (through the
	// failed index, by when they failed: older ones are the failure
	// reasons' and the failed list's), by state, kind, provider, a
	// webhook's host and the first words of the last error after its
	// class (permanent, retryable, in_doubt). Effects their events have
	// carried since $1 (outbox.EffectsByDispatcher) are a group of their
	// own: no dispatcher has taken their events.
	sqlStuckGroups = `
WITH s AS (
	(SELECT id, state, kind, provider, payload, last_error, updated_at,
		coalesce(first_fired_at, greatest(created_at, not_before)) AS since FROM /*schema*/side_effects
	 WHERE phase = 'live' AND ((updated_at < $1 AND (not_before IS NULL OR not_before < $1)) OR last_error IS NOT NULL))
	UNION ALL
	(SELECT id, state, kind, provider, payload, last_error, updated_at, updated_at FROM /*schema*/side_effects
	 WHERE phase = 'failed' AND ended_at >= $3)
	UNION ALL
	(SELECT /*schema*/outboxd_effect_id(ev.id, x.kind), 'pending', x.kind, x.provider, x.payload,
		'carried by its event, which no dispatcher has taken', ev.created_at, greatest(ev.created_at, x.not_before)
	 ` + fromCarried + `
	 WHERE ev.created_at < $1 AND (x.not_before IS NULL OR x.not_before < $1))
)
SELECT state, kind, provider,
	CASE WHEN provider = 'webhook' THEN coalesce(substring(payload->>'url' FROM '^[a-zA-Z]+://([^/:?#]+)'), '') ELSE '' END AS host,
	coalesce(nullif(btrim(left(regexp_replace(regexp_replace(last_error, '^(permanent|retryable|in_doubt): ', ''), '\s*[:(].*$', ''), 80)), ''),
		CASE WHEN last_error IS NULL THEN 'no error' ELSE last_error END) AS cause,
	count(*), max(updated_at), min(since), (array_agg(id ORDER BY updated_at DESC))[1]
FROM s
GROUP BY 1, 2, 3, 4, 5
ORDER BY min(since) DESC
LIMIT $2`

	sqlEventOf = `
SELECT id, aggregate_type, aggregate_id, event_type, payload, created_at
FROM /*schema*/outbox_events WHERE id = $1`

	// The effects an event's subscribers effect stands for (migration
	// 00028).
	sqlSubscribers = `
SELECT endpoint_id, kind, provider, payload FROM /*schema*/outboxd_subscribers($1, $2, nullif($3, ''))`

	// The events of many effects, for providers that publish them.
	sqlEventsOf = `
SELECT id, aggregate_type, aggregate_id, event_type, payload, created_at
FROM /*schema*/outbox_events WHERE id = ANY($1)`

	// Events, newest first, each with its effects' kinds and states. Filters
	// are NULL when unset; $4 keeps events lacking an effect of that kind.
	// outbox_events has no secondary index (enqueue pays for none): this
	// reads the table.
	sqlEvents = `
SELECT ev.id, ev.aggregate_type, ev.aggregate_id, ev.event_type, ev.payload, ev.created_at,
	coalesce((SELECT jsonb_agg(jsonb_build_object('id', e.id, 'kind', e.kind, 'state', e.state) ORDER BY e.kind)
		FROM /*schema*/side_effects e WHERE e.source_id = ev.id), '[]'::jsonb)
FROM /*schema*/outbox_events ev
WHERE ($1::text IS NULL OR ev.event_type = $1)
	AND ($2::text IS NULL OR (ev.aggregate_type = $2 AND ev.aggregate_type <> ''))
	AND ($3::text IS NULL OR ev.aggregate_id = $3)
	AND ($4::text IS NULL OR NOT EXISTS (SELECT 1 FROM /*schema*/side_effects e WHERE e.source_id = ev.id AND e.kind = $4))
	AND ($5::timestamptz IS NULL OR ev.created_at >= $5)
	AND ($6::uuid IS NULL OR ev.id = $6)
ORDER BY ev.created_at DESC, ev.id DESC
LIMIT $7`

	// The web view's reads: each from an index.
	// The newest $2 failures not acknowledged, grouped by kind and reason:
	// the failed index alone (index-only) finds when the $2-th newest
	// failed, and only the failures since then are read from the table,
	// however many failures history keeps. (Given ORDER BY ended_at LIMIT
	// instead, the planner reads every failure's row in a bitmap scan and
	// sorts them: 231 ms at 10 M effects with 16,666 failures, 12 ms so.)
	sqlFailureReasons = `
SELECT kind, CASE WHEN last_error LIKE 'in doubt: not re-sent%' THEN 'in doubt: not re-sent'
		ELSE split_part(regexp_replace(coalesce(last_error, ''), '^(permanent|retryable|in_doubt): ', ''), ': ', 1) END AS reason,
	count(*)
FROM /*schema*/side_effects
WHERE phase = 'failed' AND ended_at >= (
	SELECT min(ended_at) FROM (SELECT ended_at FROM /*schema*/side_effects WHERE phase = 'failed' ORDER BY ended_at DESC LIMIT $2) n)
GROUP BY 1, 2 ORDER BY 3 DESC, 1, 2 LIMIT $1`

	sqlThroughput = `
SELECT date_trunc('minute', ended_at) AS minute,
	count(*) FILTER (WHERE phase = 'confirmed'), count(*) FILTER (WHERE phase IN ('failed', 'acknowledged'))
FROM /*schema*/side_effects
WHERE phase <> 'live' AND ended_at >= $1
GROUP BY 1 ORDER BY 1`

	sqlEventsOfAggregate = `
SELECT ev.id, ev.aggregate_type, ev.aggregate_id, ev.event_type, ev.payload, ev.created_at,
	coalesce((SELECT jsonb_agg(jsonb_build_object('id', e.id, 'kind', e.kind, 'state', e.state) ORDER BY e.kind)
		FROM /*schema*/side_effects e WHERE e.source_id = ev.id), '[]'::jsonb)
FROM /*schema*/outbox_events ev
WHERE ev.aggregate_type = $1 AND ev.aggregate_id = $2 AND ev.aggregate_type <> '' -- the partial index's predicate, for generic plans
ORDER BY ev.created_at DESC, ev.id DESC
LIMIT $3`

	// Events of aggregate id $1 whatever its type, newest first: a loose
	// scan of the aggregate index lists its few types, then each type is
	// one lookup in it.
	sqlEventsOfAggregateID = `
WITH RECURSIVE types AS (
	(SELECT aggregate_type FROM /*schema*/outbox_events WHERE aggregate_type <> '' ORDER BY aggregate_type LIMIT 1)
	UNION ALL
	SELECT (SELECT ev.aggregate_type FROM /*schema*/outbox_events ev
		WHERE ev.aggregate_type > t.aggregate_type AND ev.aggregate_type <> '' ORDER BY ev.aggregate_type LIMIT 1)
	FROM types t WHERE t.aggregate_type IS NOT NULL
)
SELECT ev.id, ev.aggregate_type, ev.aggregate_id, ev.event_type, ev.payload, ev.created_at,
	coalesce((SELECT jsonb_agg(jsonb_build_object('id', e.id, 'kind', e.kind, 'state', e.state) ORDER BY e.kind)
		FROM /*schema*/side_effects e WHERE e.source_id = ev.id), '[]'::jsonb)
FROM types t JOIN /*schema*/outbox_events ev
	ON ev.aggregate_type = t.aggregate_type AND ev.aggregate_id = $1 AND ev.aggregate_type <> ''
ORDER BY ev.created_at DESC, ev.id DESC
LIMIT $2`

	sqlEffectsOfEvent = `SELECT ` + effectColumns + ` FROM /*schema*/side_effects WHERE source_id = $1 ORDER BY kind`

	sqlJobsOf = `
SELECT id, state::text, queue, attempt, max_attempts, created_at, scheduled_at, finalized_at, errors,
	CASE WHEN state = 'running' THEN attempted_by[array_length(attempted_by, 1)] END
FROM /*schema*/river_job
WHERE ` + jobOfEffectParam + `
ORDER BY id`

	// Counts of live and failed effects come from the partial indexes (live
	// ones read through to the heap: there are few); confirmed and cancelled
	// ones are counted over the window ($1), index-only through the
	// terminal index (by ended_at, when they ended).
	sqlStatsCounts = sqlStatsLiveCounts + `
UNION ALL
SELECT phase, kind, count(*) FROM /*schema*/side_effects
WHERE phase IN ('confirmed', 'cancelled') AND ended_at >= $1
GROUP BY phase, kind
ORDER BY 1, 2`

	// The per-minute summary (migration 00026). attemptsBucket is the
	// attempts bucket of a confirmed effect, as sqlStatsAttempts labels it;
	// latencyBucket the latency histogram's bucket of e.
	attemptsBucket = `CASE WHEN e.phase <> 'confirmed' THEN '' WHEN e.ended_attempts <= 3 THEN e.ended_attempts::text
	WHEN e.ended_attempts <= 5 THEN '4-5' WHEN e.ended_attempts <= 10 THEN '6-10' ELSE '>10' END`
	latencyBucket = `floor(4 * log(2, greatest(extract(epoch FROM e.confirmed_at - e.created_at) * 1000, 1)))::smallint`
	byProvider    = `NOT EXISTS (SELECT 1 FROM /*schema*/side_effect_audit a WHERE a.effect_id = e.id AND a.action = 'confirm')`

	// Summarize the minutes in [$1, $2), adding to what a minute holds,
	// and move up_to from $1 to $2: run in the transaction that read up_to
	// with sqlLockSummarized, which keeps two leaders from adding the same
	// minutes. The bounds are parameters, not read from the row in the
	// statement: the planner then knows how few rows the range holds.
	sqlSummarizeMinutes = `
WITH ended AS (
	SELECT date_trunc('minute', e.ended_at) AS minute, e.kind, e.phase, ` + attemptsBucket + ` AS attempts,
		CASE WHEN e.phase = 'confirmed' AND ` + byProvider + ` THEN ` + latencyBucket + ` END AS bucket
	FROM /*schema*/side_effects e
	WHERE e.phase IN ('confirmed', 'cancelled') AND e.ended_at >= $1 AND e.ended_at < $2),
counts AS (
	INSERT INTO /*schema*/outboxd_minute_counts AS c (minute, kind, phase, attempts, effects)
	SELECT minute, kind, phase, attempts, count(*) FROM ended GROUP BY 1, 2, 3, 4
	ON CONFLICT (minute, kind, phase, attempts) DO UPDATE SET effects = c.effects + excluded.effects),
latency AS (
	INSERT INTO /*schema*/outboxd_minute_latency AS l (minute, kind, bucket, effects)
	SELECT minute, kind, bucket, count(*) FROM ended WHERE bucket IS NOT NULL GROUP BY 1, 2, 3
	ON CONFLICT (minute, kind, bucket) DO UPDATE SET effects = l.effects + excluded.effects)
UPDATE /*schema*/outboxd_minutes_summarized SET up_to = $2 WHERE up_to = $1`

	sqlLockSummarized = `SELECT up_to FROM /*schema*/outboxd_minutes_summarized FOR UPDATE`

	// The summary's minutes older than the retention ($1).
	sqlPurgeSummary = `
WITH c AS (DELETE FROM /*schema*/outboxd_minute_counts WHERE minute < $1)
DELETE FROM /*schema*/outboxd_minute_latency WHERE minute < $1`

	sqlMinutesSummarized = `SELECT since, up_to FROM /*schema*/outboxd_minutes_summarized`

	// Confirmed and cancelled effects that ended in [$1, $2), from the
	// summary (phase, kind, attempts bucket, effects), and the same read
	// from side_effects for the minutes it does not hold.
	sqlSummaryCounts = `
SELECT phase, kind, attempts, sum(effects)::bigint FROM /*schema*/outboxd_minute_counts
WHERE minute >= $1 AND minute < $2 GROUP BY 1, 2, 3`
	sqlEndedCounts = `
SELECT e.phase, e.kind, ` + attemptsBucket + `, count(*) FROM /*schema*/side_effects e
WHERE e.phase IN ('confirmed', 'cancelled') AND e.ended_at >= $1 AND e.ended_at < $2 GROUP BY 1, 2, 3`
	// The latency histogram of [$1, $2), from the summary and from
	// side_effects.
	sqlSummaryLatency = `
SELECT bucket, sum(effects)::bigint FROM /*schema*/outboxd_minute_latency
WHERE minute >= $1 AND minute < $2 GROUP BY 1`
	sqlEndedLatency = `
SELECT ` + latencyBucket + `, count(*) FROM /*schema*/side_effects e
WHERE e.phase = 'confirmed' AND e.ended_at >= $1 AND e.ended_at < $2 AND ` + byProvider + ` GROUP BY 1`
	// The live and failed counts, which no window bounds.
	sqlStatsLiveCounts = `
SELECT state, kind, sum(n)::bigint FROM (
	SELECT state, kind, count(*) AS n FROM /*schema*/side_effects
	WHERE phase = 'live'
	GROUP BY state, kind
	UNION ALL
	SELECT 'pending', x.kind, count(*) ` + fromCarried + `
	GROUP BY x.kind
) live
GROUP BY state, kind
UNION ALL
SELECT 'failed', kind, count(*) FROM /*schema*/side_effects
WHERE phase = 'failed'
GROUP BY kind
UNION ALL
SELECT 'failed_acknowledged', kind, count(*) FROM /*schema*/side_effects
WHERE phase = 'acknowledged'
GROUP BY kind`

	sqlStatsOldest = `
SELECT
	(SELECT min(due) FROM (
		SELECT min(greatest(created_at, not_before)) AS due FROM /*schema*/side_effects WHERE phase = 'live' AND state = 'pending'
			AND (not_before IS NULL OR not_before <= now())
		UNION ALL
		SELECT min(greatest(ev.created_at, x.not_before)) ` + fromCarried + `
		WHERE x.not_before IS NULL OR x.not_before <= now()) p),
	(SELECT min(fired_at) FROM /*schema*/side_effects WHERE phase = 'live' AND state = 'fired')`

	sqlStatsAttempts = `
SELECT CASE WHEN ended_attempts <= 3 THEN ended_attempts::text WHEN ended_attempts <= 5 THEN '4-5'
	WHEN ended_attempts <= 10 THEN '6-10' ELSE '>10' END AS bucket, count(*)
FROM /*schema*/side_effects
WHERE phase = 'confirmed' AND ended_at >= $1
GROUP BY 1 ORDER BY min(ended_attempts)`

	sqlStatsLatency = `
SELECT count(*),
	coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM confirmed_at - created_at)), 0),
	coalesce(percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM confirmed_at - created_at)), 0),
	coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM confirmed_at - created_at)), 0)
FROM /*schema*/side_effects e
WHERE phase = 'confirmed' AND ended_at >= $1
	AND NOT EXISTS (SELECT 1 FROM /*schema*/side_effect_audit a WHERE a.effect_id = e.id AND a.action = 'confirm')`

	// Effects confirmed by an operator since $1.
	sqlStatsByHand = `
SELECT count(DISTINCT effect_id) FROM /*schema*/side_effect_audit
WHERE action = 'confirm' AND to_state = 'confirmed' AND created_at >= $1`

	// Purge: terminal effects older than $1, in batches of $2; then events
	// older than $1 left without effects.
	sqlPurgeCount = `
SELECT count(*) FROM /*schema*/side_effects e
WHERE phase <> 'live' AND ended_at < $1 AND NOT ` + holdsAChain

	// A batch of $2 terminal effects older than $1, and the
	// events they leave without effects, in one statement: an event goes
	// with its last effect, found through the effects' own indexes instead
	// of a scan of the events. The conditions are checked again on each row
	// as it is when the DELETE gets to it: an effect an operator moved back
	// to pending meanwhile is not deleted, and neither is its event. (The
	// statement's parts share one snapshot, in which the effects deleted
	// beside it still show: an event goes when it has as many effects as
	// the batch deleted of it.) The array and the per-event count keep the
	// plan on the indexes: a join here turns into scans of side_effects.
	sqlPurgeEffects = `
WITH gone AS (
	DELETE FROM /*schema*/side_effects e
	WHERE e.id = ANY (ARRAY(
		SELECT id FROM /*schema*/side_effects e
		WHERE phase <> 'live' AND ended_at < $1 AND NOT ` + holdsAChain + `
		LIMIT $2))
		AND e.phase <> 'live' AND e.ended_at < $1 AND NOT ` + holdsAChain + `
	RETURNING e.source_id),
events AS (
	DELETE FROM /*schema*/outbox_events ev
	USING (SELECT source_id, count(*) AS n FROM gone GROUP BY source_id) g
	WHERE ev.id = g.source_id AND ev.effects IS NULL
		AND (SELECT count(*) FROM /*schema*/side_effects e WHERE e.source_id = ev.id) = g.n
	RETURNING 1)
SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM events)`

	// Events the purge would leave without effects.
	sqlPurgeEventsCount = `
SELECT count(*) FROM /*schema*/outbox_events ev
WHERE ev.created_at < $1 AND ev.effects IS NULL AND NOT EXISTS (
	SELECT 1 FROM /*schema*/side_effects e
	WHERE e.source_id = ev.id AND NOT (e.phase <> 'live' AND e.ended_at < $1))`

	// Expired idempotency keys, $1 at a time; skips rows a request has
	// locked (taking an expired key over) and unexpired three-phase locks.
	sqlPurgeExpiredKeys = `
DELETE FROM /*schema*/idempotency_keys WHERE id IN (
	SELECT id FROM /*schema*/idempotency_keys
	WHERE expires_at <= now() AND NOT (state = 'in_progress' AND locked_until > now())
	LIMIT $1 FOR UPDATE SKIP LOCKED)`

	// Drift records older than $1, $2 at a time (those of a purged effect
	// lost its id already; unknown-key ones never had one).
	sqlPurgeDrift = `
DELETE FROM /*schema*/provider_drift WHERE id IN (
	SELECT id FROM /*schema*/provider_drift WHERE created_at < $1 LIMIT $2)`

	sqlPurgeDriftCount = `SELECT count(*) FROM /*schema*/provider_drift WHERE created_at < $1`

	// Inbox message ids past their retention, $1 at a time.
	sqlPurgeExpiredInbox = `
DELETE FROM /*schema*/inbox_messages WHERE (source, message_id) IN (
	SELECT source, message_id FROM /*schema*/inbox_messages WHERE expires_at <= now() LIMIT $1 FOR UPDATE SKIP LOCKED)`

	// Events older than $1 that never had effects (or lost them some other
	// way), $2 at a time, through outbox_events_created_at_idx; not one
	// that carries effects no dispatcher has written out yet.
	sqlPurgeEvents = `
DELETE FROM /*schema*/outbox_events WHERE id IN (
	SELECT ev.id FROM /*schema*/outbox_events ev
	WHERE ev.created_at < $1 AND ev.effects IS NULL AND NOT EXISTS (SELECT 1 FROM /*schema*/side_effects e WHERE e.source_id = ev.id)
	LIMIT $2)
	AND effects IS NULL AND NOT EXISTS (SELECT 1 FROM /*schema*/side_effects e WHERE e.source_id = outbox_events.id)`
)

// Dispatcher records (outboxctl dispatchers) and failed attempts.
const (
	sqlRecordAttempt = `
INSERT INTO /*schema*/side_effect_attempts (effect_id, attempt, started_at, duration_ms, outcome, error, host)
VALUES ($1, $2, $3, $4, $5, $6, $7)`

	// The operational event of a delay a provider named that was longer
	// than outboxd waits ($5 asked, $6 waited, in seconds; $4 the limit
	// key it paused, '' for none).
	sqlDelayBounded = `
SELECT /*schema*/outboxd_emit('outboxd.provider.delay_bounded', 'side_effect', $1::text,
	jsonb_build_object('effect_id', $1::uuid, 'kind', $2::text, 'provider', $3::text, 'limit', nullif($4::text, ''),
		'asked_seconds', $5::float8, 'waited_seconds', $6::float8, 'tenant', $7::text))`

	sqlAttemptsOf = `
SELECT effect_id, attempt, started_at, duration_ms, outcome, error, host FROM /*schema*/side_effect_attempts
WHERE effect_id = $1 ORDER BY attempt, started_at`

	sqlRecordDispatcher = `
INSERT INTO /*schema*/outboxd_dispatchers (id, host, pid, settings) VALUES ($1, $2, $3, $4)
ON CONFLICT (id) DO UPDATE SET settings = EXCLUDED.settings, seen_at = now(), stopped_at = NULL`

	// A dispatcher's providers' guarantees ($1 names, $2 windows, $3
	// margins in ms, $4 in-doubt policies, $5 the dispatcher).
	sqlRecordGuarantees = `
INSERT INTO /*schema*/outboxd_provider_guarantees AS g (provider, key_window_ms, key_window_margin_ms, in_doubt, reported_by)
SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::text[]), (SELECT $5::text) d
ON CONFLICT (provider) DO UPDATE SET key_window_ms = EXCLUDED.key_window_ms, key_window_margin_ms = EXCLUDED.key_window_margin_ms,
	in_doubt = EXCLUDED.in_doubt, reported_by = EXCLUDED.reported_by, reported_at = now()`

	sqlProviderGuarantees = `
SELECT key_window_ms, key_window_margin_ms, in_doubt FROM /*schema*/outboxd_provider_guarantees WHERE provider = $1`

	sqlAllProviderGuarantees = `
SELECT provider, key_window_ms, key_window_margin_ms, in_doubt FROM /*schema*/outboxd_provider_guarantees`

	sqlDispatcherSeen = `
UPDATE /*schema*/outboxd_dispatchers SET seen_at = now(), stopped_at = CASE WHEN $2 THEN now() END,
	destinations = CASE WHEN $2 THEN '[]' ELSE coalesce($3, destinations) END
WHERE id = $1`

	sqlDispatchers = `
SELECT id, host, pid, started_at, seen_at, stopped_at, settings, destinations FROM /*schema*/outboxd_dispatchers
ORDER BY seen_at DESC LIMIT $1`

	// The dispatch jobs River marks running, by the client that holds each
	// (the last of attempted_by: a dispatcher's record id), with the
	// oldest attempt's time.
	sqlRunningJobs = `
SELECT coalesce(attempted_by[array_length(attempted_by, 1)], ''), count(*), min(attempted_at)
FROM /*schema*/river_job WHERE state = 'running' AND kind IN ('outboxd.dispatch', 'outboxd.dispatch_batch')
GROUP BY 1 ORDER BY 1`
)

// Pending and fired effects without a live dispatch job, unchanged for $1:
// rows written by plain SQL, or whose job was discarded or cleaned up.
// Effects waiting in their tenant's queue get theirs from it.
//
// The job is matched by equality on its effect_id, not by containment
// (args @> …): the planner then hashes the live jobs once (a hash anti
// join, 19 ms for a backlog of 20,000 with 100,000 finished jobs) instead
// of probing River's GIN index on args once per live effect (26 s, once a
// minute, which halved a three-replica drain: docs/performance.md).
const sqlSweep = `
SELECT e.id, e.provider, e.not_before FROM /*schema*/side_effects e
WHERE e.phase = 'live' AND e.updated_at < $1 AND NOT ` + blockedInChain + `
	AND NOT EXISTS (SELECT 1 FROM /*schema*/outboxd_tenant_queue q WHERE q.effect_id = e.id)
	AND NOT EXISTS (
		SELECT 1 FROM /*schema*/river_job j
		WHERE j.kind = 'outboxd.dispatch' AND j.args->>'effect_id' = e.id::text
			AND j.state IN ('available', 'pending', 'retryable', 'running', 'scheduled'))
	AND e.id NOT IN (
		SELECT jsonb_array_elements_text(j.args->'effect_ids')::uuid FROM /*schema*/river_job j
		WHERE j.kind = 'outboxd.dispatch_batch' AND j.state IN ('available', 'pending', 'retryable', 'running', 'scheduled'))
ORDER BY e.updated_at
LIMIT $2`

// Gauges for /metrics: live and failed effects by state and kind, with the
// age of the oldest.
// Ordering keys with an effect blocked behind an earlier one, those
// effects, and the age of the oldest (since created, or due).
const sqlBlockedChains = `
SELECT count(DISTINCT e.ordering_key), count(*),
	coalesce(extract(epoch FROM now() - min(greatest(e.created_at, e.not_before))), 0)::float8
FROM /*schema*/side_effects e
WHERE e.ordering_key IS NOT NULL AND e.ordering_released_at IS NULL AND e.phase NOT IN ('confirmed', 'cancelled')
	AND e.state = 'pending' AND ` + blockedInChain

// fromCarried is the effects events still carry (outbox.EffectsByDispatcher)
// as x (kind, provider, payload, not_before), with their events as ev:
// the stats, gauges and stuck groups count them as pending.
const fromCarried = `FROM /*schema*/outbox_event_intake i
	JOIN /*schema*/outbox_events ev ON ev.id = i.event_id AND ev.effects IS NOT NULL,
		jsonb_to_recordset(ev.effects) AS x(kind text, provider text, payload jsonb, not_before timestamptz)`

// The effect with id $1 that its event still carries, if any: a read of
// every carried event, for an operator's lookup only.
const sqlCarriedEffect = `SELECT ev.id, x.kind, ev.created_at ` + fromCarried + `
WHERE /*schema*/outboxd_effect_id(ev.id, x.kind) = $1
LIMIT 1`

// The live and failed effects by state and kind, with their oldest's
// age. Effects their events still carry (outbox.EffectsByDispatcher)
// count as pending, from the event intake: when no dispatcher takes them,
// the pending age says so as it does for rows.
const sqlStateGauges = `
SELECT state, kind, sum(n)::bigint, max(age) FROM (
	SELECT state, kind, count(*) AS n,
		greatest(0, extract(epoch FROM now() - min(CASE WHEN state = 'fired' THEN coalesce(fired_at, created_at)
			ELSE greatest(created_at, not_before) END)))::float8 AS age
	FROM /*schema*/side_effects
	WHERE phase = 'live'
	GROUP BY state, kind
	UNION ALL
	SELECT 'failed', kind, count(*), extract(epoch FROM now() - min(created_at))::float8
	FROM /*schema*/side_effects
	WHERE phase = 'failed'
	GROUP BY kind
	UNION ALL
	SELECT 'pending', x.kind, count(*), greatest(0, extract(epoch FROM now() - min(greatest(ev.created_at, x.not_before))))::float8
	` + fromCarried + `
	GROUP BY x.kind
) g
GROUP BY state, kind`

const effectColumnsE = `e.id, e.source_id, e.kind, e.provider, e.payload, e.state, e.attempts,
	e.last_error, e.provider_ref, e.replayed, e.next_attempt_at, e.created_at, e.updated_at, e.fired_at, e.first_fired_at, e.confirmed_at,
	e.in_doubt, e.total_attempts, e.redrives, e.key_window_from, e.acknowledged_at, e.not_before,
	e.ordering_key, e.ordering_seq, e.ordering_skip_failed, e.ordering_released_at, e.waiting_for, e.waiting_since, e.tenant, e.replay_id`

// Whether two payloads are the same JSON document, as Postgres stores
// them (jsonb): key order and spacing aside.
const sqlSamePayload = `SELECT $1::jsonb = $2::jsonb`

// sqlListFailed is sqlListEffects for failed effects only ($1 = {failed}):
// the phase predicate lets it read side_effects_failed_list_idx.
var sqlListFailed = mustReplace(sqlListEffects, "ORDER BY created_at DESC, id DESC",
	"AND phase IN ('failed', 'acknowledged')\nORDER BY created_at DESC, id DESC")

// sqlListFailedKind is sqlListFailed for one kind ($2 set): it reads
// side_effects_failed_kind_idx in its order and stops at the page.
var sqlListFailedKind = mustReplace(sqlListFailed, "($2::text IS NULL OR kind = $2)", "kind = $2")

// mustReplace replaces the one occurrence of old in s, and panics (when
// the package loads, so in every test) if there is not exactly one: a
// statement derived from another must not silently become a copy of it
// when the other changes.
func mustReplace(s, old, new string) string {
	if n := strings.Count(s, old); n != 1 {
		panic(fmt.Sprintf("engine: deriving a statement: %q occurs %d times, want 1", old, n))
	}
	return strings.Replace(s, old, new, 1)
}

// jobOfEffectParam is the predicate on river_job of the dispatch jobs of
// effect $1: its own jobs, and the batch jobs it is in (BatchJobKind).
// Both are found through River's index on args.
const jobOfEffectParam = `((kind = 'outboxd.dispatch' AND args @> jsonb_build_object('effect_id', $1::uuid))
	OR (kind = 'outboxd.dispatch_batch' AND args @> jsonb_build_object('effect_ids', jsonb_build_array($1::uuid))))`

// jobOfEffectE is jobOfEffectParam for effect e.id.
const jobOfEffectE = `((kind = 'outboxd.dispatch' AND args @> jsonb_build_object('effect_id', e.id))
	OR (kind = 'outboxd.dispatch_batch' AND args @> jsonb_build_object('effect_ids', jsonb_build_array(e.id))))`

// The effects of $1 that have not ended, for a batch that hands them to
// jobs of their own.
const sqlUnended = `SELECT id, provider, not_before FROM /*schema*/side_effects WHERE id = ANY($1) AND phase = 'live'`

// The newest running batch job that holds effect $1, or 0.
const sqlRunningBatchOf = `
SELECT coalesce(max(id + 0), 0) FROM /*schema*/river_job
WHERE kind = 'outboxd.dispatch_batch' AND state::text = 'running' AND args @> jsonb_build_object('effect_ids', jsonb_build_array($1::uuid))`
