-- +goose Up
-- What each provider a dispatcher runs promises about repeated requests
-- (its key window, the margin kept back from it, its in-doubt policy), as
-- the dispatcher last reported it at start. An operator's retry reads it
-- for a provider its own settings do not know (a provider an application
-- built into its own dispatcher): outboxctl and the web view then apply
-- the provider's window instead of none, and refuse a retry, unless
-- forced, when no dispatcher ever reported the provider.
CREATE TABLE outboxd_provider_guarantees (
    provider          text PRIMARY KEY,
    key_window_ms     bigint NOT NULL CHECK (key_window_ms >= 0),
    key_window_margin_ms bigint NOT NULL CHECK (key_window_margin_ms >= 0),
    in_doubt          text NOT NULL,
    reported_by       text NOT NULL,
    reported_at       timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE outboxd_provider_guarantees;
