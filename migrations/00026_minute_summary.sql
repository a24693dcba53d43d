-- +goose Up
-- A per-minute summary of the effects that ended (docs/operating.md,
-- outboxctl stats): what `stats --window 24h` reads instead of every
-- effect that ended in the window. The leader adds each minute once it
-- is two minutes old (a periodic job); a window then reads 1,440 rows a
-- day and kind instead of every ended effect, and only the minutes not yet
-- summarized, and those before the summary began, from side_effects.
--
-- A minute counts what ended in it: an effect retried and ended again
-- later counts again in that minute, as the web view's chart does; a
-- purge leaves the summary as it was.
CREATE TABLE outboxd_minute_counts (
    minute   timestamptz NOT NULL,
    kind     text NOT NULL,
    phase    text NOT NULL,
    -- attempts bucket of a confirmed effect ('1', '2', '3', '4-5', '6-10',
    -- '>10'); '' for a cancelled one.
    attempts text NOT NULL,
    effects  bigint NOT NULL,
    PRIMARY KEY (minute, kind, phase, attempts)
);

-- Commit to confirmation of the effects the provider confirmed (not an
-- operator), as a histogram: bucket b holds latencies in
-- [2^(b/4), 2^((b+1)/4)) milliseconds, b >= 0 (a 19% step).
CREATE TABLE outboxd_minute_latency (
    minute  timestamptz NOT NULL,
    kind    text NOT NULL,
    bucket  smallint NOT NULL,
    effects bigint NOT NULL,
    PRIMARY KEY (minute, kind, bucket)
);

-- since: the first minute summarized (the summary begins when this
-- migration runs; earlier minutes are read from side_effects); up_to: the
-- first minute not yet summarized.
CREATE TABLE outboxd_minutes_summarized (
    one    boolean PRIMARY KEY DEFAULT true CHECK (one),
    since  timestamptz NOT NULL,
    up_to  timestamptz NOT NULL
);
INSERT INTO outboxd_minutes_summarized (since, up_to) VALUES (date_trunc('minute', now()), date_trunc('minute', now()));

-- +goose Down
DROP TABLE outboxd_minutes_summarized;
DROP TABLE outboxd_minute_latency;
DROP TABLE outboxd_minute_counts;
