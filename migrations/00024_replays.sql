-- +goose Up
-- Paced replays (docs/replays.md): an operator's redrive of the effects that
-- failed in a period, run in the background by outboxd at a pace the
-- operator set, so that a backlog returns to the providers no faster than
-- they (and the limits) take it. Each replay is one row here and one River
-- job (queue outboxd_replays) that retries one step of effects at a time
-- and snoozes until the next: a restart resumes it where it stood, and
-- cancelling the row stops it before its next step.
CREATE TABLE outboxd_replays (
    id              bigserial PRIMARY KEY,
    -- state: running, done (every selected effect was looked at) or
    -- cancelled (by an operator).
    state           text NOT NULL DEFAULT 'running' CHECK (state IN ('running', 'done', 'cancelled')),
    actor           text NOT NULL,
    reason          text NOT NULL,
    -- The selection: effects that failed (ended_at) in [failed_since,
    -- failed_before), not acknowledged, with the filters that are set.
    -- failed_before is when the replay was created: an effect that fails
    -- again after its retry is not retried again by the same replay.
    failed_since    timestamptz NOT NULL,
    failed_before   timestamptz NOT NULL,
    kind            text,
    provider        text,
    host            text,
    tenant          text,
    -- pace: effects retried a second.
    pace            double precision NOT NULL CHECK (pace > 0),
    allow_duplicate boolean NOT NULL DEFAULT false,
    -- The position reached: the last effect looked at, in (ended_at, id)
    -- order.
    cursor_at       timestamptz,
    cursor_id       uuid,
    selected        integer NOT NULL DEFAULT 0,
    retried         integer NOT NULL DEFAULT 0,
    last_error      text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz,
    cancelled_by    text,
    cancel_reason   text
);
CREATE INDEX outboxd_replays_running_idx ON outboxd_replays (id) WHERE state = 'running';

-- The effects a replay did not retry, and why: the refusals of
-- outboxctl retry (a call in flight, in doubt under at_most_once, a key
-- window closing or closed).
CREATE TABLE outboxd_replay_skips (
    replay_id  bigint NOT NULL REFERENCES outboxd_replays (id) ON DELETE CASCADE,
    effect_id  uuid NOT NULL,
    reason     text NOT NULL,
    -- transient: the refusal may pass by itself (a River job still running
    -- for the effect): the replay looks again after its pass, at its pace.
    transient  boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (replay_id, effect_id)
);

-- +goose Down
DROP TABLE outboxd_replay_skips;
DROP TABLE outboxd_replays;
