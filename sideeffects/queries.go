package sideeffects

import (
	"strings"

	"github.com/jackc/pgx/v5"
)

// All of outboxd's SQL against its own tables. "/*schema*/" is replaced once,
// when a Store is built, by the quoted schema name and a dot.

const effectColumns = `id, source_id, kind, provider, idempotency_key, payload, state, attempts,
	last_error, provider_ref, replayed, next_attempt_at, created_at, updated_at, fired_at, first_fired_at, confirmed_at`

const (
	sqlInsertEvent = `
INSERT INTO /*schema*/outbox_events (id, aggregate_type, aggregate_id, event_type, payload)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (id) DO NOTHING`

	sqlEventMatches = `
SELECT aggregate_type = $2 AND aggregate_id = $3 AND event_type = $4 AND payload = $5::jsonb
FROM /*schema*/outbox_events WHERE id = $1`

	// ON CONFLICT without a target: id, idempotency_key and (source_id, kind)
	// are all derived from (source_id, kind), so any of them means "exists".
	sqlInsertEffects = `
INSERT INTO /*schema*/side_effects (id, source_id, kind, provider, payload)
SELECT u.id, $1, u.kind, u.provider, u.payload
FROM unnest($2::uuid[], $3::text[], $4::text[], $5::jsonb[]) AS u(id, kind, provider, payload)
ON CONFLICT DO NOTHING
RETURNING id`

	sqlCompareEffects = `
SELECT u.kind, s.id IS NOT NULL, coalesce(s.provider = u.provider AND s.payload = u.payload, false)
FROM unnest($2::text[], $3::text[], $4::jsonb[]) WITH ORDINALITY AS u(kind, provider, payload, ord)
LEFT JOIN /*schema*/side_effects s ON s.source_id = $1 AND s.kind = u.kind
ORDER BY u.ord`

	sqlGetEffect = `SELECT ` + effectColumns + ` FROM /*schema*/side_effects WHERE id = $1`

	sqlGetEffectByKey = `SELECT ` + effectColumns + ` FROM /*schema*/side_effects WHERE idempotency_key = $1`

	// Transitions. Each names the states it leaves from; zero rows affected
	// means the transition no longer applies and nothing changed.

	// pending|fired -> fired, guarded on the state the worker read ($2), so
	// that an operator's action in between wins.
	sqlClaim = `
UPDATE /*schema*/side_effects
SET state = 'fired', attempts = attempts + 1, fired_at = now(),
	first_fired_at = coalesce(first_fired_at, now()), next_attempt_at = NULL, updated_at = now()
WHERE id = $1 AND state = $2 AND state IN ('pending', 'fired')
RETURNING ` + effectColumns

	// fired -> confirmed.
	sqlConfirm = `
UPDATE /*schema*/side_effects
SET state = 'confirmed', confirmed_at = now(), provider_ref = $2, replayed = $3, last_error = NULL,
	next_attempt_at = NULL, updated_at = now()
WHERE id = $1 AND state = 'fired'`

	// fired -> pending: the provider did not act.
	sqlRelease = `
UPDATE /*schema*/side_effects
SET state = 'pending', last_error = $2, next_attempt_at = $3, updated_at = now()
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
)

// queries holds the statements with the schema filled in.
type queries struct {
	insertEvent, eventMatches, insertEffects, compareEffects string
	getEffect, getEffectByKey                                string
	claim, confirm, release, recordInDoubt, fail             string
}

func newQueries(schema string) queries {
	prefix := ""
	if schema != "" {
		prefix = pgx.Identifier{schema}.Sanitize() + "."
	}
	r := strings.NewReplacer("/*schema*/", prefix)
	return queries{
		insertEvent:    r.Replace(sqlInsertEvent),
		eventMatches:   r.Replace(sqlEventMatches),
		insertEffects:  r.Replace(sqlInsertEffects),
		compareEffects: r.Replace(sqlCompareEffects),
		getEffect:      r.Replace(sqlGetEffect),
		getEffectByKey: r.Replace(sqlGetEffectByKey),
		claim:          r.Replace(sqlClaim),
		confirm:        r.Replace(sqlConfirm),
		release:        r.Replace(sqlRelease),
		recordInDoubt:  r.Replace(sqlRecordInDoubt),
		fail:           r.Replace(sqlFail),
	}
}
