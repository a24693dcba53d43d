package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/cli"
	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/webhook"
	"github.com/outboxd/outboxd/sideeffects"
	"github.com/outboxd/outboxd/sideeffects/sideeffectstest"
)

// TestRetryFailedSinceStartsAPacedReplay: an operator replays what failed
// in the last two hours at a pace, follows it, sees what was skipped and
// why, and cannot cancel what has ended; bad input starts nothing.
func TestRetryFailedSinceStartsAPacedReplay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, bad := range [][]string{
		{"retry", "--pace", "10/s", "--reason", "x"},
		{"retry", "--failed-since", "2h", "--reason", "x"},
		{"retry", "--failed-since", "2h", "--pace", "0", "--reason", "x"},
		{"retry", "--failed-since", "2h", "--pace", "fast", "--reason", "x"},
		{"retry", "--failed-since", "2h", "--pace", "5000/s", "--reason", "x"},
		{"retry", "--failed-since", "2h", "--pace", "10/s"},
		{"retry", "--failed-since", "yesterday", "--pace", "10/s", "--reason", "x"},
		{"retry", "--failed-since", time.Now().Add(time.Hour).UTC().Format(time.RFC3339), "--pace", "10/s", "--reason", "x"},
		{"retry", "--failed-since", "2h", "--pace", "10/s", "--state", "failed", "--reason", "x"},
		{"retry", "--failed-since", "2h", "--pace", "10/s", "--force", "--reason", "x"},
		{"retry", b.ids["failed"].String(), "--failed-since", "2h", "--pace", "10/s", "--reason", "x"},
		{"replays", "show", "one"},
	} {
		out, err := b.run(t, "", bad...)
		require.Equal(t, 2, cli.ExitCode(err), "%v: %v %s", bad, err, out)
	}
	out, err := b.run(t, "", "replays")
	require.NoError(t, err)
	require.Contains(t, out, "no replays", "bad input started nothing")

	out, err = b.run(t, "", "retry", "--failed-since", "2h", "--pace", "10/s", "--provider", "webhook", "--reason", "x", "--dry-run")
	require.NoError(t, err, out)
	require.Contains(t, out, "would replay 2 failed effects at 10/s")

	out, err = b.run(t, "", "retry", "--failed-since", "2h", "--pace", "10/s", "--provider", "webhook", "--reason", "partner back")
	require.NoError(t, err, out)
	require.Contains(t, out, "replay 1 started: 2 failed effects at 10/s")
	require.Contains(t, out, "outboxctl replays show 1")
	out, err = b.run(t, "", "replays")
	require.NoError(t, err)
	require.Regexp(t, `1\s+running\s+failed since \S+, provider webhook\s+10/s\s+2\s+0\s+0\s+2\s+\S+\s+oncall@example.com`, out)

	// outboxd runs it.
	wh, err := webhook.New(webhook.Config{Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"})
	require.NoError(t, err)
	sideeffectstest.Start(t, b.db.Pool, sideeffects.Config{Schema: b.db.Schema, Providers: []providers.Provider{wh}})
	var r outboxtype.Replay
	require.Eventually(t, func() bool {
		out, err := b.run(t, "", "replays", "show", "1", "--json")
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal([]byte(out), &r))
		return r.State == outboxtype.ReplayDone
	}, 30*time.Second, 20*time.Millisecond)
	require.Equal(t, 1, r.Retried)
	require.Equal(t, 1, r.Skipped)
	require.NotEqual(t, outboxtype.StateFailed, b.effect(t, "failed").State, "retried")
	require.Equal(t, outboxtype.StateFailed, b.effect(t, "failed_old_window").State, "a replay never forces")

	out, err = b.run(t, "", "replays", "show", "1")
	require.NoError(t, err)
	require.Contains(t, out, "2 selected: 1 retried, 1 skipped, 0 left")
	require.Contains(t, out, "partner back")
	require.Regexp(t, b.ids["failed_old_window"].String()+`\s+webhook.order_paid\s+key window closed`, out)

	out, err = b.run(t, "", "replays", "cancel", "1", "--reason", "late")
	require.Equal(t, 1, cli.ExitCode(err), out)
	require.ErrorContains(t, err, "replay 1 is done, not running")
	_, err = b.run(t, "", "replays", "cancel", "7", "--reason", "x")
	require.ErrorContains(t, err, "no replay 7")

	// A slow one, cancelled before it ends.
	_, err = b.db.Pool.Exec(context.Background(), `UPDATE `+b.db.Schema+`.side_effects SET state = 'failed', updated_at = now() - interval '5 minutes' WHERE kind = 'webhook.order_paid' AND state IN ('pending', 'fired')`)
	require.NoError(t, err)
	out, err = b.run(t, "", "retry", "--failed-since", "10m", "--pace", "0.01", "--reason", "slowly")
	require.NoError(t, err, out)
	require.Contains(t, out, "replay 2 started")
	// Its pace, changed while it runs: bad input changes nothing.
	for _, bad := range [][]string{
		{"replays", "pace", "2", "0.02"},
		{"replays", "pace", "2", "fast", "--reason", "x"},
		{"replays", "pace", "2", "0", "--reason", "x"},
		{"replays", "pace", "2", "5000/s", "--reason", "x"},
		{"replays", "pace", "two", "1", "--reason", "x"},
	} {
		out, err := b.run(t, "", bad...)
		require.Equal(t, 2, cli.ExitCode(err), "%v: %v %s", bad, err, out)
	}
	out, err = b.run(t, "", "replays", "pace", "2", "0.02/s", "--reason", "the partner copes")
	require.NoError(t, err, out)
	require.Contains(t, out, "replay 2: pace 0.02/s, was 0.01/s, from its next step")
	out, err = b.run(t, "", "replays", "show", "2")
	require.NoError(t, err)
	require.Regexp(t, `pace\s+0.02/s\n\s+0.02/s from 0.01/s at \S+ by oncall@example.com: the partner copes`, out)
	out, err = b.run(t, "", "replays", "pace", "1", "5", "--reason", "x")
	require.Equal(t, 1, cli.ExitCode(err), out)
	require.ErrorContains(t, err, "replay 1 is done, not running: its pace stays 10/s")
	out, err = b.run(t, "", "replays", "cancel", "2")
	require.Equal(t, 2, cli.ExitCode(err), out)
	out, err = b.run(t, "", "replays", "cancel", "2", "--reason", "partner asked to wait")
	require.NoError(t, err, out)
	require.Contains(t, out, "replay 2 cancelled")
	out, err = b.run(t, "", "replays")
	require.NoError(t, err)
	require.Regexp(t, `2\s+cancelled\s+failed since \S+\s+0.02/s`, out, "a slow pace is not shown as 0/s")
}
