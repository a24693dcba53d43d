-- +goose Up
-- Idempotency keys of incoming requests (package outbox/idempotency). A key
-- is scoped by the caller's identity, the method and the route; the unique
-- constraint is what decides which of two requests with one key runs.
--
-- state: in_progress (claimed; in the transactional mode only ever seen
-- uncommitted, in the three-phase mode committed with locked_until),
-- completed (response stored), failed (three-phase mode: the handler
-- failed or an operator released the key; the next request runs again).
CREATE TABLE idempotency_keys (
    id                uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    scope             text NOT NULL,
    method            text NOT NULL,
    route             text NOT NULL,
    key               text NOT NULL,
    state             text NOT NULL CHECK (state IN ('in_progress', 'completed', 'failed')),
    fingerprint       text NOT NULL,
    fingerprint_parts jsonb NOT NULL DEFAULT '{}',
    claim_token       uuid NOT NULL,
    locked_until      timestamptz,
    status            integer,
    response_headers  jsonb,
    response_body     bytea,
    error             text NOT NULL DEFAULT '',
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    expires_at        timestamptz,
    CONSTRAINT idempotency_keys_scope_key UNIQUE (scope, method, route, key),
    CONSTRAINT idempotency_keys_completed_has_response CHECK (state <> 'completed' OR status IS NOT NULL)
);
-- Expired keys, for the dispatcher's purge.
CREATE INDEX idempotency_keys_expires_idx ON idempotency_keys (expires_at) WHERE expires_at IS NOT NULL;

-- Operator actions on keys (outboxctl keys release), with actor and reason.
CREATE TABLE idempotency_key_audit (
    id          bigserial PRIMARY KEY,
    key_id      uuid NOT NULL REFERENCES idempotency_keys (id) ON DELETE CASCADE,
    action      text NOT NULL,
    actor       text NOT NULL,
    reason      text NOT NULL,
    from_state  text NOT NULL,
    to_state    text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX idempotency_key_audit_key_idx ON idempotency_key_audit (key_id, id);

-- +goose Down
DROP TABLE idempotency_key_audit;
DROP TABLE idempotency_keys;
