-- +goose Up
-- Rate limits shared by every replica (docs/limits.md). One row per limit
-- key (a Stripe account, a SendGrid account, a webhook host): a token
-- bucket refilled by elapsed time, from which each process leases small
-- blocks of tokens, and the pause a 429 put on the whole key.
CREATE TABLE outboxd_limits (
    key              text PRIMARY KEY,
    -- rate: requests a second the key may take, as configured (NULL: none
    -- set; the key slows only after a 429). rate_source says who set it:
    -- 'default' (the provider's published limit), 'config' (flags), or
    -- 'operator:<name>' (outboxctl limits set), which start-up config does
    -- not override.
    rate             double precision CHECK (rate IS NULL OR rate > 0),
    rate_source      text NOT NULL DEFAULT 'default',
    -- current_rate: lowered by 429s (halved per episode), recovering
    -- linearly from current_at up to rate; NULL when not lowered.
    current_rate     double precision CHECK (current_rate IS NULL OR current_rate > 0),
    current_at       timestamptz NOT NULL DEFAULT now(),
    tokens           double precision NOT NULL DEFAULT 0,
    refilled_at      timestamptz NOT NULL DEFAULT now(),
    paused_until     timestamptz,
    throttled_in_a_row integer NOT NULL DEFAULT 0,
    throttles        bigint NOT NULL DEFAULT 0,
    last_throttle_at timestamptz,
    -- granted counts the tokens leased, for the achieved rate.
    granted          bigint NOT NULL DEFAULT 0,
    updated_at       timestamptz NOT NULL DEFAULT now()
);

-- Every change of a rate at run time (outboxctl limits set), who made it
-- and why.
CREATE TABLE outboxd_limit_audit (
    id          bigserial PRIMARY KEY,
    key         text NOT NULL,
    actor       text NOT NULL,
    reason      text NOT NULL,
    from_rate   double precision,
    to_rate     double precision,
    resumed     boolean NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX outboxd_limit_audit_key_idx ON outboxd_limit_audit (key, id);

-- An effect waiting for a limit (a token, a paused key) says which and
-- since when; waiting is not an attempt. Neither column is indexed, so
-- setting or clearing them keeps claims HOT.
ALTER TABLE side_effects
    ADD COLUMN waiting_for text,
    ADD COLUMN waiting_since timestamptz;

-- +goose Down
ALTER TABLE side_effects DROP COLUMN waiting_for, DROP COLUMN waiting_since;
DROP TABLE outboxd_limit_audit;
DROP TABLE outboxd_limits;
