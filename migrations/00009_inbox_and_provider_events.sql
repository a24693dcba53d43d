-- +goose Up
-- Incoming messages already processed (package outbox/inbox): the primary
-- key decides whether a redelivery is new. Kept until expires_at, no
-- shorter than the sender's retry window, then purged by outboxd.
CREATE TABLE inbox_messages (
    source      text NOT NULL,
    message_id  text NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (source, message_id)
);
CREATE INDEX inbox_messages_expires_idx ON inbox_messages (expires_at);

-- What the provider's events say about an email after it was accepted
-- (SendGrid: processed, deferred, delivered, bounce, dropped). Apart from
-- side_effects so that the dispatch hot path never touches it.
CREATE TABLE side_effect_deliveries (
    effect_id  uuid PRIMARY KEY REFERENCES side_effects (id) ON DELETE CASCADE,
    status     text NOT NULL,
    detail     text NOT NULL DEFAULT '',
    event_id   text NOT NULL,
    event_at   timestamptz NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Disagreements between outboxd and a provider, found in provider events:
-- each names the effect (when one matches), the event and what to check.
CREATE TABLE provider_drift (
    id              bigserial PRIMARY KEY,
    reason          text NOT NULL,
    provider        text NOT NULL,
    kind            text NOT NULL DEFAULT '',
    effect_id       uuid REFERENCES side_effects (id) ON DELETE SET NULL,
    effect_state    text NOT NULL DEFAULT '',
    idempotency_key text NOT NULL,
    event_id        text NOT NULL,
    event_type      text NOT NULL,
    object_id       text NOT NULL DEFAULT '',
    check_hint      text NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX provider_drift_created_idx ON provider_drift (created_at);
CREATE INDEX provider_drift_effect_idx ON provider_drift (effect_id);

-- +goose Down
DROP TABLE provider_drift;
DROP TABLE side_effect_deliveries;
DROP TABLE inbox_messages;
