package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/cli"
	"github.com/outboxd/outboxd/outboxtype"
)

// TestEditCorrectsAPayloadNoProviderSaw: outboxctl edit replaces the
// payload of a failed effect whose every attempt was refused before any
// request, keeps its key and sends it back to pending, audited with both
// payloads; bad input exits 2 and changes nothing; an effect a receiver
// answered is refused with who must fix what.
func TestEditCorrectsAPayloadNoProviderSaw(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	id := b.ids["failed"].String()
	_, err := b.db.Pool.Exec(ctx, `UPDATE `+b.db.Schema+`.side_effects SET total_attempts = 1,
		last_error = 'refused before sending (no request made): payload.url: scheme "ftp" not allowed' WHERE id = $1`, b.ids["failed"])
	require.NoError(t, err)
	require.NoError(t, b.store.RecordAttempt(ctx, b.db.Pool, outboxtype.Attempt{EffectID: b.ids["failed"], Attempt: 1, StartedAt: time.Now(),
		Outcome: "refused", Error: `refused before sending (no request made): payload.url: scheme "ftp" not allowed`}))
	fixed := `{"url": "https://hooks.example.com/fixed", "body": {"n": 4}}`

	for _, args := range [][]string{
		{"edit", id, "--reason", "r"},
		{"edit", id, "--payload", "{not json", "--reason", "r"},
		{"edit", id, "--payload", fixed},
		{"edit", id, "--payload", fixed, "--payload-file", "x.json", "--reason", "r"},
	} {
		out, err := b.run(t, "", args...)
		require.Equal(t, 2, cli.ExitCode(err), "%v: %s", args, out)
	}
	out, err := b.run(t, "", "edit", id, "--payload", `{"url": "ftp://hooks.example.com/o", "body": {}}`, "--reason", "r")
	require.Error(t, err)
	require.Contains(t, err.Error(), `not edited: the new payload is invalid: payload.url: scheme "ftp" not allowed`, out)

	// The same document written another way is no edit.
	var body, url string
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT payload->>'url', (payload->'body')::text
		FROM `+b.db.Schema+`.side_effects WHERE id = $1`, b.ids["failed"]).Scan(&url, &body))
	_, err = b.run(t, "", "edit", id, "--payload", fmt.Sprintf(`{ "body" :  %s,  "url" : %q }`, body, url), "--reason", "r")
	require.ErrorContains(t, err, "the new payload is the same as the old: nothing to edit")

	out, err = b.run(t, "", "edit", id, "--payload", fixed, "--dry-run")
	require.NoError(t, err, out)
	require.Contains(t, out, `url: "https://hooks.example.com/o" -> "https://hooks.example.com/fixed"`)
	require.Contains(t, out, "dry run: "+id+" would move failed -> pending")
	require.Equal(t, outboxtype.StateFailed, b.effect(t, "failed").State)

	key := b.effect(t, "failed").IdempotencyKey
	out, err = b.run(t, "", "edit", id, "--payload", fixed, "--reason", "scheme typo in the backfill; fixed there too")
	require.NoError(t, err, out)
	require.Contains(t, out, "edited "+id+": failed -> pending with this payload and key "+key)
	e := b.effect(t, "failed")
	require.Equal(t, outboxtype.StatePending, e.State)
	require.JSONEq(t, fixed, string(e.Payload))
	audit, err := b.store.Audit(ctx, b.db.Pool, e.ID)
	require.NoError(t, err)
	last := audit[len(audit)-1]
	require.Equal(t, outboxtype.ActionEditPayload, last.Action)
	require.Contains(t, string(last.Details), `"payload_after": {"url": "https://hooks.example.com/fixed"`)

	// A receiver that answered 422 twice (webhook 4xx are retried) refused
	// the fields each time and acted on none: the payload is for the
	// operator to fix, with its key.
	unprocessable := b.ids["retrying"]
	_, err = b.db.Pool.Exec(ctx, `UPDATE `+b.db.Schema+`.side_effects SET state = 'failed', total_attempts = 2, attempts = 2,
		last_error = 'retries exhausted after 2 attempts: retryable: HTTP 422' WHERE id = $1`, unprocessable)
	require.NoError(t, err)
	for n := 1; n <= 2; n++ {
		require.NoError(t, b.store.RecordAttempt(ctx, b.db.Pool, outboxtype.Attempt{EffectID: unprocessable, Attempt: n, StartedAt: time.Now(),
			Outcome: "retryable", Error: `retryable: HTTP 422: {"error": "amount must be positive"}`, Host: "hooks.example.com"}))
	}
	out, err = b.run(t, "", "edit", unprocessable.String(), "--payload", fixed, "--reason", "amount sign fixed")
	require.NoError(t, err, out)
	require.Equal(t, outboxtype.StatePending, b.effect(t, "retrying").State)

	// The receiver answered 410: it saw the request.
	other := b.ids["failed_old_window"].String()
	_, err = b.db.Pool.Exec(ctx, `UPDATE `+b.db.Schema+`.side_effects SET total_attempts = 1 WHERE id = $1`, b.ids["failed_old_window"])
	require.NoError(t, err)
	require.NoError(t, b.store.RecordAttempt(ctx, b.db.Pool, outboxtype.Attempt{EffectID: b.ids["failed_old_window"], Attempt: 1, StartedAt: time.Now(),
		Outcome: "permanent", Error: "permanent: HTTP 410 (endpoint gone)", Host: "hooks.example.com"}))
	_, err = b.run(t, "", "edit", other, "--payload", fixed, "--reason", "r")
	require.ErrorContains(t, err, "attempt 1 reached webhook (permanent: permanent: HTTP 410 (endpoint gone))")
	require.ErrorContains(t, err, "fix the payload where the effect was enqueued and enqueue it as a new event")
}

// TestEditReadsTheNetworksOutboxdRunReads: OUTBOXD_WEBHOOK_ALLOW_CIDRS,
// which outboxd run and outboxctl endpoints read, lets edit point a
// webhook at an allowed private network too; without it the URL is
// refused. (Not parallel: it sets the environment.)
func TestEditReadsTheNetworksOutboxdRunReads(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	id := b.ids["failed"]
	_, err := b.db.Pool.Exec(ctx, `UPDATE `+b.db.Schema+`.side_effects SET total_attempts = 1 WHERE id = $1`, id)
	require.NoError(t, err)
	require.NoError(t, b.store.RecordAttempt(ctx, b.db.Pool, outboxtype.Attempt{EffectID: id, Attempt: 1, StartedAt: time.Now(),
		Outcome: "refused", Error: `refused before sending (no request made): payload.url: scheme "ftp" not allowed`}))
	internal := `{"url": "http://10.1.2.3/in", "body": {}}`

	_, err = b.run(t, "", "edit", id.String(), "--payload", internal, "--reason", "r")
	require.ErrorContains(t, err, "10.1.2.3 is a private address")
	t.Setenv("OUTBOXD_WEBHOOK_ALLOW_CIDRS", "10.0.0.0/8")
	out, err := b.run(t, "", "edit", id.String(), "--payload", internal, "--reason", "the partner's VPN address")
	require.NoError(t, err, out)
	require.Equal(t, outboxtype.StatePending, b.effect(t, "failed").State)
}
