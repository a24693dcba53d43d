package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/cli"
	"github.com/outboxd/outboxd/internal/engine"
	"github.com/outboxd/outboxd/internal/store"
	"github.com/outboxd/outboxd/internal/testdb"
)

// TestLimitsShowWaitingAndChangeAudited: an operator sees each limit key
// (its rate, who set it, its pause, 429s, what it let through and the
// effects waiting for it), changes a rate for every replica with a reason,
// and finds the change in the history; bad input changes nothing.
func TestLimitsShowWaitingAndChangeAudited(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	const key = "webhook:hooks.example.com"
	require.NoError(t, b.store.ConfigureLimit(ctx, b.db.Pool, "stripe:live-a1b2", 100, false, "default"))
	_, _, err := engine.Throttle(ctx, b.store, b.db.Pool, key, engine.A429{After: time.Minute, Base: time.Second, Observed: 12, Again: true})
	require.NoError(t, err)
	require.NoError(t, b.store.MarkWaiting(ctx, b.db.Pool, b.ids["pending"], key))
	// It was sent once 23h40m ago: its key window (24h less 5m) closes in 15m.
	_, err = b.db.Pool.Exec(ctx, `UPDATE `+b.db.Schema+`.side_effects SET key_window_from = now() - interval '23 hours 40 minutes' WHERE id = $1`, b.ids["pending"])
	require.NoError(t, err)

	why := b.stuckWhy(t)
	require.Contains(t, why[b.ids["pending"]], "waiting for limit webhook:hooks.example.com since")
	require.Contains(t, why[b.ids["pending"]], "waiting is not an attempt")

	out, err := b.run(t, "", "limits")
	require.NoError(t, err, out)
	require.Regexp(t, `stripe:live-a1b2\s+100/s\s+default\s+100/s\s+-\s+0\s+0\s+0`, out)
	require.Regexp(t, `webhook:hooks.example.com\s+-\s+-\s+12/s\s+for \d+\.\ds\s+1\s+0\s+1, longest \d+s; a key window closes in 15m0s \(WARNING`, out)

	for _, bad := range [][]string{
		{"limits", "set", "hooks.example.com", "5", "--reason", "x"},
		{"limits", "set", key, "-5", "--reason", "x"},
		{"limits", "set", key, "fast", "--reason", "x"},
		{"limits", "set", key, "5"},
		// A key becomes a /metrics label and a row shown to operators.
		{"limits", "set", "webhook:" + strings.Repeat("a", 20000), "5", "--reason", "x"},
		{"limits", "set", "webhook:api\npartner", "5", "--reason", "x"},
	} {
		_, err := b.run(t, "", bad...)
		require.Equal(t, 2, cli.ExitCode(err), "%v: %v", bad, err)
	}
	out, err = b.run(t, "", "limits", "history")
	require.NoError(t, err)
	require.Contains(t, out, "no changes of limits at run time", "bad input changed nothing")

	// The waiting effect's job sleeps until the pause it was given ends;
	// --resume makes it due now.
	sleepJob(t, b, b.ids["pending"])
	out, err = b.run(t, "", "limits", "set", key, "20", "--resume", "--reason", "partner asked for 20/s")
	require.NoError(t, err, out)
	require.Contains(t, out, "limit webhook:hooks.example.com: none -> 20/s, pause ended")
	require.True(t, jobDue(t, b, b.ids["pending"]), "the effect waiting for the key is due now")
	var limits []struct {
		Key         string     `json:"key"`
		Rate        *float64   `json:"rate"`
		RateSource  string     `json:"rate_source"`
		PausedUntil *time.Time `json:"paused_until"`
	}
	out, err = b.run(t, "", "limits", "--json")
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal([]byte(out), &limits))
	require.Len(t, limits, 2)
	require.Equal(t, key, limits[1].Key)
	require.InDelta(t, 20, *limits[1].Rate, 0)
	require.Equal(t, "operator:oncall@example.com", limits[1].RateSource)
	require.Nil(t, limits[1].PausedUntil, "resumed")

	// A replica started with its own --limit does not undo an operator's.
	require.NoError(t, b.store.ConfigureLimit(ctx, b.db.Pool, key, 500, false, "config"))
	row, err := b.store.LimitOf(ctx, b.db.Pool, key)
	require.NoError(t, err)
	require.InDelta(t, 20, *row.Rate, 0)

	out, err = b.run(t, "", "limits", "history", key)
	require.NoError(t, err)
	require.Regexp(t, `webhook:hooks.example.com\s+none\s+20/s, resumed\s+oncall@example.com\s+partner asked for 20/s`, out)

	// A reason cannot add a row of its own to the table.
	forged := "partner asked\n2026-01-01T00:00:00Z  webhook:hooks.example.com  none  none  ceo@example.com  approved\r"
	_, err = b.run(t, "", "limits", "set", key, "20", "--reason", forged)
	require.NoError(t, err)
	out, err = b.run(t, "", "limits", "history", key)
	require.NoError(t, err)
	require.NotContains(t, out, "\n2026-01-01T00:00:00Z", "the reason's line break is shown, not taken")
	require.Contains(t, out, `partner asked\n2026-01-01T00:00:00Z`)
	require.NotContains(t, out, "\r")

	// A partner's "at most 4 in any second": a whole number, a rate.
	for _, bad := range [][]string{
		{"limits", "set", key, "4.5", "--in-any-second", "--reason", "x"},
		{"limits", "set", key, "none", "--in-any-second", "--reason", "x"},
	} {
		out, err := b.run(t, "", bad...)
		require.Equal(t, 2, cli.ExitCode(err), "%v: %v", bad, err)
		require.Empty(t, out)
	}
	out, err = b.run(t, "", "limits", "set", key, "4", "--in-any-second", "--reason", "contract: at most 4 in any second")
	require.NoError(t, err, out)
	require.Contains(t, out, "limit webhook:hooks.example.com: 20/s -> at most 4 in any second")
	out, err = b.run(t, "", "limits")
	require.NoError(t, err)
	require.Regexp(t, `webhook:hooks.example.com\s+at most 4 in any second\s+operator:oncall@example.com`, out)
	out, err = b.run(t, "", "limits", "history", key)
	require.NoError(t, err)
	require.Regexp(t, `20/s\s+at most 4 in any second\s+oncall@example.com\s+contract`, out)
	row, err = b.store.LimitOf(ctx, b.db.Pool, key)
	require.NoError(t, err)
	require.True(t, row.InAnySecond, "every replica leases it that way")
}

// TestLimitsResumeLiftsEveryHold: one command lifts the holds of named keys
// or of every key that holds something, audited, and what waited is due
// at once; bad input changes nothing.
func TestLimitsResumeLiftsEveryHold(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	const a, other = "webhook:a.example.com", "nats:nats://127.0.0.1:4222"
	for _, key := range []string{a, other} {
		_, _, err := engine.Throttle(ctx, b.store, b.db.Pool, key, engine.A429{After: time.Hour, Base: time.Second, Again: true})
		require.NoError(t, err)
	}
	require.NoError(t, b.store.MarkWaiting(ctx, b.db.Pool, b.ids["pending"], a))
	// Its job sleeps until the pause it was given ends.
	sleepJob(t, b, b.ids["pending"])

	for _, bad := range [][]string{
		{"limits", "resume", "--reason", "x"},
		{"limits", "resume", a, "--all", "--reason", "x"},
		{"limits", "resume", a},
		{"limits", "resume", "webhook:nobody.example.com", "--reason", "x"},
	} {
		_, err := b.run(t, "", bad...)
		require.Equal(t, 2, cli.ExitCode(err), "%v: %v", bad, err)
	}
	out, err := b.run(t, "", "limits", "history")
	require.NoError(t, err)
	require.Contains(t, out, "no changes of limits at run time", "bad input changed nothing")

	out, err = b.run(t, "", "limits", "resume", "--all", "--reason", "partner and broker back")
	require.NoError(t, err, out)
	require.Contains(t, out, "limit "+a+" resumed: 1 waiting effects go out now")
	require.Contains(t, out, "limit "+other+" resumed: 0 waiting effects go out now")
	require.True(t, jobDue(t, b, b.ids["pending"]), "the waiting effect's job is due now")
	var limits []struct {
		Key         string     `json:"key"`
		PausedUntil *time.Time `json:"paused_until"`
	}
	out, err = b.run(t, "", "limits", "--json")
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal([]byte(out), &limits))
	for _, l := range limits {
		require.Nil(t, l.PausedUntil, "%s resumed", l.Key)
	}
	out, err = b.run(t, "", "limits", "history")
	require.NoError(t, err)
	require.Regexp(t, `webhook:a.example.com\s+none\s+none, resumed\s+oncall@example.com\s+partner and broker back`, out)
}

// sleepJob puts the job of effect id to sleep for an hour, as a snooze
// until the end of a pause leaves it.
func sleepJob(t *testing.T, b *testBundle, id uuid.UUID) {
	t.Helper()
	_, err := b.db.Pool.Exec(context.Background(), `UPDATE `+b.db.Schema+`.river_job SET state = 'scheduled', scheduled_at = now() + interval '1 hour'
		WHERE args->>'effect_id' = $1::text`, id)
	require.NoError(t, err)
}

// jobDue reports whether the job of effect id is due now.
func jobDue(t *testing.T, b *testBundle, id uuid.UUID) bool {
	t.Helper()
	var due bool
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT scheduled_at <= now() FROM `+b.db.Schema+`.river_job
		WHERE args->>'effect_id' = $1::text`, id).Scan(&due))
	return due
}

// TestLimitsOfShardsAreReadAndSetInTheSharedPlace: with
// --limits-database-url, outboxctl reads and sets the limit keys where
// every shard keeps them, and counts what waits in the shard it reads;
// --limits-schema alone, or a place not migrated, is refused.
func TestLimitsOfShardsAreReadAndSetInTheSharedPlace(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	place := testdb.New(t)
	placeStore := store.NewStore(place.Schema)
	const key = "webhook:hooks.example.com"
	require.NoError(t, placeStore.ConfigureLimit(ctx, place.Pool, key, 50, false, "config"))
	require.NoError(t, b.store.MarkWaiting(ctx, b.db.Pool, b.ids["pending"], key))
	shared := []string{"--limits-database-url", testdb.URL(), "--limits-schema", place.Schema}

	out, err := b.run(t, "", append([]string{"limits"}, shared...)...)
	require.NoError(t, err, out)
	require.Regexp(t, `webhook:hooks.example.com\s+50/s\s+config\s+50/s\s+-\s+0\s+0\s+1, longest`, out, "the shared key, with what waits in this shard")
	out, err = b.run(t, "", append([]string{"limits", "set", key, "20", "--reason", "partner asked"}, shared...)...)
	require.NoError(t, err, out)
	row, err := placeStore.LimitOf(ctx, place.Pool, key)
	require.NoError(t, err)
	require.InDelta(t, 20, *row.Rate, 0, "set in the shared place")
	_, err = b.store.LimitOf(ctx, b.db.Pool, key)
	require.ErrorIs(t, err, store.ErrNotFound, "not in the shard")

	_, err = b.run(t, "", "limits", "--limits-schema", place.Schema)
	require.Equal(t, 2, cli.ExitCode(err), "%v", err)
	require.ErrorContains(t, err, "needs --limits-database-url")
	_, err = b.run(t, "", "limits", "--limits-database-url", testdb.URL(), "--limits-schema", "not_migrated_here")
	require.ErrorContains(t, err, "--limits-database-url, schema \"not_migrated_here\"")
}
