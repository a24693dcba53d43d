package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/outboxtype"
)

// TestStuckShowsABlockedChainUnderItsHead: effects waiting behind a failed
// head of their ordering key are listed under it, "blocked behind" it;
// release lets them go, with the operator's reason in the audit trail.
func TestStuckShowsABlockedChainUnderItsHead(t *testing.T) {
	t.Parallel()
	b := newTestBundle(t)
	db := b.db
	ob, err := outbox.New(outbox.Config{Jobs: outbox.JobsInTransaction, Schema: db.Schema})
	require.NoError(t, err)
	ctx := context.Background()
	for i, name := range []string{"capture", "refund", "receipt"} {
		require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			res, err := ob.Enqueue(ctx, tx, outbox.Event{ID: uuid.New(), Type: "payment." + name},
				outbox.Effect{Kind: "webhook." + name, Provider: "webhook", OrderingKey: "pay_7",
					Payload: json.RawMessage(fmt.Sprintf(`{"url": "https://hooks.example.com/p", "body": {"n": %d}}`, i))})
			if err == nil {
				b.ids[name] = res.Effects[0].ID
			}
			return err
		}))
	}
	_, err = db.Pool.Exec(ctx, `UPDATE `+db.Schema+`.side_effects SET created_at = now() - interval '1 hour', updated_at = now() - interval '1 hour'`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `UPDATE `+db.Schema+`.side_effects SET state = 'failed', attempts = 1, last_error = 'HTTP 410 (endpoint gone)' WHERE id = $1`, b.ids["capture"])
	require.NoError(t, err)

	out, err := b.run(t, "", "stuck", "--json")
	require.NoError(t, err)
	var rows []struct {
		ID            uuid.UUID  `json:"id"`
		BlockedBehind *uuid.UUID `json:"blocked_behind"`
		Diagnosis     string     `json:"diagnosis"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rows))
	require.Len(t, rows, 3)
	for _, r := range rows {
		if r.ID == b.ids["capture"] {
			require.Nil(t, r.BlockedBehind)
			continue
		}
		require.NotNil(t, r.BlockedBehind)
		require.Equal(t, b.ids["capture"], *r.BlockedBehind)
		require.Contains(t, r.Diagnosis, "blocked behind "+b.ids["capture"].String())
		require.Contains(t, r.Diagnosis, "outboxctl release")
	}

	out, err = b.run(t, "", "stuck")
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 4, out)
	require.True(t, strings.HasPrefix(lines[1], b.ids["capture"].String()), out)
	require.True(t, strings.HasPrefix(lines[2], "  └ "+b.ids["refund"].String()), "the chain under its head, in order:\n%s", out)
	require.True(t, strings.HasPrefix(lines[3], "  └ "+b.ids["receipt"].String()), out)

	_, err = b.run(t, "", "release", b.ids["capture"].String())
	require.ErrorContains(t, err, "reason")
	// The dry run lists what would go out, in order.
	out, err = b.run(t, "", "release", b.ids["capture"].String(), "--dry-run", "--reason", "look first")
	require.NoError(t, err, out)
	require.Contains(t, out, "may depend on it")
	require.Less(t, strings.Index(out, "1. "+b.ids["refund"].String()), strings.Index(out, "2. "+b.ids["receipt"].String()), out)
	require.Nil(t, b.effect(t, "capture").OrderingReleasedAt, "a dry run changes nothing")
	out, err = b.run(t, "", "release", b.ids["capture"].String(), "--reason", "paid by bank transfer")
	require.NoError(t, err, out)
	require.Contains(t, out, "done")
	e := b.effect(t, "capture")
	require.Equal(t, outboxtype.StateFailed, e.State, "the head keeps its state")
	require.NotNil(t, e.OrderingReleasedAt)
	var blocked int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM `+db.Schema+`.outbox_order_wake WHERE ordering_key = 'pay_7'`).Scan(&blocked))
	require.Positive(t, blocked, "the chain is woken for a dispatcher")
	// The refund is now first in its chain; the receipt waits behind it.
	out, err = b.run(t, "", "stuck", "--json")
	require.NoError(t, err)
	rows = nil
	require.NoError(t, json.Unmarshal([]byte(out), &rows))
	for _, r := range rows {
		switch r.ID {
		case b.ids["refund"]:
			require.Nil(t, r.BlockedBehind)
		case b.ids["receipt"]:
			require.NotNil(t, r.BlockedBehind)
			require.Equal(t, b.ids["refund"], *r.BlockedBehind)
		}
	}
}
