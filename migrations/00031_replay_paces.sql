-- +goose Up
-- A running replay's pace can be changed (outboxctl replays pace, the web
-- view's replay page): outboxd_replays.pace is what its next step reads;
-- each change is kept here, with who made it and why, for the replay's
-- page and `outboxctl replays show`.
CREATE TABLE outboxd_replay_paces (
    replay_id  bigint NOT NULL REFERENCES outboxd_replays (id) ON DELETE CASCADE,
    pace       double precision NOT NULL CHECK (pace > 0),
    previous   double precision NOT NULL,
    actor      text NOT NULL,
    reason     text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX outboxd_replay_paces_replay_idx ON outboxd_replay_paces (replay_id, created_at);
-- When the replay's next step is due (NULL: at once), so that a job that
-- waits for it can look at the replay again before then (a changed pace
-- is read within seconds) without stepping early.
ALTER TABLE outboxd_replays ADD COLUMN next_step_at timestamptz;

-- +goose Down
ALTER TABLE outboxd_replays DROP COLUMN next_step_at;
DROP TABLE outboxd_replay_paces;
