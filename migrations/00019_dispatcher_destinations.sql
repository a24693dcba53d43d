-- +goose Up
-- What each running outboxd's per-destination gate holds back (requests
-- in flight and waiting, failures in a row, an open circuit breaker),
-- refreshed with its heartbeat, for outboxctl dispatchers, stuck and the
-- web view: the gate itself is per process.
ALTER TABLE outboxd_dispatchers ADD COLUMN destinations jsonb NOT NULL DEFAULT '[]';

-- +goose Down
ALTER TABLE outboxd_dispatchers DROP COLUMN destinations;
