package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/cli"
	"github.com/outboxd/outboxd/internal/engine"
	"github.com/outboxd/outboxd/internal/testdb"
	"github.com/outboxd/outboxd/outboxtype"
)

// fleetRun runs outboxctl with the shards eu-1 (a) and us-1 (b), and
// extra shards given as name=URL.
func fleetRun(t *testing.T, a, b *testBundle, extra []string, args ...string) (string, string, error) {
	t.Helper()
	cmd := newRootCmd(strings.NewReader(""))
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	fleet := []string{"--shard-database", "eu-1=" + testdb.URL(), "--shard-database", "us-1=" + testdb.URL(),
		"--shard-schema", "eu-1=" + a.db.Schema + ",us-1=" + b.db.Schema, "--actor", "oncall@example.com"}
	for _, e := range extra {
		fleet = append(fleet, "--shard-database", e)
	}
	cmd.SetArgs(append(args, fleet...))
	err := cmd.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

func TestOperatorsReadEveryShardAndActOnOne(t *testing.T) {
	t.Parallel()
	a, b := setup(t), setup(t)
	ctx := context.Background()
	// Shard us-1's effects are the newer ones.
	_, err := a.db.Pool.Exec(ctx, `UPDATE `+a.db.Schema+`.side_effects SET created_at = created_at - interval '400 days'`)
	require.NoError(t, err)

	// list --all-shards: every shard's effects, each with its shard, in
	// one order (newest first).
	out, _, err := fleetRun(t, a, b, nil, "list", "--all-shards", "--json")
	require.NoError(t, err)
	var rows []struct {
		Shard     string    `json:"shard"`
		ID        string    `json:"id"`
		CreatedAt time.Time `json:"created_at"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rows))
	require.Len(t, rows, 2*len(a.ids))
	for i, r := range rows {
		want := "us-1"
		if i >= len(b.ids) {
			want = "eu-1"
		}
		require.Equal(t, want, r.Shard, "row %d", i)
		if i > 0 {
			require.False(t, r.CreatedAt.After(rows[i-1].CreatedAt), "newest first across shards")
		}
	}
	require.Equal(t, a.ids["pending"].String(), findShardRow(t, out, "eu-1", a.ids["pending"].String()))

	// The same as a table: a SHARD column, both shards.
	out, _, err = fleetRun(t, a, b, nil, "stuck", "--all-shards")
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Regexp(t, `^SHARD\s+ID\s+KIND`, lines[0])
	require.Contains(t, out, "eu-1  ")
	require.Contains(t, out, "us-1  ")
	require.Contains(t, out, b.ids["failed"].String())
	require.Contains(t, out, a.ids["failed"].String())

	out, _, err = fleetRun(t, a, b, nil, "stats", "--all-shards")
	require.NoError(t, err)
	require.Regexp(t, `(?m)^SHARD\s+PENDING\s+FIRED\s+FAILED`, out)
	require.Regexp(t, `(?m)^eu-1\s+\d+\s+\d+\s+[1-9]`, out, "each shard's failed effects counted")
	require.Regexp(t, `(?m)^us-1\s+\d+\s+\d+\s+[1-9]`, out)

	// An action addresses one shard, and touches only it.
	_, _, err = fleetRun(t, a, b, nil, "cancel", b.ids["failed"].String(), "--reason", "refunded by hand")
	require.Error(t, err, "with several shards an action needs --shard")
	require.Contains(t, err.Error(), "address one with --shard NAME")
	_, _, err = fleetRun(t, a, b, nil, "cancel", b.ids["failed"].String(), "--reason", "refunded by hand", "--all-shards")
	require.Error(t, err)
	require.Contains(t, err.Error(), "addresses one shard: name it with --shard")
	_, _, err = fleetRun(t, a, b, nil, "cancel", b.ids["failed"].String(), "--reason", "refunded by hand", "--shard", "us-1")
	require.NoError(t, err)
	require.Equal(t, outboxtype.StateCancelled, b.effect(t, "failed").State)
	require.Equal(t, outboxtype.StateFailed, a.effect(t, "failed").State)

	// A shard that cannot be read is named; the others are shown, and the
	// command fails.
	out, stderr, err := fleetRun(t, a, b, []string{"ap-1=postgres://postgres@127.0.0.1:1/nowhere?sslmode=disable&connect_timeout=1"},
		"list", "--all-shards", "--json")
	require.Error(t, err)
	require.Contains(t, err.Error(), "1 of 3 shards could not be read (ap-1)")
	require.Contains(t, stderr, "shard ap-1: ")
	require.NoError(t, json.Unmarshal([]byte(out), &rows))
	require.Len(t, rows, 2*len(a.ids))

	_, _, err = fleetRun(t, a, b, nil, "list", "--shard", "xx-9")
	require.Error(t, err)
	require.Contains(t, err.Error(), "the shards are eu-1, us-1")
}

// findShardRow returns the id of the row of shard with id in a JSON list.
func findShardRow(t *testing.T, out, shard, id string) string {
	t.Helper()
	var rows []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &rows))
	for _, r := range rows {
		if r["shard"] == shard && r["id"] == id {
			return id
		}
	}
	return ""
}

// TestALimitIsLiftedForEveryShard: with several shards the first keeps
// the limits for all (as outboxd run does), so a key read through any
// shard is that one row; `limits resume --all-shards` lifts it once and
// makes the effects waiting for it in every shard due, saying how many
// in each.
func TestALimitIsLiftedForEveryShard(t *testing.T) {
	t.Parallel()
	a, b := setup(t), setup(t)
	ctx := context.Background()
	const key = "webhook:a.example.com"
	// A 429 paused the key in the place every shard shares: eu-1's.
	_, _, err := engine.Throttle(ctx, a.store, a.db.Pool, key, engine.A429{After: time.Hour, Base: time.Second, Again: true})
	require.NoError(t, err)
	for _, s := range []*testBundle{a, b} {
		require.NoError(t, s.store.MarkWaiting(ctx, s.db.Pool, s.ids["pending"], key))
		sleepJob(t, s, s.ids["pending"])
	}

	out, _, err := fleetRun(t, a, b, nil, "limits", "--shard", "us-1", "--json")
	require.NoError(t, err)
	var limits []struct {
		Key            string     `json:"key"`
		PausedUntil    *time.Time `json:"paused_until"`
		WaitingEffects int        `json:"waiting_effects"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &limits))
	require.Len(t, limits, 1, "us-1 reads the limits eu-1 keeps for both: %s", out)
	require.Equal(t, key, limits[0].Key)
	require.NotNil(t, limits[0].PausedUntil, "the pause a 429 of either shard began")
	require.Equal(t, 1, limits[0].WaitingEffects, "what waits for it in the shard read")

	_, _, err = fleetRun(t, a, b, nil, "limits", "set", key, "5", "--all-shards", "--reason", "x")
	require.Equal(t, 2, cli.ExitCode(err), "an action other than resume addresses one shard: %v", err)

	out, _, err = fleetRun(t, a, b, nil, "limits", "resume", key, "--all-shards", "--reason", "partner back")
	require.NoError(t, err, out)
	require.Contains(t, out, "limit "+key+" resumed: 2 waiting effects go out now (eu-1 1, us-1 1)")
	require.True(t, jobDue(t, a, a.ids["pending"]), "eu-1's waiting effect is due now")
	require.True(t, jobDue(t, b, b.ids["pending"]), "us-1's waiting effect is due now")
	out, _, err = fleetRun(t, a, b, nil, "limits", "--all-shards", "--json")
	require.NoError(t, err)
	limits = nil
	require.NoError(t, json.Unmarshal([]byte(out), &limits))
	require.Len(t, limits, 2, "the key, as each shard reads it")
	for _, l := range limits {
		require.Nil(t, l.PausedUntil, "%s resumed for every shard", l.Key)
	}
}
