-- +goose Up
-- Each outboxd run records the settings it dispatches with (provider hosts,
-- key windows, policies, limits; never secrets), so an operator can tell
-- which process talked to which host (outboxctl dispatchers).
CREATE TABLE outboxd_dispatchers (
    id         text PRIMARY KEY,
    host       text NOT NULL,
    pid        integer NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    seen_at    timestamptz NOT NULL DEFAULT now(),
    stopped_at timestamptz,
    settings   jsonb NOT NULL
);

-- +goose Down
DROP TABLE outboxd_dispatchers;
