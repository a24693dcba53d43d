package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/cli"
	"github.com/outboxd/outboxd/internal/store"
	"github.com/outboxd/outboxd/internal/testdb"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/outboxtype"
)

type testBundle struct {
	db    *testdb.DB
	store *store.Store
	// seeded effect ids by name
	ids map[string]uuid.UUID
}

// newTestBundle is a migrated schema of its own, and the store the tests
// seed it with.
func newTestBundle(t *testing.T) *testBundle {
	t.Helper()
	return bundleOf(testdb.New(t))
}

func bundleOf(db *testdb.DB) *testBundle {
	return &testBundle{db: db, store: store.NewStore(db.Schema), ids: map[string]uuid.UUID{}}
}

// setup seeds one effect in each situation an operator meets.
func setup(t *testing.T) *testBundle {
	t.Helper()
	b := newTestBundle(t)
	db := b.db
	ob, err := outbox.New(outbox.Config{Jobs: outbox.JobsInTransaction, Schema: db.Schema})
	require.NoError(t, err)
	ctx := context.Background()
	names := []string{"pending", "pending_nojob", "fired_stale", "retrying", "failed", "failed_old_window", "confirmed", "confirmed_old", "cancelled", "window_closing"}
	for i, name := range names {
		kind := "webhook.order_paid"
		if name == "confirmed" || name == "confirmed_old" {
			kind = "email.receipt"
		}
		err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			provider, payload := "webhook", `{"url": "https://hooks.example.com/o", "body": {"n": `+fmt.Sprint(i)+`}}`
			if kind == "email.receipt" {
				provider, payload = "sendgrid", `{"from": {"email": "s@example.com"}, "to": [{"email": "a@example.com"}], "subject": "s", "text": "t"}`
			}
			res, err := ob.Enqueue(ctx, tx, outbox.Event{ID: uuid.New(), Type: "order.paid", AggregateType: "order", AggregateID: name},
				outbox.Effect{Kind: kind, Provider: provider, Payload: json.RawMessage(payload)})
			if err == nil {
				b.ids[name] = res.Effects[0].ID
			}
			return err
		})
		require.NoError(t, err)
	}
	exec := func(sql string, name string) {
		_, err := db.Pool.Exec(ctx, strings.ReplaceAll(sql, "S.", db.Schema+"."), b.ids[name])
		require.NoError(t, err, name)
	}
	// Everything is an hour old, except what is set otherwise.
	_, err = db.Pool.Exec(ctx, `UPDATE `+db.Schema+`.side_effects SET created_at = now() - interval '1 hour', updated_at = now() - interval '1 hour'`)
	require.NoError(t, err)
	exec(`DELETE FROM S.river_job WHERE args->>'effect_id' = $1::text`, "pending_nojob")
	exec(`UPDATE S.side_effects SET state = 'fired', in_doubt = true, attempts = 1, fired_at = now() - interval '20 minutes', first_fired_at = now() - interval '20 minutes', key_window_from = now() - interval '20 minutes' WHERE id = $1`, "fired_stale")
	exec(`UPDATE S.river_job SET state = 'running', attempt = 1, attempted_at = now() WHERE args->>'effect_id' = $1::text`, "fired_stale")
	exec(`UPDATE S.side_effects SET attempts = 2, last_error = 'HTTP 503', first_fired_at = now() - interval '1 hour', key_window_from = now() - interval '1 hour', fired_at = now() - interval '50 minutes' WHERE id = $1`, "retrying")
	exec(`UPDATE S.river_job SET state = 'retryable', attempt = 2, scheduled_at = now() + interval '10 minutes' WHERE args->>'effect_id' = $1::text`, "retrying")
	for _, name := range []string{"failed", "failed_old_window"} {
		exec(`UPDATE S.side_effects SET state = 'failed', attempts = 1, last_error = 'HTTP 410 (endpoint gone)', first_fired_at = now() - interval '1 hour', key_window_from = now() - interval '1 hour' WHERE id = $1`, name)
		exec(`UPDATE S.river_job SET state = 'cancelled', finalized_at = now() WHERE args->>'effect_id' = $1::text`, name)
	}
	exec(`UPDATE S.side_effects SET first_fired_at = now() - interval '30 hours', key_window_from = now() - interval '30 hours' WHERE id = $1`, "failed_old_window")
	exec(`UPDATE S.side_effects SET state = 'fired', in_doubt = true, attempts = 3, last_error = 'no response: timeout', first_fired_at = now() - interval '23 hours 30 minutes', key_window_from = now() - interval '23 hours 30 minutes', fired_at = now() - interval '30 minutes' WHERE id = $1`, "window_closing")
	exec(`UPDATE S.river_job SET state = 'retryable', attempt = 3, scheduled_at = now() + interval '5 minutes' WHERE args->>'effect_id' = $1::text`, "window_closing")
	for _, name := range []string{"confirmed", "confirmed_old"} {
		exec(`UPDATE S.side_effects SET state = 'confirmed', attempts = 1, first_fired_at = created_at, key_window_from = created_at, fired_at = created_at, confirmed_at = created_at + interval '2 seconds', updated_at = created_at + interval '2 seconds', provider_ref = 'msg_1' WHERE id = $1`, name)
		exec(`UPDATE S.river_job SET state = 'completed', finalized_at = now() WHERE args->>'effect_id' = $1::text`, name)
	}
	exec(`UPDATE S.side_effects SET created_at = now() - interval '40 days', updated_at = now() - interval '40 days', confirmed_at = now() - interval '40 days' WHERE id = $1`, "confirmed_old")
	exec(`UPDATE S.outbox_events SET created_at = now() - interval '40 days' WHERE id = (SELECT source_id FROM S.side_effects WHERE id = $1)`, "confirmed_old")
	exec(`UPDATE S.side_effects SET state = 'cancelled' WHERE id = $1`, "cancelled")
	exec(`UPDATE S.river_job SET state = 'cancelled', finalized_at = now() WHERE args->>'effect_id' = $1::text`, "cancelled")
	return b
}

// run executes outboxctl in-process against the bundle's schema.
func (b *testBundle) run(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	cmd := newRootCmd(strings.NewReader(stdin))
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(append(args, "--database-url", testdb.URL(), "--schema", b.db.Schema, "--actor", "oncall@example.com"))
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

func (b *testBundle) effect(t *testing.T, name string) *outboxtype.Effect {
	t.Helper()
	e, err := b.store.Get(context.Background(), b.db.Pool, b.ids[name])
	require.NoError(t, err)
	return e
}

func (b *testBundle) jobCount(t *testing.T, name string) int {
	t.Helper()
	var n int
	require.NoError(t, b.db.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM `+b.db.Schema+`.river_job WHERE args->>'effect_id' = $1::text`, b.ids[name]).Scan(&n))
	return n
}

func TestList(t *testing.T) {
	t.Parallel()
	b := setup(t)

	out, err := b.run(t, "", "list")
	require.NoError(t, err)
	for name, id := range b.ids {
		require.Contains(t, out, id.String(), name)
	}
	require.Regexp(t, `(?m)^ID\s+CREATED\s+KIND\s+PROVIDER\s+STATE\s+ATTEMPTS\s+LAST ERROR$`, out)

	out, err = b.run(t, "", "list", "--state", "failed", "--json")
	require.NoError(t, err)
	var failed []outboxtype.Effect
	require.NoError(t, json.Unmarshal([]byte(out), &failed))
	require.Len(t, failed, 2)
	for _, e := range failed {
		require.Equal(t, outboxtype.StateFailed, e.State)
	}

	out, err = b.run(t, "", "list", "--provider", "sendgrid", "--json")
	require.NoError(t, err)
	var mails []outboxtype.Effect
	require.NoError(t, json.Unmarshal([]byte(out), &mails))
	require.Len(t, mails, 2)

	out, err = b.run(t, "", "list", "--kind", "email.receipt", "--older-than", "720h", "--json")
	require.NoError(t, err)
	var old []outboxtype.Effect
	require.NoError(t, json.Unmarshal([]byte(out), &old))
	require.Len(t, old, 1)
	require.Equal(t, b.ids["confirmed_old"], old[0].ID)

	// Pages of 3 cover every effect exactly once, newest first.
	seen := map[uuid.UUID]bool{}
	after := ""
	for page := 0; page < 10; page++ {
		args := []string{"list", "--limit", "3", "--json"}
		if after != "" {
			args = append(args, "--after", after)
		}
		out, err := b.run(t, "", args...)
		require.NoError(t, err)
		var es []outboxtype.Effect
		require.NoError(t, json.Unmarshal([]byte(out), &es))
		for i, e := range es {
			require.False(t, seen[e.ID], "effect %s on two pages", e.ID)
			seen[e.ID] = true
			if i > 0 {
				require.False(t, e.CreatedAt.After(es[i-1].CreatedAt), "newest first")
			}
		}
		if len(es) < 3 {
			break
		}
		after = es[len(es)-1].ID.String()
	}
	require.Len(t, seen, len(b.ids))
}

func TestStuckExplainsWhy(t *testing.T) {
	t.Parallel()
	b := setup(t)
	why := b.stuckWhy(t)
	var rows []struct {
		ID        uuid.UUID `json:"id"`
		Diagnosis string    `json:"diagnosis"`
	}
	require.Contains(t, why[b.ids["pending_nojob"]], "no live River job")
	require.Contains(t, why[b.ids["pending_nojob"]], "`outboxctl requeue`", "advice names a command that works for it")
	require.Contains(t, why[b.ids["fired_stale"]], "beyond the crash-recovery bound")
	require.Contains(t, why[b.ids["retrying"]], "retrying: 2 attempts, last error: HTTP 503; next attempt in")
	require.Contains(t, why[b.ids["failed"]], "failed: HTTP 410 (endpoint gone)")
	require.Contains(t, why[b.ids["failed"]], "`outboxctl cancel`", "a permanent refusal suggests cancel")
	require.Contains(t, why[b.ids["window_closing"]], "key window closes in")
	require.Contains(t, why[b.ids["pending"]], "waiting for a worker")
	for _, name := range []string{"confirmed", "confirmed_old", "cancelled"} {
		require.NotContains(t, why, b.ids[name], "%s is not stuck", name)
	}

	out, err := b.run(t, "", "stuck")
	require.NoError(t, err)
	require.Regexp(t, `(?m)^ID\s+KIND\s+PROVIDER\s+STATE\s+ATTEMPTS\s+UNCHANGED\s+WHY$`, out)
	require.Contains(t, out, b.ids["fired_stale"].String())

	// Nothing live is older than two hours; failed effects are listed
	// whatever their age.
	out, err = b.run(t, "", "stuck", "--older-than", "2h", "--json")
	require.NoError(t, err)
	rows = nil
	require.NoError(t, json.Unmarshal([]byte(out), &rows))
	require.Len(t, rows, 2, "the two failed effects")
	for _, r := range rows {
		require.True(t, r.ID == b.ids["failed"] || r.ID == b.ids["failed_old_window"], r.Diagnosis)
	}

	// An effect parked in doubt gets the in-doubt advice, naming the risk.
	_, err = b.db.Pool.Exec(context.Background(), `UPDATE `+b.db.Schema+`.side_effects
		SET provider = 'sendgrid', in_doubt = true, last_error = 'in doubt: not re-sent: sendgrid HTTP 500' WHERE id = $1`, b.ids["failed"])
	require.NoError(t, err)
	out, err = b.run(t, "", "stuck", "--json")
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal([]byte(out), &rows))
	for _, r := range rows {
		if r.ID == b.ids["failed"] {
			require.Contains(t, r.Diagnosis, "--allow-duplicate")
			require.Contains(t, r.Diagnosis, "confirm --ref")
			require.NotContains(t, r.Diagnosis, "in_doubt:", "no doubled class in the wording")
			require.NotContains(t, r.Diagnosis, "Stripe", "an email's advice names SendGrid's tools, not Stripe's")
			require.Contains(t, r.Diagnosis, "custom argument outboxd_idempotency_key=")
		}
	}
}

// TestStuckBlamesADeadWorkerOnlyForARunningJob: a webhook backing off
// from a receiver that hangs reads as retrying, not as a dead outboxd; a
// fired effect under a running job is blamed on a dead worker only past
// the bound the running dispatchers' own --rescue-after gives; with none
// running, the diagnosis says so. The default threshold shows a fired
// effect as soon as it passes the crash-recovery bound.
func TestStuckBlamesADeadWorkerOnlyForARunningJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	_, err := b.db.Pool.Exec(ctx, `UPDATE `+b.db.Schema+`.side_effects SET state = 'fired', in_doubt = true,
		last_error = 'no response: context deadline exceeded (webhook timeout 30s)' WHERE id = $1`, b.ids["retrying"])
	require.NoError(t, err)
	why := func() map[uuid.UUID]string { return b.stuckWhy(t) }
	w := why()
	require.Contains(t, w[b.ids["retrying"]], "retrying: 2 attempts, last error: no response")
	require.Contains(t, w[b.ids["retrying"]], "with the same key")
	require.NotContains(t, w[b.ids["retrying"]], "died")
	require.Contains(t, w[b.ids["fired_stale"]], "beyond the crash-recovery bound")
	require.Contains(t, w[b.ids["fired_stale"]], "no outboxd has reported in the last minute")

	// A dispatcher runs with --rescue-after 6h: twenty minutes is in flight.
	require.NoError(t, b.store.RecordDispatcher(ctx, b.db.Pool, "web-1-42-1", "web-1", 42,
		map[string]any{"rescue_after": "6h0m0s", "retry_base_delay": "1s"}))
	w = why()
	require.Contains(t, w[b.ids["fired_stale"]], "in flight: attempt 1 fired")
	require.Contains(t, w[b.ids["fired_stale"]], "6h0m31s, from the running dispatchers' --rescue-after 6h0m0s")
	require.NotContains(t, w[b.ids["fired_stale"]], "beyond")

	// Fired four minutes ago under a running job, with the default 2m
	// rescue: past the bound, and shown by the default threshold.
	_, err = b.db.Pool.Exec(ctx, `UPDATE `+b.db.Schema+`.outboxd_dispatchers SET settings = '{"rescue_after": "2m0s", "retry_base_delay": "1s"}'`)
	require.NoError(t, err)
	_, err = b.db.Pool.Exec(ctx, `UPDATE `+b.db.Schema+`.side_effects SET fired_at = now() - interval '4 minutes',
		updated_at = now() - interval '4 minutes' WHERE id = $1`, b.ids["fired_stale"])
	require.NoError(t, err)
	w = why()
	require.Contains(t, w[b.ids["fired_stale"]], "beyond the crash-recovery bound (2m31s")
	require.Contains(t, w[b.ids["fired_stale"]], "one of the 1 running outboxd rescues the job")
	require.Contains(t, w[b.ids["fired_stale"]], "ask the receiver whether it processed webhook-id")
}

// TestConfirmSeveralWebhooksOfOneHangingPartner: the effects of one partner
// that hung are confirmed in one command after a dry run that shows exactly
// them; each is recorded with the webhook-id the receiver logged. One
// --ref is refused for several effects.
func TestConfirmSeveralWebhooksOfOneHangingPartner(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	// retrying and fired_stale went to the hanging partner; failed too.
	_, err := b.db.Pool.Exec(ctx, `UPDATE `+b.db.Schema+`.side_effects SET kind = 'webhook.partner_acme'
		WHERE id = ANY($1)`, []uuid.UUID{b.ids["retrying"], b.ids["fired_stale"], b.ids["failed"]})
	require.NoError(t, err)
	_, err = b.db.Pool.Exec(ctx, `UPDATE `+b.db.Schema+`.side_effects SET state = 'fired' WHERE id = $1`, b.ids["retrying"])
	require.NoError(t, err)

	_, err = b.run(t, "", "confirm", "--kind", "webhook.partner_acme", "--ref", "x", "--reason", "acme's log", "--yes")
	require.Equal(t, 2, cli.ExitCode(err))
	require.ErrorContains(t, err, "--ref names one provider object")

	out, err := b.run(t, "", "confirm", "--kind", "webhook.partner_acme", "--reason", "in acme's log", "--dry-run")
	require.NoError(t, err, out)
	require.Equal(t, 3, strings.Count(out, "would change (dry run)"), out)
	for _, n := range []string{"retrying", "fired_stale", "failed"} {
		require.Contains(t, out, b.ids[n].String())
		require.NotEqual(t, outboxtype.StateConfirmed, b.effect(t, n).State, "a dry run changes nothing")
	}

	_, err = b.run(t, "", "confirm", "--kind", "webhook.partner_acme", "--reason", "in acme's log")
	require.Error(t, err, "several effects need --yes (or an answer) in a script")
	out, err = b.run(t, "", "confirm", "--kind", "webhook.partner_acme", "--reason", "in acme's log", "--yes")
	require.NoError(t, err, out)
	for _, n := range []string{"retrying", "fired_stale", "failed"} {
		e := b.effect(t, n)
		require.Equal(t, outboxtype.StateConfirmed, e.State, n)
		require.Equal(t, "webhook-id "+e.IdempotencyKey, *e.ProviderRef, n)
	}
}

// TestStuckByCauseNewestFirst: grouped by cause, the incident that began
// last is first, whatever older failures there are, with its count, host
// and when it began; one that began earlier stays below it however
// recently its effects changed.
func TestStuckByCauseNewestFirst(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	_, err := b.db.Pool.Exec(ctx, `UPDATE `+b.db.Schema+`.side_effects SET state = 'fired', in_doubt = true, attempts = 1,
		last_error = 'no response: timeout', updated_at = now() - interval '2 minutes' WHERE id = ANY($1)`,
		[]uuid.UUID{b.ids["retrying"], b.ids["pending"]})
	require.NoError(t, err)
	// They, and window_closing with the same cause, first got no answer
	// three minutes ago; the HTTP 410 failures are an hour old.
	_, err = b.db.Pool.Exec(ctx, `UPDATE `+b.db.Schema+`.side_effects SET first_fired_at = now() - interval '3 minutes' WHERE id = ANY($1)`,
		[]uuid.UUID{b.ids["retrying"], b.ids["pending"], b.ids["window_closing"]})
	require.NoError(t, err)
	out, err := b.run(t, "", "stuck", "--by-cause")
	require.NoError(t, err, out)
	lines := strings.Split(out, "\n")
	require.Regexp(t, `^LAST CHANGE\s+EFFECTS\s+STATE`, lines[0])
	require.Regexp(t, `^2m\ds ago\s+3\s+fired\s+webhook.order_paid\s+webhook hooks.example.com\s+no response\s+3m\ds ago`, lines[1], out)
	require.Less(t, strings.Index(out, "no response"), strings.Index(out, "HTTP 410"), out)

	var groups []struct {
		Count int    `json:"count"`
		Cause string `json:"cause"`
	}
	out, err = b.run(t, "", "stuck", "--by-cause", "--json")
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal([]byte(out), &groups))
	require.Equal(t, 3, groups[0].Count)

	// The same incident, had it begun yesterday: below the failures of an
	// hour ago, though its effects changed two minutes ago.
	_, err = b.db.Pool.Exec(ctx, `UPDATE `+b.db.Schema+`.side_effects SET first_fired_at = now() - interval '23 hours' WHERE id = $1`, b.ids["window_closing"])
	require.NoError(t, err)
	out, err = b.run(t, "", "stuck", "--by-cause")
	require.NoError(t, err, out)
	require.Greater(t, strings.Index(out, "no response"), strings.Index(out, "HTTP 410"), out)
	require.Regexp(t, `no response\s+23h0m\ds ago`, out)
	require.Contains(t, out, "HTTP 410")
}

// stuckWhy runs `outboxctl stuck --json` and returns each effect's
// diagnosis by id.
func (b *testBundle) stuckWhy(t *testing.T, args ...string) map[uuid.UUID]string {
	t.Helper()
	out, err := b.run(t, "", append([]string{"stuck", "--json"}, args...)...)
	require.NoError(t, err, out)
	var rows []struct {
		ID        uuid.UUID `json:"id"`
		Diagnosis string    `json:"diagnosis"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rows))
	why := make(map[uuid.UUID]string, len(rows))
	for _, r := range rows {
		why[r.ID] = r.Diagnosis
	}
	return why
}

func TestAcknowledgeTakesAFailedEffectOutOfStuck(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.ids["failed"].String()
	_, err := b.run(t, "", "acknowledge", id)
	require.Equal(t, 2, cli.ExitCode(err), "--reason is required")
	out, err := b.run(t, "", "acknowledge", id, "--reason", "endpoint retired by the customer")
	require.NoError(t, err, out)
	e := b.effect(t, "failed")
	require.Equal(t, outboxtype.StateFailed, e.State, "still failed: nothing pretends it was done")
	require.NotNil(t, e.AcknowledgedAt)

	out, err = b.run(t, "", "stuck", "--json")
	require.NoError(t, err)
	require.NotContains(t, out, id, "out of stuck")
	require.Contains(t, out, b.ids["failed_old_window"].String(), "the other failed effect stays")

	out, err = b.run(t, "", "stats", "--json")
	require.NoError(t, err)
	require.Contains(t, out, `"state": "failed_acknowledged"`)

	out, err = b.run(t, "", "show", id)
	require.NoError(t, err)
	require.Regexp(t, `oncall@example\.com\s+acknowledge\s+failed\s+failed\s+endpoint retired by the customer`, out)

	_, err = b.run(t, "", "acknowledge", id, "--reason", "again")
	require.Equal(t, 1, cli.ExitCode(err), "acknowledged already")

	// A retry clears it.
	_, err = b.run(t, "", "retry", id, "--reason", "customer re-enabled it")
	require.NoError(t, err)
	require.Nil(t, b.effect(t, "failed").AcknowledgedAt)
}

func TestEventsShowWhatEachEventProduced(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var eventID uuid.UUID
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT source_id FROM `+b.db.Schema+`.side_effects WHERE id = $1`, b.ids["failed"]).Scan(&eventID))

	out, err := b.run(t, "", "events", "--aggregate", "order:failed", "--json")
	require.NoError(t, err)
	var evs []outboxtype.EventEffects
	require.NoError(t, json.Unmarshal([]byte(out), &evs))
	require.Len(t, evs, 1)
	require.Equal(t, eventID, evs[0].ID)
	require.Len(t, evs[0].Effects, 1)
	require.Equal(t, "webhook.order_paid", evs[0].Effects[0].Kind)
	require.Equal(t, outboxtype.StateFailed, evs[0].Effects[0].State)

	// Events lacking an expected effect: every order without a receipt.
	out, err = b.run(t, "", "events", "--type", "order.paid", "--missing-kind", "email.receipt", "--json")
	require.NoError(t, err)
	evs = nil
	require.NoError(t, json.Unmarshal([]byte(out), &evs))
	require.Len(t, evs, len(b.ids)-2, "all but the two orders with a receipt")

	out, err = b.run(t, "", "events", eventID.String())
	require.NoError(t, err)
	require.Regexp(t, `order\.paid\s+order:failed\s+webhook\.order_paid=failed`, out)

	_, err = b.run(t, "", "show", eventID.String())
	require.Error(t, err)
	require.Contains(t, err.Error(), "is an event, not an effect", "show points at events")
}

// An effect its event still carries (outbox.EffectsByDispatcher) has no
// row until a dispatcher takes the event: show, by id or key, says so and
// what to check, and exits non-zero.
func TestShowExplainsAnEffectNoDispatcherTookYet(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	ob, err := outbox.New(outbox.Config{Jobs: outbox.EffectsByDispatcher, Schema: b.db.Schema})
	require.NoError(t, err)
	event := uuid.New()
	var res *outbox.Result
	require.NoError(t, pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
		res, err = ob.Enqueue(ctx, tx, outbox.Event{ID: event, Type: "order.paid"},
			outbox.Effect{Kind: "webhook.carried", Provider: "webhook", Payload: json.RawMessage(`{"url": "https://hooks.example.com/in", "body": {}}`)})
		return err
	}))
	for _, ref := range []string{res.Effects[0].ID.String(), res.Effects[0].Key} {
		_, err := b.run(t, "", "show", ref)
		require.Error(t, err, ref)
		require.Contains(t, err.Error(), "is carried by event "+event.String(), ref)
		require.Contains(t, err.Error(), "outboxctl dispatchers", ref)
	}
	// Grouped by cause, they are an incident of their own.
	out, err := b.run(t, "", "stuck", "--by-cause", "--older-than", "0s")
	require.NoError(t, err)
	require.Regexp(t, `1\s+pending\s+webhook\.carried\s+webhook hooks\.example\.com\s+carried by its event, which no dispatcher has taken`, out)
	require.Contains(t, out, res.Effects[0].ID.String(), "its example, which show explains")
}

func TestDispatchersShowsWhoDispatchedWithWhat(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	require.NoError(t, b.store.RecordDispatcher(ctx, b.db.Pool, "web-1-42-1", "web-1", 42,
		map[string]any{"stripe": map[string]any{"api_base": "https://stripe-proxy.internal"}}))
	require.NoError(t, b.store.DispatcherSeen(ctx, b.db.Pool, "web-1-42-1", true))
	out, err := b.run(t, "", "dispatchers", "--json")
	require.NoError(t, err)
	var ds []struct {
		outboxtype.DispatcherRecord
		State       string `json:"state"`
		RunningJobs int    `json:"running_jobs"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &ds))
	require.Len(t, ds, 2, "the recorded one, and the River client holding fired_stale's job that nobody recorded")
	require.Equal(t, "web-1", ds[0].Host)
	require.NotNil(t, ds[0].StoppedAt)
	require.Contains(t, ds[0].State, "stopped")
	require.Contains(t, string(ds[0].Settings), "stripe-proxy.internal")
	require.Equal(t, "not recorded", ds[1].State)
	require.Equal(t, 1, ds[1].RunningJobs)
	out, err = b.run(t, "", "dispatchers")
	require.NoError(t, err)
	require.Contains(t, out, "web-1-42-1")
}

// TestJobsLeftRunningNameTheirProcess: a job River still marks running
// under a process that was killed (it stopped reporting) is named by
// dispatchers, with its count and what happens to it, and stuck says who
// holds the effect's job and that it went silent.
func TestJobsLeftRunningNameTheirProcess(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	require.NoError(t, b.store.RecordDispatcher(ctx, b.db.Pool, "web-2-7-1", "web-2", 7, map[string]any{"rescue_after": "2m0s"}))
	_, err := b.db.Pool.Exec(ctx, `UPDATE `+b.db.Schema+`.outboxd_dispatchers SET seen_at = now() - interval '20 minutes'`)
	require.NoError(t, err)
	_, err = b.db.Pool.Exec(ctx, `UPDATE `+b.db.Schema+`.river_job SET attempted_by = ARRAY['web-2-7-1'], attempted_at = now() - interval '20 minutes'
		WHERE state = 'running'`)
	require.NoError(t, err)

	out, err := b.run(t, "", "dispatchers")
	require.NoError(t, err)
	require.Regexp(t, `web-2-7-1\s+silent since 20m\ds ago: killed\?\s+\S+\s+20m\ds ago\s+1\s`, out)
	require.Regexp(t, `web-2-7-1 \(silent since 20m\ds ago: killed\?\) left 1 dispatch jobs running, the oldest attempted 20m\ds ago: River rescues them`, out)

	out, err = b.run(t, "", "stuck", "--json")
	require.NoError(t, err)
	var rows []struct {
		ID        uuid.UUID `json:"id"`
		HeldBy    *string   `json:"job_held_by"`
		Diagnosis string    `json:"diagnosis"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rows))
	var found bool
	for _, r := range rows {
		if r.ID == b.ids["fired_stale"] {
			found = true
			require.Equal(t, "web-2-7-1", *r.HeldBy)
			require.Regexp(t, `which River still marks running by web-2-7-1 \(silent since 20m\ds ago: killed\?\)`, r.Diagnosis)
			require.Contains(t, r.Diagnosis, "no outboxd has reported in the last minute")
		}
	}
	require.True(t, found)
}

func TestRequeueGivesJoblessEffectsAJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.ids["pending_nojob"].String()
	require.Zero(t, b.jobCount(t, "pending_nojob"))
	out, err := b.run(t, "", "requeue", id, "--reason", "row written by hand")
	require.NoError(t, err, out)
	require.Equal(t, 1, b.jobCount(t, "pending_nojob"))
	e := b.effect(t, "pending_nojob")
	require.Equal(t, outboxtype.StatePending, e.State, "the state does not change")

	out, err = b.run(t, "", "requeue", id, "--reason", "again")
	require.Equal(t, 1, cli.ExitCode(err))
	require.Contains(t, out, "is live for it already")
	require.Equal(t, 1, b.jobCount(t, "pending_nojob"))

	_, err = b.run(t, "", "requeue", b.ids["failed"].String(), "--reason", "r")
	require.Equal(t, 1, cli.ExitCode(err), "failed effects are retried, not requeued")

	out, err = b.run(t, "", "show", id)
	require.NoError(t, err)
	require.Regexp(t, `oncall@example\.com\s+requeue\s+pending\s+pending\s+row written by hand`, out)
}

func TestConfirmClearsTheErrorAndKeepsItInTheAudit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.ids["failed"].String()
	_, err := b.run(t, "", "confirm", id, "--ref", "rcv-7", "--reason", "in the receiver's log")
	require.NoError(t, err)
	e := b.effect(t, "failed")
	require.Nil(t, e.LastError, "the resolved error no longer shows")
	out, err := b.run(t, "", "show", id, "--json")
	require.NoError(t, err)
	require.Contains(t, out, "HTTP 410 (endpoint gone)", "the audit row keeps it")
}

func TestRetry(t *testing.T) {
	t.Parallel()

	t.Run("failed effect gets exactly one new job and keeps its key", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		before := b.effect(t, "failed")
		jobs := b.jobCount(t, "failed")
		out, err := b.run(t, "", "retry", before.ID.String(), "--reason", "endpoint restored")
		require.NoError(t, err, out)
		require.Contains(t, out, "done")
		after := b.effect(t, "failed")
		require.Equal(t, outboxtype.StatePending, after.State)
		require.Equal(t, before.IdempotencyKey, after.IdempotencyKey)
		require.Zero(t, after.Attempts, "a fresh round of attempts")
		require.Equal(t, jobs+1, b.jobCount(t, "failed"))

		// Retrying again is refused: it is pending now, with its job.
		_, err = b.run(t, "", "retry", before.ID.String(), "--reason", "again")
		require.Error(t, err)
		require.Equal(t, jobs+1, b.jobCount(t, "failed"))

		out, err = b.run(t, "", "show", before.IdempotencyKey)
		require.NoError(t, err)
		require.Regexp(t, `oncall@example\.com\s+retry\s+failed\s+pending\s+endpoint restored`, out)
	})

	t.Run("dry run changes nothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		out, err := b.run(t, "", "retry", "--state", "failed", "--reason", "r", "--dry-run")
		require.NoError(t, err)
		require.Equal(t, 1, strings.Count(out, "would change (dry run)"))
		require.Contains(t, out, "skipped: key window closed", "the dry run shows what a retry would refuse")
		require.Equal(t, outboxtype.StateFailed, b.effect(t, "failed").State)
		require.Equal(t, 1, b.jobCount(t, "failed"))
	})

	t.Run("bulk asks for confirmation", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.run(t, "", "retry", "--state", "failed", "--reason", "r")
		require.Equal(t, 2, cli.ExitCode(err), "no answer: %v", err)
		require.Equal(t, outboxtype.StateFailed, b.effect(t, "failed").State)

		out, err := b.run(t, "yes\n", "retry", "--state", "failed", "--reason", "r")
		require.NoError(t, err, out)
		require.Equal(t, outboxtype.StatePending, b.effect(t, "failed").State)
		require.Equal(t, outboxtype.StateFailed, b.effect(t, "failed_old_window").State, "past its key window: needs --force")
	})

	t.Run("near or past the key window needs --force and starts a new window", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := b.ids["failed_old_window"].String()
		before := b.effect(t, "failed_old_window")
		out, err := b.run(t, "", "retry", id, "--reason", "r")
		require.Equal(t, 1, cli.ExitCode(err))
		require.Contains(t, out, "key window closed")
		require.Contains(t, out, before.IdempotencyKey, "names the key to look up at the provider")
		require.Contains(t, out, "`outboxctl retry "+id+" --force`", "names the flag that overrides the refusal")
		require.Equal(t, outboxtype.StateFailed, b.effect(t, "failed_old_window").State)
		require.Equal(t, before.KeyWindowFrom, b.effect(t, "failed_old_window").KeyWindowFrom, "a refused retry changes nothing")

		out, err = b.run(t, "", "retry", id, "--reason", "checked at provider: never arrived", "--force", "--json")
		require.NoError(t, err)
		var chs []outboxtype.Change
		require.NoError(t, json.Unmarshal([]byte(out), &chs))
		require.True(t, chs[0].Applied)
		require.True(t, chs[0].RestartsKeyWindow)
		require.Contains(t, chs[0].Warning, "new key window")
		after := b.effect(t, "failed_old_window")
		require.Nil(t, after.KeyWindowFrom, "the next request starts a new window")
		require.Equal(t, before.FirstFiredAt, after.FirstFiredAt, "first_fired_at keeps the history")
	})

	t.Run("a redrive keeps the key window and the attempt history", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.db.Pool.Exec(context.Background(), `UPDATE `+b.db.Schema+`.side_effects SET attempts = 20, total_attempts = 20 WHERE id = $1`, b.ids["failed"])
		require.NoError(t, err)
		before := b.effect(t, "failed")
		_, err = b.run(t, "", "retry", before.ID.String(), "--reason", "endpoint restored")
		require.NoError(t, err)
		after := b.effect(t, "failed")
		require.Equal(t, outboxtype.StatePending, after.State)
		require.Equal(t, before.KeyWindowFrom, after.KeyWindowFrom, "the key window runs from the first request")
		require.Zero(t, after.Attempts, "a fresh round of attempts")
		require.Equal(t, 20, after.TotalAttempts)
		require.Equal(t, 1, after.Redrives)
		out, err := b.run(t, "", "show", before.ID.String())
		require.NoError(t, err)
		require.Regexp(t, `attempts\s+0 since the last redrive, 20 in all, 1 redrive`, out)
	})

	t.Run("at_most_once in doubt is not re-sent without --allow-duplicate", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.db.Pool.Exec(context.Background(), `UPDATE `+b.db.Schema+`.side_effects
			SET provider = 'sendgrid', in_doubt = true, last_error = 'in doubt: not re-sent: sendgrid HTTP 500' WHERE id = $1`, b.ids["failed"])
		require.NoError(t, err)
		id := b.ids["failed"].String()
		for _, extra := range [][]string{nil, {"--force"}} {
			out, err := b.run(t, "", append([]string{"retry", id, "--reason", "r"}, extra...)...)
			require.Equal(t, 1, cli.ExitCode(err), "%v", extra)
			require.Contains(t, out, "--allow-duplicate")
			require.Equal(t, outboxtype.StateFailed, b.effect(t, "failed").State)
		}
		out, err := b.run(t, "", "retry", id, "--reason", "customer asked for it again", "--allow-duplicate")
		require.NoError(t, err, out)
		require.Contains(t, out, "may get it twice")
		after := b.effect(t, "failed")
		require.Equal(t, outboxtype.StatePending, after.State)
		require.False(t, after.InDoubt, "the operator accepted the risk: the worker sends it")
		out, err = b.run(t, "", "show", id, "--json")
		require.NoError(t, err)
		require.Contains(t, out, `"clears_doubt": true`)
	})

	t.Run("fired needs --force and no running job", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := b.ids["fired_stale"].String()
		out, err := b.run(t, "", "retry", id, "--reason", "r")
		require.Equal(t, 1, cli.ExitCode(err))
		require.Contains(t, out, "cannot be retried unless forced")
		require.Contains(t, out, "`outboxctl retry "+id+" --force`")
		require.Equal(t, outboxtype.StateFired, b.effect(t, "fired_stale").State)
		// Its River job is running: a call may be in flight.
		out, err = b.run(t, "", "retry", id, "--reason", "worker host lost", "--force")
		require.Equal(t, 1, cli.ExitCode(err))
		require.Contains(t, out, "is running for it")
		require.Equal(t, outboxtype.StateFired, b.effect(t, "fired_stale").State)
		// Once River has rescued the job, a forced retry goes through.
		_, err = b.db.Pool.Exec(context.Background(), `UPDATE `+b.db.Schema+`.river_job SET state = 'retryable' WHERE args->>'effect_id' = $1::text`, id)
		require.NoError(t, err)
		_, err = b.run(t, "", "retry", id, "--reason", "worker host lost", "--force")
		require.NoError(t, err)
		e := b.effect(t, "fired_stale")
		require.Equal(t, outboxtype.StatePending, e.State)
		require.True(t, e.InDoubt, "the worker applies the in-doubt policy to the re-fire")
	})
}

func TestCancelAndConfirm(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.run(t, "", "cancel", b.ids["pending"].String(), "--reason", "order refunded by hand")
	require.NoError(t, err)
	require.Equal(t, outboxtype.StateCancelled, b.effect(t, "pending").State)

	_, err = b.run(t, "", "confirm", b.ids["confirmed"].String(), "--reason", "found in SendGrid's activity")
	require.Equal(t, 2, cli.ExitCode(err), "--ref is required for an email")
	require.ErrorContains(t, err, "--ref is required for sendgrid effect")
	out, err := b.run(t, "", "confirm", b.ids["failed"].String(), "--ref", "rcv-42", "--reason", "found in the receiver's log")
	require.NoError(t, err, out)
	e := b.effect(t, "failed")
	require.Equal(t, outboxtype.StateConfirmed, e.State)
	require.Equal(t, "rcv-42", *e.ProviderRef)

	out, err = b.run(t, "", "show", e.ID.String(), "--json")
	require.NoError(t, err)
	var shown struct {
		Effect outboxtype.Effect       `json:"effect"`
		Event  outboxtype.Event        `json:"event"`
		Jobs   []outboxtype.Job        `json:"jobs"`
		Audit  []outboxtype.AuditEntry `json:"audit"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &shown))
	require.Equal(t, "failed", shown.Event.AggregateID)
	require.Len(t, shown.Jobs, 1)
	require.Len(t, shown.Audit, 1)
	require.Equal(t, "confirm", shown.Audit[0].Action)
	require.Equal(t, "oncall@example.com", shown.Audit[0].Actor)
	require.Equal(t, "failed", shown.Audit[0].FromState)
	require.Equal(t, "confirmed", shown.Audit[0].ToState)
}

func TestStats(t *testing.T) {
	t.Parallel()
	b := setup(t)
	out, err := b.run(t, "", "stats", "--json", "--window", "24h")
	require.NoError(t, err)
	var st outboxtype.Stats
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	require.Equal(t, 86400.0, st.WindowSeconds, "the window in seconds, not nanoseconds")
	counts := map[string]int64{}
	for _, c := range st.Counts {
		counts[string(c.State)+"/"+c.Kind] = c.Count
	}
	require.Equal(t, map[string]int64{
		"pending/webhook.order_paid":   3, // pending, pending_nojob, retrying
		"fired/webhook.order_paid":     2,
		"failed/webhook.order_paid":    2,
		"confirmed/email.receipt":      1, // the 40-day-old one is outside the window
		"cancelled/webhook.order_paid": 1,
	}, counts)
	require.NotNil(t, st.OldestPending)
	require.NotNil(t, st.OldestFired)
	require.Equal(t, int64(1), st.Confirmed)
	require.InDelta(t, 2.0, st.LatencyP50, 0.01)

	out, err = b.run(t, "", "stats", "--window", "24h")
	require.NoError(t, err)
	require.Contains(t, out, "p50 2s")
	require.Contains(t, out, "Window: the last 24h0m0s")

	// --window all counts every row kept.
	out, err = b.run(t, "", "stats", "--window", "all", "--json")
	require.NoError(t, err)
	st = outboxtype.Stats{}
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	require.Equal(t, int64(2), st.Confirmed, "the 40-day-old one too")
	_, err = b.run(t, "", "stats", "--window", "forever")
	require.Equal(t, 2, cli.ExitCode(err))

	// An effect confirmed by hand is counted apart, not in the percentiles.
	_, err = b.run(t, "", "confirm", b.ids["failed"].String(), "--ref", "r1", "--reason", "seen at the receiver")
	require.NoError(t, err)
	out, err = b.run(t, "", "stats", "--window", "24h", "--json")
	require.NoError(t, err)
	st = outboxtype.Stats{}
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	require.Equal(t, int64(1), st.Confirmed, "by the dispatcher")
	require.Equal(t, int64(1), st.ConfirmedByHand)
	require.InDelta(t, 2.0, st.LatencyP99, 0.01, "the hand-confirmed one does not skew the percentiles")
}

func TestPurge(t *testing.T) {
	t.Parallel()
	b := setup(t)
	out, err := b.run(t, "", "purge", "--older-than", "720h", "--dry-run")
	require.NoError(t, err)
	require.Contains(t, out, "would delete 1 effects and 1 events")
	_, err = b.store.Get(context.Background(), b.db.Pool, b.ids["confirmed_old"])
	require.NoError(t, err, "dry run deleted nothing")

	_, err = b.run(t, "", "purge", "--older-than", "1h")
	require.Equal(t, 2, cli.ExitCode(err), "inside the key window needs --force")

	// Everything terminal goes; pending and fired stay, whatever their age.
	_, err = b.db.Pool.Exec(context.Background(), `UPDATE `+b.db.Schema+`.side_effects SET updated_at = now() - interval '60 days'`)
	require.NoError(t, err)
	out, err = b.run(t, "", "purge", "--older-than", "720h", "--yes")
	require.NoError(t, err)
	require.Contains(t, out, "deleted 5 effects")
	var states []string
	rows, err := b.db.Pool.Query(context.Background(), `SELECT DISTINCT state FROM `+b.db.Schema+`.side_effects ORDER BY 1`)
	require.NoError(t, err)
	states, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"fired", "pending"}, states)
}

func TestErrorsSayWhatToDo(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cases := []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"show", "not-an-id"}, 2, "neither an effect id"},
		{[]string{"show", uuid.NewString()}, 1, "outboxctl list"},
		{[]string{"retry", b.ids["failed"].String(), "--state", "failed", "--reason", "r"}, 2, "not both"},
		{[]string{"retry", "--reason", "r"}, 2, "give effect ids"},
		{[]string{"retry", b.ids["failed"].String()}, 2, "--reason is required"},
		{[]string{"list", "--state", "stuck"}, 2, "use pending, fired"},
		{[]string{"list", "--since", "1h", "--older-than", "2h"}, 2, "select nothing"},
		{[]string{"list", "--bogus"}, 2, "unknown flag"},
	}
	for _, tc := range cases {
		_, err := b.run(t, "", tc.args...)
		require.Error(t, err, tc.args)
		require.Equal(t, tc.code, cli.ExitCode(err), "%v: %v", tc.args, err)
		require.Contains(t, err.Error(), tc.msg, tc.args)
	}

	// An unmigrated schema and an unreachable database.
	cmd := newRootCmd(strings.NewReader(""))
	cmd.SetArgs([]string{"list", "--database-url", testdb.URL(), "--schema", "outboxd_no_such_schema"})
	cmd.SetOut(&bytes.Buffer{})
	err := cmd.ExecuteContext(context.Background())
	require.Equal(t, 1, cli.ExitCode(err))
	require.ErrorContains(t, err, "outboxctl migrate")

	cmd = newRootCmd(strings.NewReader(""))
	cmd.SetArgs([]string{"list", "--database-url", "postgres://postgres@127.0.0.1:1/test?connect_timeout=2"})
	cmd.SetOut(&bytes.Buffer{})
	err = cmd.ExecuteContext(context.Background())
	require.Equal(t, 1, cli.ExitCode(err))
	require.ErrorContains(t, err, "database unreachable")
}

func TestReceiverTextCannotDriveTheTerminal(t *testing.T) {
	t.Parallel()
	b := setup(t)
	hostile := "HTTP 500: \x1b]0;pwned\x07\x1b[2J\x1b[1A\u009b31m\r done \u202eadmin\u2066x\u2069"
	_, err := b.db.Pool.Exec(context.Background(), `UPDATE `+b.db.Schema+`.side_effects SET last_error = $2 WHERE id = $1`, b.ids["failed"], hostile)
	require.NoError(t, err)
	for _, args := range [][]string{{"list"}, {"show", b.ids["failed"].String()}, {"stuck", "--older-than", "1m"}, {"list", "--json"}, {"show", b.ids["failed"].String(), "--json"}} {
		out, err := b.run(t, "", args...)
		require.NoError(t, err, args)
		for _, c := range []string{"\x1b", "\x07", "\r", "\u009b", "\u202e", "\u2066", "\u2069"} {
			require.NotContains(t, out, c, "%v prints a raw control character", args)
		}
		require.Contains(t, out, `\u001b`, args)
		require.Contains(t, out, `\u202e`, args, "a bidi override is shown, not obeyed")
	}
	out, err := b.run(t, "", "show", b.ids["failed"].String(), "--json")
	require.NoError(t, err)
	var shown struct {
		Effect outboxtype.Effect `json:"effect"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &shown), "JSON output stays parseable")
	require.Equal(t, hostile, deref(shown.Effect.LastError), "and carries the text exactly")
}

// TestShowListsEveryAttempt: show lists every attempt in order, also those
// with no row of their own (the one in flight, one cut off by a crash, the
// confirmed one), and a completed River job's errors read as its earlier
// runs', not as a second fire.
func TestShowListsEveryAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	s := b.db.Schema
	_, err := b.db.Pool.Exec(ctx, `UPDATE `+s+`.side_effects SET total_attempts = 3, attempts = 3 WHERE id = $1`, b.ids["fired_stale"])
	require.NoError(t, err)
	require.NoError(t, b.store.RecordAttempt(ctx, b.db.Pool, outboxtype.Attempt{EffectID: b.ids["fired_stale"], Attempt: 2,
		StartedAt: time.Now().Add(-30 * time.Minute), Duration: 30 * time.Second, Outcome: "in_doubt", Error: "no response: timeout", Host: "hooks.example.com"}))
	out, err := b.run(t, "", "show", b.ids["fired_stale"].String())
	require.NoError(t, err, out)
	require.Contains(t, out, "what now: not in flight: fired ", "show says what to do first, as stuck does")
	require.Regexp(t, `(?m)^\S+\s+enqueued\s+pending`, out)
	require.Regexp(t, `(?s)enqueued.*\n-\s+attempt 1\s+no outcome recorded\s+interrupted.*\n\S+\s+attempt 2\s+in_doubt after 30s\s+hooks.example.com: no response: timeout.*\n\S+\s+attempt 3\s+no answer yet`, out)

	_, err = b.db.Pool.Exec(ctx, `UPDATE `+s+`.side_effects SET total_attempts = 1 WHERE id = $1`, b.ids["confirmed"])
	require.NoError(t, err)
	_, err = b.db.Pool.Exec(ctx, `UPDATE `+s+`.river_job SET errors = ARRAY['{"at": "2026-11-25T10:00:00Z", "attempt": 1, "error": "snoozed behind the gate", "trace": ""}'::jsonb]
		WHERE args->>'effect_id' = $1::text`, b.ids["confirmed"])
	require.NoError(t, err)
	out, err = b.run(t, "", "show", b.ids["confirmed"].String())
	require.NoError(t, err, out)
	require.Regexp(t, `(?m)^\S+\s+attempt 1\s+confirmed after 2s\s+the provider acknowledged it: ref msg_1`, out)
	require.Contains(t, out, "what now: Done: the provider acknowledged it")
	require.Contains(t, out, "1 before it completed, the last: snoozed behind the gate")
}

// TestABrokersKeyWindowIsTheOneItsDispatcherRecorded: outboxctl's flags
// name no key window for a NATS effect; the one its dispatcher recorded
// (the stream's duplicate window, 2h here) drives the diagnoses, so an
// effect first sent 1h50m ago is shown closing its window.
func TestABrokersKeyWindowIsTheOneItsDispatcherRecorded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	_, err := b.db.Pool.Exec(ctx, `UPDATE `+b.db.Schema+`.side_effects SET provider = 'nats', kind = 'nats.order_paid',
		first_fired_at = now() - interval '110 minutes', key_window_from = now() - interval '110 minutes' WHERE id = $1`, b.ids["window_closing"])
	require.NoError(t, err)
	_, err = b.db.Pool.Exec(ctx, `INSERT INTO `+b.db.Schema+`.outboxd_provider_guarantees (provider, key_window_ms, key_window_margin_ms, in_doubt, reported_by)
		VALUES ('nats', 7200000, 10000, 'at_least_once', 'outboxd-1')`)
	require.NoError(t, err)

	out, err := b.run(t, "", "show", b.ids["window_closing"].String())
	require.NoError(t, err)
	require.Regexp(t, `key_window_from\s+\S+ \(no re-fire after \S+, in 10m0s\)`, out)
	require.Contains(t, b.stuckWhy(t)[b.ids["window_closing"]], "key window closes in")
}

// TestStuckSaysWhenItsListIsCut: a list cut at --limit says so and where
// the rest is; a whole list says nothing more.
func TestStuckSaysWhenItsListIsCut(t *testing.T) {
	t.Parallel()
	b := setup(t)
	out, err := b.run(t, "", "stuck", "--limit", "2")
	require.NoError(t, err)
	require.Contains(t, out, "the 2 oldest shown; there are more: `outboxctl stuck --by-cause`")
	out, err = b.run(t, "", "stuck")
	require.NoError(t, err)
	require.NotContains(t, out, "there are more")
}

// TestStuckSaysWhatElseNeedsYouFirst: above its list, stuck names what
// else asks for a person, the most urgent first, each with the command
// for it, as the web view's overview does: here an endpoint outboxd
// disabled, another failing every delivery for two hours, and a limit
// key paused with an effect waiting. With none of them, nothing is added.
func TestStuckSaysWhatElseNeedsYouFirst(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	out, err := b.run(t, "", "stuck")
	require.NoError(t, err, out)
	require.NotContains(t, out, "needs you")

	s := b.db.Schema
	for _, q := range []string{
		`INSERT INTO ` + s + `.outboxd_endpoints (id, url, event_types, disabled_at, disabled_reason)
			VALUES (gen_random_uuid(), 'https://dead.example/in', '{order.*}', now(), 'every delivery failed')`,
		`INSERT INTO ` + s + `.outboxd_endpoints (id, url, event_types, failing_since)
			VALUES (gen_random_uuid(), 'https://flaky.example/in', '{order.*}', now() - interval '2 hours')`,
		`INSERT INTO ` + s + `.outboxd_limits (key, rate_source, paused_until) VALUES ('webhook:hooks.example.com', 'default', now() + interval '1 hour')`,
	} {
		_, err := b.db.Pool.Exec(ctx, q)
		require.NoError(t, err)
	}
	out, err = b.run(t, "", "stuck")
	require.NoError(t, err, out)
	lines := strings.Split(out, "\n")
	require.Equal(t, "needs you, most urgent first:", lines[0], out)
	require.Equal(t, "  1 endpoint(s) disabled: their deliveries wait until enabled: outboxctl endpoints list", lines[1])
	require.Regexp(t, `^  1 endpoint\(s\) failing every delivery, the first since 2h0m\d+s ago: .*: outboxctl endpoints list$`, lines[2])
	require.Regexp(t, `^  1 limit key\(s\) holding back \d+ effect\(s\): .*: outboxctl limits$`, lines[3])
	require.Regexp(t, `^ID\s+KIND`, lines[5], "then the stuck effects")
}
