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

	"github.com/jackc/pgx/v5/pgxpool"
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
gets 422), dispatch the effects, and print each effect's path
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

	pv, err := newDemoProviders()
	if err != nil {
		return err
	}
	defer pv.close()
	recv, wh, st, sg, sgFake := pv.recv, pv.wh, pv.st, pv.sg, pv.sgFake
	loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	rec := &recorder{fires: map[string][]fire{}}
	ob, err := outbox.New(outbox.Config{Schema: schema, WebhookAllowedNetworks: loopback})
	if err != nil {
		return err
	}

	fmt.Fprintf(out, "outboxd demo in schema %s\n", schema)
	fmt.Fprintf(out, "  webhook:  local receiver %s, verifying every signature\n", recv.URL)
	fmt.Fprintf(out, "  stripe:   %s\n", pv.stripeWhat)
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

	orders := []demoOrder{
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

	effects, err := placeOrders(ctx, out, api, orders)
	if err != nil {
		return err
	}

	// The client retries after a timeout: the stored response comes back,
	// nothing runs again. The same key with another body is refused.
	if err := retryOrder(ctx, out, pool, schema, api, orders[0]); err != nil {
		return err
	}

	op, err := sideeffects.NewOperator(pool, sideeffects.OperatorConfig{Schema: schema})
	if err != nil {
		return err
	}
	final, err := waitTerminal(ctx, op, effects)
	if err != nil {
		return err
	}
	events, err := closeLoop(ctx, pool, schema, op, effects, final)
	if err != nil {
		return err
	}

	confirmed := report(out, effects, final, rec, events, recv, sgFake)
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

// demoOrder is one order the demo places.
type demoOrder struct {
	id, path string
	amount   int
	capture  bool
}

func (o demoOrder) body() string {
	return fmt.Sprintf(`{"id": %q, "amount": %d, "path": %q, "capture": %t}`, o.id, o.amount, o.path, o.capture)
}

// placeOrders posts each order to the application's endpoint and returns
// the effects each committed with.
func placeOrders(ctx context.Context, out io.Writer, api string, orders []demoOrder) ([]demoEffect, error) {
	var effects []demoEffect
	for _, o := range orders {
		a, err := postOrder(ctx, api, "key-"+o.id, o.body())
		if err != nil {
			return nil, err
		}
		if a.status != http.StatusCreated {
			return nil, fmt.Errorf("POST /orders %s: HTTP %d: %s", o.id, a.status, a.body)
		}
		committed := time.Now()
		var res orderCreated
		if err := json.Unmarshal(a.body, &res); err != nil {
			return nil, fmt.Errorf("POST /orders %s: %w", o.id, err)
		}
		kinds := make([]string, len(res.Effects))
		for i, e := range res.Effects {
			kinds[i] = e.Kind
			effects = append(effects, demoEffect{EffectResult: e, order: o.id, committed: committed})
		}
		fmt.Fprintf(out, "POST /orders (Idempotency-Key key-%s): HTTP %d, order committed with event %s and effects %s\n", o.id, a.status, res.EventID, strings.Join(kinds, ", "))
	}
	return effects, nil
}

// retryOrder posts o again with the same key, as a client retrying after a
// timeout, and counts the rows before and after; then with another body.
func retryOrder(ctx context.Context, out io.Writer, pool *pgxpool.Pool, schema, api string, o demoOrder) error {
	counts := func() (rows [3]int, err error) {
		err = pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+schema+`.orders), (SELECT count(*) FROM `+schema+`.outbox_events),
			(SELECT count(*) FROM `+schema+`.side_effects)`).Scan(&rows[0], &rows[1], &rows[2])
		return rows, err
	}
	before, err := counts()
	if err != nil {
		return err
	}
	a, err := postOrder(ctx, api, "key-"+o.id, o.body())
	if err != nil {
		return err
	}
	after, err := counts()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "retried POST /orders %s with the same key: HTTP %d, %s: %s; orders, events, effects: %v before, %v after\n",
		o.id, a.status, idempotency.ReplayedHeader, a.replayed, before, after)
	a, err = postOrder(ctx, api, "key-"+o.id, strings.Replace(o.body(), fmt.Sprint(o.amount), "1", 1))
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "same key, changed amount: HTTP %d %s\n\n", a.status, strings.TrimSpace(string(a.body)))
	return nil
}

// waitTerminal waits until every effect has reached a terminal state.
func waitTerminal(ctx context.Context, op *sideeffects.Operator, effects []demoEffect) ([]*outboxtype.Effect, error) {
	deadline := time.Now().Add(30 * time.Second)
	final := make([]*outboxtype.Effect, len(effects))
	for i, e := range effects {
		for {
			got, err := op.Get(ctx, e.ID)
			if err != nil {
				return nil, err
			}
			if got.State.Terminal() {
				final[i] = got
				break
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("effect %s (%s) still %s after 30s", e.ID, e.Kind, got.State)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return final, nil
}

// closeLoop has SendGrid's signed Event Webhook report each parked mail
// processed; outboxd's events endpoint confirms it. It returns what to
// print, and updates final.
func closeLoop(ctx context.Context, pool *pgxpool.Pool, schema string, op *sideeffects.Operator, effects []demoEffect, final []*outboxtype.Effect) ([]string, error) {
	var events []string
	for i, f := range final {
		if f.State != outboxtype.StateFailed || f.Provider != sendgrid.Name {
			continue
		}
		events = append(events, fmt.Sprintf("%s %s: parked after SendGrid answered 500 (%s)", effects[i].order, f.Kind, deref(f.LastError)))
		line, err := demoSendGridEvent(ctx, pool, schema, f)
		if err != nil {
			return nil, err
		}
		events = append(events, line)
		if final[i], err = op.Get(ctx, f.ID); err != nil {
			return nil, err
		}
	}
	return events, nil
}

// report prints each effect's path, the provider events and what the
// receivers saw, and returns how many effects ended confirmed.
func report(out io.Writer, effects []demoEffect, final []*outboxtype.Effect, rec *recorder, events []string,
	recv *fakes.Receiver, sgFake *fakes.FakeSendGrid) int {
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
	return confirmed
}

// demoProviders are the three providers the demo dispatches with, each
// talking to a local server: a webhook receiver verifying signatures,
// stripe-mock (or a recording fake Stripe) and a fake SendGrid.
type demoProviders struct {
	recv       *fakes.Receiver
	sgFake     *fakes.FakeSendGrid
	wh         *webhook.Provider
	st         *stripe.Provider
	sg         *sendgrid.Provider
	stripeWhat string
	closers    []func()
}

func (pv *demoProviders) close() {
	for _, c := range pv.closers {
		c()
	}
}

func newDemoProviders() (pv *demoProviders, err error) {
	pv = &demoProviders{}
	defer func() {
		if err != nil {
			pv.close()
		}
	}()
	var secretBytes [24]byte
	_, _ = rand.Read(secretBytes[:])
	secret := "whsec_" + base64.StdEncoding.EncodeToString(secretBytes[:])
	if pv.recv, err = fakes.NewReceiver(secret); err != nil {
		return nil, err
	}
	pv.closers = append(pv.closers, pv.recv.Close)
	pv.recv.Respond("/flaky", fakes.Status(500))

	loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	if pv.wh, err = webhook.New(webhook.Config{Secret: secret, AllowedNetworks: loopback, Timeout: 5 * time.Second}); err != nil {
		return nil, err
	}
	stripeBase, stripeWhat, stopStripe := demoStripe()
	pv.stripeWhat = stripeWhat
	pv.closers = append(pv.closers, stopStripe)
	if pv.st, err = stripe.New(stripe.Config{APIKey: "sk_test_123", APIBase: stripeBase, Timeout: 5 * time.Second}); err != nil {
		return nil, err
	}
	pv.sgFake = fakes.NewFakeSendGrid()
	pv.closers = append(pv.closers, pv.sgFake.Close)
	// SendGrid accepts the first mail but answers 500: in doubt, so it is
	// not re-sent (at_most_once); its signed processed event confirms it.
	pv.sgFake.Respond(fakes.Status(500))
	if pv.sg, err = sendgrid.New(sendgrid.Config{APIKey: "SG.outboxd_demo", APIHost: pv.sgFake.URL, Timeout: 5 * time.Second}); err != nil {
		return nil, err
	}
	return pv, nil
}
