package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/outboxd/outboxd/internal/cli"
	"github.com/outboxd/outboxd/internal/fakes"
	"github.com/outboxd/outboxd/migrations"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/outbox/idempotency"
	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/sendgrid"
	"github.com/outboxd/outboxd/providers/stripe"
	"github.com/outboxd/outboxd/providers/webhook"
	"github.com/outboxd/outboxd/sideeffects"
)

func newDemoCmd(g *globalConfig) *cobra.Command {
	var keep, serve bool
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Enqueue a few events locally and watch their effects confirmed",
		Long: `Run outboxd end to end against DATABASE_URL, in a fresh schema of its own:
start a local webhook receiver that verifies signatures, create orders through
POST /orders behind the Idempotency-Key middleware (each order, its event and
effects commit with the stored response; a retry replays it, a changed body
gets 409), dispatch the effects, and print each effect's path
pending -> fired -> confirmed with timings. One receiver endpoint fails once
with HTTP 500, to show a retry carrying the same webhook-id.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return demo(cmd.Context(), cmd.OutOrStdout(), g, keep, serve)
		},
	}
	cmd.Flags().BoolVar(&keep, "keep", false, "keep the demo schema afterwards for inspection")
	cmd.Flags().BoolVar(&serve, "serve", false, "keep the web view running after the demo, with actions enabled, until Ctrl-C")
	return cmd
}

type demoEffect struct {
	outbox.EffectResult
	order     string
	committed time.Time
}

func demo(ctx context.Context, out io.Writer, g *globalConfig, keep, serve bool) error {
	pool, err := cli.Connect(ctx, g.URL, 10)
	if err != nil {
		return err
	}
	defer pool.Close()

	schema, drop, err := migrations.Temporary(ctx, pool, "outboxd_demo")
	if err != nil {
		return err
	}
	if !keep {
		defer drop()
	}
	if _, err := pool.Exec(ctx, "CREATE TABLE "+schema+".orders (id text PRIMARY KEY, amount int NOT NULL, paid_at timestamptz)"); err != nil {
		return err
	}

	var secretBytes [24]byte
	_, _ = rand.Read(secretBytes[:])
	secret := "whsec_" + base64.StdEncoding.EncodeToString(secretBytes[:])
	recv, err := fakes.NewReceiver(secret)
	if err != nil {
		return err
	}
	defer recv.Close()
	recv.Respond("/flaky", fakes.Status(500))

	loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	wh, err := webhook.New(webhook.Config{Secret: secret, AllowedNetworks: loopback, Timeout: 5 * time.Second})
	if err != nil {
		return err
	}
	stripeBase, stripeWhat, stopStripe := demoStripe()
	defer stopStripe()
	st, err := stripe.New(stripe.Config{APIKey: "sk_test_123", APIBase: stripeBase, Timeout: 5 * time.Second})
	if err != nil {
		return err
	}
	sgFake := fakes.NewFakeSendGrid()
	defer sgFake.Close()
	// SendGrid accepts the first mail but answers 500: in doubt, so it is
	// not re-sent (at_most_once); its signed processed event confirms it.
	sgFake.Respond(fakes.Status(500))
	sg, err := sendgrid.New(sendgrid.Config{APIKey: "SG.outboxd_demo", APIHost: sgFake.URL, Timeout: 5 * time.Second})
	if err != nil {
		return err
	}
	rec := &recorder{fires: map[string][]fire{}}
	ob, err := outbox.New(outbox.Config{Schema: schema, WebhookAllowedNetworks: loopback})
	if err != nil {
		return err
	}

	fmt.Fprintf(out, "outboxd demo in schema %s\n", schema)
	fmt.Fprintf(out, "  webhook:  local receiver %s, verifying every signature\n", recv.URL)
	fmt.Fprintf(out, "  stripe:   %s\n", stripeWhat)
	fmt.Fprintf(out, "  sendgrid: local fake SendGrid %s (SendGrid has no test server)\n\n", sgFake.URL)

	// Start dispatching first, as a running outboxd would be.
	d, err := sideeffects.NewDispatcher(pool, sideeffects.Config{
		Schema:            schema,
		Providers:         []providers.Provider{rec.wrap(wh), rec.wrap(st), rec.wrap(sg)},
		Retry:             sideeffects.RetryPolicy{BaseDelay: 500 * time.Millisecond},
		FetchCooldown:     20 * time.Millisecond,
		FetchPollInterval: 200 * time.Millisecond,
		// The demo reports every outcome itself, the expected failures too.
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError + 4})),
	})
	if err != nil {
		return err
	}
	if err := d.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = d.Stop(stopCtx)
	}()

	// The web view, on loopback, for as long as the demo runs (--serve: until
	// Ctrl-C, with actions enabled).
	webURL, token, stopWeb, err := demoWebView(pool, schema, serve, map[string]providers.Guarantees{
		wh.Name(): wh.Guarantees(), st.Name(): st.Guarantees(), sg.Name(): sg.Guarantees()})
	if err != nil {
		return err
	}
	defer stopWeb()
	fmt.Fprintf(out, "  web view: %s (read-only; `outboxd demo --serve` keeps it up with actions)\n", webURL)

	orders := []struct {
		id, path string
		amount   int
		capture  bool
	}{
		{"ord_1001", "/orders", 4200, true},
		{"ord_1002", "/orders", 1999, false},
		{"ord_1003", "/flaky", 500, false},
	}
	// The application's endpoint: POST /orders behind the Idempotency-Key
	// middleware; the order, its event and effects, and the stored response
	// commit in one transaction.
	api, stopAPI, err := demoAPI(pool, schema, ob, recv.URL)
	if err != nil {
		return err
	}
	defer stopAPI()
	fmt.Fprintf(out, "  api:      POST %s/orders behind the Idempotency-Key middleware\n\n", api)

	var effects []demoEffect
	for _, o := range orders {
		body := fmt.Sprintf(`{"id": %q, "amount": %d, "path": %q, "capture": %t}`, o.id, o.amount, o.path, o.capture)
		a, err := postOrder(ctx, api, "key-"+o.id, body)
		if err != nil {
			return err
		}
		if a.status != http.StatusCreated {
			return fmt.Errorf("POST /orders %s: HTTP %d: %s", o.id, a.status, a.body)
		}
		committed := time.Now()
		var res orderCreated
		if err := json.Unmarshal(a.body, &res); err != nil {
			return fmt.Errorf("POST /orders %s: %w", o.id, err)
		}
		kinds := make([]string, len(res.Effects))
		for i, e := range res.Effects {
			kinds[i] = e.Kind
			effects = append(effects, demoEffect{EffectResult: e, order: o.id, committed: committed})
		}
		fmt.Fprintf(out, "POST /orders (Idempotency-Key key-%s): HTTP %d, order committed with event %s and effects %s\n", o.id, a.status, res.EventID, strings.Join(kinds, ", "))
	}

	// The client retries after a timeout: the stored response comes back,
	// nothing runs again. The same key with another body is refused.
	first := orders[0]
	body := fmt.Sprintf(`{"id": %q, "amount": %d, "path": %q, "capture": %t}`, first.id, first.amount, first.path, first.capture)
	counts := func() (rows [3]int, err error) {
		err = pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+schema+`.orders), (SELECT count(*) FROM `+schema+`.outbox_events),
			(SELECT count(*) FROM `+schema+`.river_job WHERE kind = $1)`, sideeffects.JobKind).Scan(&rows[0], &rows[1], &rows[2])
		return rows, err
	}
	before, err := counts()
	if err != nil {
		return err
	}
	a, err := postOrder(ctx, api, "key-"+first.id, body)
	if err != nil {
		return err
	}
	after, err := counts()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "retried POST /orders %s with the same key: HTTP %d, %s: %s; orders, events, dispatch jobs: %v before, %v after\n",
		first.id, a.status, idempotency.ReplayedHeader, a.replayed, before, after)
	a, err = postOrder(ctx, api, "key-"+first.id, strings.Replace(body, fmt.Sprint(first.amount), "1", 1))
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "same key, changed amount: HTTP %d %s\n\n", a.status, strings.TrimSpace(string(a.body)))

	op, err := sideeffects.NewOperator(pool, sideeffects.OperatorConfig{Schema: schema})
	if err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	final := make([]*outboxtype.Effect, len(effects))
	for i, e := range effects {
		for {
			got, err := op.Get(ctx, e.ID)
			if err != nil {
				return err
			}
			if got.State.Terminal() {
				final[i] = got
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("effect %s (%s) still %s after 30s", e.ID, e.Kind, got.State)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	// Close the loop: SendGrid's signed Event Webhook reports the parked
	// mail processed; outboxd's events endpoint confirms it.
	var events []string
	for i, f := range final {
		if f.State != outboxtype.StateFailed || f.Provider != sendgrid.Name {
			continue
		}
		events = append(events, fmt.Sprintf("%s %s: parked after SendGrid answered 500 (%s)", effects[i].order, f.Kind, deref(f.LastError)))
		line, err := demoSendGridEvent(ctx, pool, schema, f)
		if err != nil {
			return err
		}
		events = append(events, line)
		if final[i], err = op.Get(ctx, f.ID); err != nil {
			return err
		}
	}

	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ORDER\tEFFECT\tKEY\tPATH (time since commit)")
	confirmed := 0
	webhooks := 0
	for i, e := range effects {
		f := final[i]
		if f.State == outboxtype.StateConfirmed {
			confirmed++
		}
		if f.Provider == webhook.Name {
			webhooks++
		}
		ref := ""
		if f.ProviderRef != nil {
			ref = " ref " + *f.ProviderRef
		}
		fmt.Fprintf(tw, "%s\t%s\t%s…\t%s%s\n", e.order, e.Kind, e.Key[:12], path(e, f, rec.firesOf(e.ID)), ref)
	}
	_ = tw.Flush()

	if len(events) > 0 {
		fmt.Fprintln(out, "\nprovider events:")
		for _, l := range events {
			fmt.Fprintln(out, "  "+l)
		}
	}

	ds := recv.Deliveries()
	verified := 0
	for _, dl := range ds {
		if dl.Verified {
			verified++
		}
	}
	fmt.Fprintf(out, "\nwebhook receiver: %d requests, %d with valid signatures, %d distinct webhook-ids for %d webhook effects\n",
		len(ds), verified, len(recv.ByID()), webhooks)
	sgKeys := map[string]bool{}
	for _, r := range sgFake.Requests() {
		sgKeys[r.Key] = true
	}
	fmt.Fprintf(out, "sendgrid: %d mails, each carrying its effect's key in custom_args (%d distinct)\n", len(sgFake.Requests()), len(sgKeys))
	if confirmed != len(effects) {
		return errors.New("not every effect was confirmed")
	}
	fmt.Fprintf(out, "all %d effects confirmed\n", confirmed)
	if keep {
		fmt.Fprintf(out, "schema %s kept: SELECT * FROM %s.side_effects;\n", schema, schema)
	}
	if serve {
		fmt.Fprintf(out, "\nweb view: %s\nactions: any user name, password %s\nCtrl-C to stop\n", webURL, token)
		<-ctx.Done()
	}
	return nil
}
