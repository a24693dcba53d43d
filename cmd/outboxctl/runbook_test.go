package main

import (
	"context"
	"encoding/json"
	"net/netip"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/cli"
	"github.com/outboxd/outboxd/internal/engine"
	"github.com/outboxd/outboxd/internal/fakes"
	"github.com/outboxd/outboxd/internal/testdb"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/sendgrid"
	"github.com/outboxd/outboxd/providers/webhook"
	"github.com/outboxd/outboxd/sideeffects"
	"github.com/outboxd/outboxd/sideeffects/sideeffectstest"
)

// The runbook in docs/outboxctl.md, performed: for each failure reason a
// dispatcher records, the safe action, on a real dispatcher with recording
// providers, checking the provider never sees a second request.

type runbook struct {
	*testBundle
	recv *fakes.Receiver
	sg   *fakes.FakeSendGrid
	ob   *outbox.Outbox
}

const runbookSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

func startRunbook(t *testing.T) *runbook {
	t.Helper()
	r := newRunbook(t)
	r.start(t)
	return r
}

// newRunbook sets up the schema, the recording providers and the outbox;
// no dispatcher runs until start.
func newRunbook(t *testing.T) *runbook {
	t.Helper()
	db := testdb.New(t)
	recv, err := fakes.NewReceiver(runbookSecret)
	require.NoError(t, err)
	t.Cleanup(recv.Close)
	sg := fakes.NewFakeSendGrid()
	t.Cleanup(sg.Close)
	ob, err := outbox.New(outbox.Config{Jobs: outbox.JobsInTransaction, Schema: db.Schema, WebhookAllowedNetworks: loopback})
	require.NoError(t, err)
	return &runbook{testBundle: bundleOf(db), recv: recv, sg: sg, ob: ob}
}

var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}

// start runs a dispatcher, as `outboxd run` does, until the test ends.
func (r *runbook) start(t *testing.T) {
	t.Helper()
	wh, err := webhook.New(webhook.Config{Secret: runbookSecret, AllowedNetworks: loopback, Timeout: 2 * time.Second})
	require.NoError(t, err)
	sgp, err := sendgrid.New(sendgrid.Config{APIKey: "SG.runbook", APIHost: r.sg.URL, Timeout: 2 * time.Second})
	require.NoError(t, err)
	sideeffectstest.Start(t, r.db.Pool, sideeffects.Config{Schema: r.db.Schema, Providers: []providers.Provider{wh, sgp}, Retry: outboxtype.RetryPolicy{MaxAttempts: 2}, SweepInterval: time.Second})
}

func (r *runbook) enqueue(t *testing.T, name string, e outbox.Effect) uuid.UUID {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, pgx.BeginFunc(ctx, r.db.Pool, func(tx pgx.Tx) error {
		res, err := r.ob.Enqueue(ctx, tx, outbox.Event{ID: uuid.New(), Type: "order.paid"}, e)
		if err == nil {
			r.ids[name] = res.Effects[0].ID
		}
		return err
	}))
	return r.ids[name]
}

func (r *runbook) waitState(t *testing.T, name string, state outboxtype.State) *outboxtype.Effect {
	t.Helper()
	var e *outboxtype.Effect
	require.Eventually(t, func() bool {
		e = r.effect(t, name)
		return e.State == state
	}, 30*time.Second, 10*time.Millisecond, "%s: want %s", name, state)
	return e
}

// settle waits until the effect has no live River job: nothing more will
// be sent for it unless someone acts.
func (r *runbook) settle(t *testing.T, name string) {
	t.Helper()
	require.Eventually(t, func() bool {
		var live int
		err := r.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM `+r.db.Schema+`.river_job
			WHERE args->>'effect_id' = $1 AND state IN ('available', 'pending', 'retryable', 'running', 'scheduled')`, r.ids[name].String()).Scan(&live)
		return err == nil && live == 0
	}, 30*time.Second, 10*time.Millisecond)
}

func mail() outbox.Effect {
	return outbox.Effect{Kind: "email.receipt", Provider: "sendgrid", Payload: json.RawMessage(
		`{"from": {"email": "shop@example.com"}, "to": [{"email": "ada@example.com"}], "subject": "Receipt", "text": "Thanks"}`)}
}

func TestRunbook(t *testing.T) {
	t.Parallel()

	// "in doubt: not re-sent": SendGrid answered 500 after accepting the
	// mail. Found in the Activity Feed: confirm it. A retry without
	// --allow-duplicate is refused. No second mail either way.
	t.Run("in doubt: confirm after finding it at the provider", func(t *testing.T) {
		t.Parallel()
		r := startRunbook(t)
		r.sg.Respond(fakes.Status(500))
		id := r.enqueue(t, "mail", mail()).String()
		r.waitState(t, "mail", outboxtype.StateFailed)
		r.settle(t, "mail")
		out, err := r.run(t, "", "retry", id, "--reason", "customer says nothing arrived")
		require.Equal(t, 1, cli.ExitCode(err), out)
		out, err = r.run(t, "", "confirm", id, "--ref", "msg_from_activity_feed", "--reason", "in the Activity Feed")
		require.NoError(t, err, out)
		r.waitState(t, "mail", outboxtype.StateConfirmed)
		r.settle(t, "mail")
		require.Len(t, r.sg.Requests(), 1, "one mail")
	})

	// A permanent refusal (410 Gone): cancel, or acknowledge it as correctly
	// failed. The receiver sees one request.
	for _, action := range []string{"cancel", "acknowledge"} {
		t.Run("endpoint gone: "+action, func(t *testing.T) {
			t.Parallel()
			r := startRunbook(t)
			r.recv.Respond("/gone", fakes.Status(410))
			id := r.enqueue(t, "hook", outbox.EffectOf("webhook.order_paid", webhook.Payload{URL: r.recv.URL + "/gone", Body: json.RawMessage(`{}`)})).String()
			r.waitState(t, "hook", outboxtype.StateFailed)
			r.settle(t, "hook")
			out, err := r.run(t, "", action, id, "--reason", "endpoint retired")
			require.NoError(t, err, out)
			out, err = r.run(t, "", "stuck", "--json")
			require.NoError(t, err)
			require.NotContains(t, out, id, "out of stuck")
			r.settle(t, "hook")
			require.Len(t, r.recv.Deliveries(), 1, "one request")
		})
	}

	// Retries exhausted on answers that prove the provider did nothing
	// (409; a 429 is not an attempt): retry once the cause is fixed. The
	// re-send carries the same key, and the receiver acts once.
	t.Run("retries exhausted: retry once fixed", func(t *testing.T) {
		t.Parallel()
		r := startRunbook(t)
		r.recv.Respond("/busy", fakes.Status(409), fakes.Status(409))
		id := r.enqueue(t, "hook", outbox.EffectOf("webhook.order_paid", webhook.Payload{URL: r.recv.URL + "/busy", Body: json.RawMessage(`{}`)})).String()
		e := r.waitState(t, "hook", outboxtype.StateFailed)
		require.Contains(t, deref(e.LastError), "retries exhausted")
		r.settle(t, "hook")
		out, err := r.run(t, "", "retry", id, "--reason", "receiver fixed")
		require.NoError(t, err, out)
		r.waitState(t, "hook", outboxtype.StateConfirmed)
		ds := r.recv.Deliveries()
		require.Len(t, ds, 3, "two refused, one accepted")
		for _, d := range ds {
			require.Equal(t, e.IdempotencyKey, d.ID, "every request with the effect's key")
		}
	})

	// "key window expired: reconcile at provider": the receiver may have
	// forgotten the key. A plain retry is refused; found at the receiver:
	// confirm. Nothing is re-sent past the window.
	t.Run("key window expired: confirm after checking", func(t *testing.T) {
		t.Parallel()
		r := startRunbook(t)
		// A 500 (a 503 would also pause the receiver's key) asking for an hour.
		r.recv.Respond("/slow", fakes.Status(500, "Retry-After", "3600"))
		id := r.enqueue(t, "hook", outbox.EffectOf("webhook.order_paid", webhook.Payload{URL: r.recv.URL + "/slow", Body: json.RawMessage(`{}`)})).String()
		require.Eventually(t, func() bool { return len(r.recv.Deliveries()) == 1 && r.effect(t, "hook").LastError != nil },
			30*time.Second, 10*time.Millisecond)
		// A day later, as far as the key window is concerned, and the job
		// (waiting an hour for Retry-After) due now.
		_, err := r.db.Pool.Exec(context.Background(), `UPDATE `+r.db.Schema+`.side_effects SET key_window_from = now() - interval '30 hours' WHERE id = $1`, id)
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			tag, err := r.db.Pool.Exec(context.Background(), `UPDATE `+r.db.Schema+`.river_job SET state = 'available', scheduled_at = now()
				WHERE args->>'effect_id' = $1 AND state = 'retryable'`, id)
			return err == nil && tag.RowsAffected() == 1
		}, 30*time.Second, 10*time.Millisecond)
		e := r.waitState(t, "hook", outboxtype.StateFailed)
		require.Contains(t, deref(e.LastError), outboxtype.ReasonKeyWindow)
		r.settle(t, "hook")
		out, err := r.run(t, "", "retry", id, "--reason", "try again")
		require.Equal(t, 1, cli.ExitCode(err), out)
		require.Contains(t, out, "--force")
		out, err = r.run(t, "", "confirm", id, "--ref", "rcv-log-77", "--reason", "in the receiver's log")
		require.NoError(t, err, out)
		r.settle(t, "hook")
		require.Len(t, r.recv.Deliveries(), 1, "never re-sent past the window")
		// Not found at the receiver instead: a forced retry fires it again,
		// with the same key, under a new key window.
		_, err = r.db.Pool.Exec(context.Background(), `UPDATE `+r.db.Schema+`.side_effects
			SET state = 'failed', last_error = $2 WHERE id = $1`, id, outboxtype.ReasonKeyWindow)
		require.NoError(t, err)
		r.recv.Respond("/slow") // answers 2xx from now on
		out, err = r.run(t, "", "retry", id, "--force", "--reason", "not in the receiver's log")
		require.NoError(t, err, out)
		r.waitState(t, "hook", outboxtype.StateConfirmed)
		ds := r.recv.Deliveries()
		require.Len(t, ds, 2)
		require.Equal(t, ds[0].ID, ds[1].ID, "the same key")
	})

	// Fired beyond the crash-recovery bound: the process died mid-call and
	// no outboxd has run since. stuck says to start one (or to look the key
	// up and confirm); an outboxd that starts rescues the job at once and
	// re-fires it with the same key, not after --rescue-after from its start.
	t.Run("fired beyond the crash-recovery bound: start outboxd", func(t *testing.T) {
		t.Parallel()
		r := newRunbook(t)
		id := r.enqueue(t, "charge", outbox.EffectOf("webhook.order_paid", webhook.Payload{URL: r.recv.URL + "/orders", Body: json.RawMessage(`{}`)}))
		s := r.db.Schema
		for _, sql := range []string{
			`UPDATE ` + s + `.side_effects SET state = 'fired', attempts = 1, total_attempts = 1, in_doubt = true,
				fired_at = now() - interval '20 minutes', first_fired_at = now() - interval '20 minutes',
				key_window_from = now() - interval '20 minutes', updated_at = now() - interval '20 minutes' WHERE id = $1`,
			`UPDATE ` + s + `.river_job SET state = 'running', attempt = 1, attempted_at = now() - interval '20 minutes',
				attempted_by = ARRAY['killed-host'] WHERE args->>'effect_id' = $1::text`,
		} {
			tag, err := r.db.Pool.Exec(context.Background(), sql, id)
			require.NoError(t, err, sql)
			require.EqualValues(t, 1, tag.RowsAffected(), sql)
		}
		out, err := r.run(t, "", "stuck")
		require.NoError(t, err, out)
		require.Contains(t, out, "beyond the crash-recovery bound")
		require.Contains(t, out, "It rescues the job within seconds")
		require.Contains(t, out, r.effect(t, "charge").IdempotencyKey, "names the key to look up")

		r.start(t)
		e := r.waitState(t, "charge", outboxtype.StateConfirmed)
		r.settle(t, "charge")
		ds := r.recv.Deliveries()
		require.Len(t, ds, 1, "re-fired once")
		require.Equal(t, e.IdempotencyKey, ds[0].ID, "with the key of the first attempt")
		require.Equal(t, 2, e.TotalAttempts, "the killed attempt and the re-fire")
	})

	// "cannot be dispatched": a row whose provider no queue serves. Fix the
	// row, then retry: delivered once.
	t.Run("cannot be dispatched: fix the row, then retry", func(t *testing.T) {
		t.Parallel()
		r := startRunbook(t)
		good := r.enqueue(t, "template", outbox.EffectOf("webhook.template", webhook.Payload{URL: r.recv.URL + "/orders", Body: json.RawMessage(`{}`)}))
		r.waitState(t, "template", outboxtype.StateConfirmed)
		s := r.db.Schema
		bad := uuid.New()
		r.ids["bad"] = bad
		for _, sql := range []string{
			`ALTER TABLE ` + s + `.side_effects DROP CONSTRAINT side_effects_provider_queue_name`,
			`INSERT INTO ` + s + `.side_effects (id, source_id, kind, provider, payload, updated_at)
				SELECT '` + bad.String() + `', source_id, 'webhook.by_hand', 'Webhook', payload, now() - interval '1 hour'
				FROM ` + s + `.side_effects WHERE id = '` + good.String() + `'`,
		} {
			_, err := r.db.Pool.Exec(context.Background(), sql)
			require.NoError(t, err, sql)
		}
		n, err := engine.Sweep(context.Background(), r.store, r.db.Pool, riverClient(t, r.db.Pool, s), time.Now())
		require.NoError(t, err)
		require.Zero(t, n)
		e := r.waitState(t, "bad", outboxtype.StateFailed)
		require.Contains(t, deref(e.LastError), outboxtype.ReasonUnqueueable)
		_, err = r.db.Pool.Exec(context.Background(), `UPDATE `+s+`.side_effects SET provider = 'webhook' WHERE id = $1`, bad)
		require.NoError(t, err)
		out, err := r.run(t, "", "retry", bad.String(), "--reason", "provider name fixed")
		require.NoError(t, err, out)
		r.waitState(t, "bad", outboxtype.StateConfirmed)
		r.settle(t, "bad")
		require.Len(t, r.recv.ByID()[e.IdempotencyKey], 1, "delivered once")
	})
}

// riverClient is an insert-only River client for the sweeper.
func riverClient(t *testing.T, pool *pgxpool.Pool, schema string) *river.Client[pgx.Tx] {
	t.Helper()
	c, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Schema: schema})
	require.NoError(t, err)
	return c
}

// TestAnEffectIsFoundByItsProviderReference: the id SendGrid's activity or
// Stripe's dashboard shows (here SendGrid's X-Message-Id, and the
// sg_message_id of its events) names the effect in show, reconcile and the
// actions; a reference two effects share is refused with both ids.
func TestAnEffectIsFoundByItsProviderReference(t *testing.T) {
	t.Parallel()
	r := startRunbook(t)
	r.enqueue(t, "first", mail())
	r.enqueue(t, "second", mail())
	first, second := r.waitState(t, "first", outboxtype.StateConfirmed), r.waitState(t, "second", outboxtype.StateConfirmed)
	require.NotNil(t, first.ProviderRef)
	require.NotNil(t, second.ProviderRef)
	require.NotEqual(t, *first.ProviderRef, *second.ProviderRef)

	for _, ref := range []string{*second.ProviderRef, *second.ProviderRef + ".filterdrecv-p3mdw1-756b745b58-kmzbl-18-5F5FC76C-9.0"} {
		out, err := r.run(t, "", "show", ref)
		require.NoError(t, err, out)
		require.Contains(t, out, second.ID.String(), ref)
		require.NotContains(t, out, first.ID.String(), ref)
	}

	// An operator confirmed an in-doubt mail with the wrong message id:
	// two effects carry it now, and a command naming it asks which.
	r.sg.Respond(fakes.Status(500))
	doubt := r.enqueue(t, "doubt", mail()).String()
	r.waitState(t, "doubt", outboxtype.StateFailed)
	r.settle(t, "doubt")
	out, err := r.run(t, "", "confirm", doubt, "--ref", *first.ProviderRef, "--reason", "in the Activity Feed")
	require.NoError(t, err, out)
	out, err = r.run(t, "", "show", *first.ProviderRef)
	require.Equal(t, 2, cli.ExitCode(err), out)
	require.ErrorContains(t, err, "2 effects have the provider reference")
	require.ErrorContains(t, err, first.ID.String())
	require.ErrorContains(t, err, doubt)

	out, err = r.run(t, "", "show", "pi_3NqXj2LkdIwHu7ixUNKNOWN")
	require.Equal(t, 2, cli.ExitCode(err), out)
	require.ErrorContains(t, err, "nor the provider reference of an effect")
}
