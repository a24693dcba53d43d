package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/outboxd/outboxd/internal/cli"
	"github.com/outboxd/outboxd/internal/fakes"
	"github.com/outboxd/outboxd/internal/webui"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/outbox/idempotency"
	"github.com/outboxd/outboxd/outbox/outboxmigrate"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/sendgrid"
	"github.com/outboxd/outboxd/providers/stripe"
	"github.com/outboxd/outboxd/providers/webhook"
	"github.com/outboxd/outboxd/sideeffects"
	"github.com/outboxd/outboxd/sideeffects/providerevents"
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

// fire is one provider call the demo saw.
type fire struct {
	at      time.Time
	outcome string
}

// recorder notes when each effect was fired and how each attempt ended,
// for the demo's report.
type recorder struct {
	mu    sync.Mutex
	fires map[string][]fire
}

func (r *recorder) wrap(p providers.Provider) providers.Provider {
	return &recordingProvider{Provider: p, rec: r}
}

func (r *recorder) firesOf(id uuid.UUID) []fire {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]fire(nil), r.fires[id.String()]...)
}

type recordingProvider struct {
	providers.Provider
	rec *recorder
}

func (p *recordingProvider) Send(ctx context.Context, req providers.Request) (providers.Result, error) {
	start := time.Now()
	res, err := p.Provider.Send(ctx, req)
	outcome := "ok"
	if err != nil {
		outcome = err.Error()
	}
	p.rec.mu.Lock()
	p.rec.fires[req.EffectID] = append(p.rec.fires[req.EffectID], fire{at: start, outcome: outcome})
	p.rec.mu.Unlock()
	return res, err
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

	var b [4]byte
	_, _ = rand.Read(b[:])
	schema := "outboxd_demo_" + hex.EncodeToString(b[:])
	if _, err := outboxmigrate.Up(ctx, pool, schema); err != nil {
		return err
	}
	if !keep {
		defer pool.Exec(context.WithoutCancel(ctx), "DROP SCHEMA "+schema+" CASCADE") //nolint:errcheck
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
			(SELECT count(*) FROM `+schema+`.river_job WHERE kind = $1)`, sideeffects.DispatchArgs{}.Kind()).Scan(&rows[0], &rows[1], &rows[2])
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

	store := sideeffects.NewStore(schema)
	deadline := time.Now().Add(30 * time.Second)
	final := make([]*sideeffects.Effect, len(effects))
	for i, e := range effects {
		for {
			got, err := store.Get(ctx, pool, e.ID)
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
		if f.State != sideeffects.StateFailed || f.Provider != sendgrid.Name {
			continue
		}
		events = append(events, fmt.Sprintf("%s %s: parked after SendGrid answered 500 (%s)", effects[i].order, f.Kind, deref(f.LastError)))
		line, err := demoSendGridEvent(ctx, pool, schema, f)
		if err != nil {
			return err
		}
		events = append(events, line)
		if final[i], err = store.Get(ctx, pool, f.ID); err != nil {
			return err
		}
	}

	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ORDER\tEFFECT\tKEY\tPATH (time since commit)")
	confirmed := 0
	webhooks := 0
	for i, e := range effects {
		f := final[i]
		if f.State == sideeffects.StateConfirmed {
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

// demoWebView serves the web view of schema on a loopback port; with
// actions, an admin token is made up and returned.
func demoWebView(pool *pgxpool.Pool, schema string, actions bool, g map[string]providers.Guarantees) (url, token string, stop func(), err error) {
	op, err := sideeffects.NewOperator(pool, sideeffects.OperatorConfig{Schema: schema, Guarantees: g})
	if err != nil {
		return "", "", nil, err
	}
	if actions {
		var b [16]byte
		_, _ = rand.Read(b[:])
		token = hex.EncodeToString(b[:])
	}
	h, err := webui.New(webui.Config{Pool: pool, Schema: schema, Operator: op, AdminToken: token,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return "", "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln) //nolint:errcheck // ends with Close
	return "http://" + ln.Addr().String() + "/ui/", token, func() { _ = srv.Close() }, nil
}

// demoSendGridEvent posts SendGrid's signed processed event for effect f
// twice (SendGrid delivers at least once) to outboxd's provider events
// endpoint and reports what it did.
func demoSendGridEvent(ctx context.Context, pool *pgxpool.Pool, schema string, f *sideeffects.Effect) (string, error) {
	signer, err := fakes.NewSendGridEventSigner()
	if err != nil {
		return "", err
	}
	h, err := providerevents.New(pool, providerevents.Config{Schema: schema, SendGridPublicKey: signer.PublicKey(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return "", err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln) //nolint:errcheck // ends with Close
	defer srv.Close()
	body, err := json.Marshal([]map[string]any{fakes.SendGridEvent("sg_demo_processed", "processed", f.IdempotencyKey, "msg_demo_accepted", time.Now())})
	if err != nil {
		return "", err
	}
	var answers []string
	for range 2 {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+ln.Addr().String()+providerevents.SendGridPath, bytes.NewReader(body))
		if err != nil {
			return "", err
		}
		req.Header = signer.Headers(body)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return "", err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		answers = append(answers, fmt.Sprintf("HTTP %d %s", resp.StatusCode, strings.TrimSpace(string(b))))
	}
	return fmt.Sprintf("SendGrid's signed processed event, delivered twice: %s; %s -> the email is confirmed once, not re-sent",
		answers[0], answers[1]), nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// orderCreated is POST /orders' answer.
type orderCreated struct {
	EventID uuid.UUID             `json:"event_id"`
	Effects []outbox.EffectResult `json:"effects"`
}

// demoAPI serves POST /orders on a loopback port, behind the
// Idempotency-Key middleware, and returns its base URL.
func demoAPI(pool *pgxpool.Pool, schema string, ob *outbox.Outbox, receiver string) (string, func(), error) {
	mw, err := idempotency.New(pool, idempotency.Config{Schema: schema})
	if err != nil {
		return "", nil, err
	}
	create := func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			ID      string `json:"id"`
			Amount  int    `json:"amount"`
			Path    string `json:"path"`
			Capture bool   `json:"capture"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.ID == "" {
			http.Error(w, `{"error": "id and amount required"}`, http.StatusUnprocessableEntity)
			return
		}
		ctx := r.Context()
		tx, _ := idempotency.Tx(ctx)
		if _, err := tx.Exec(ctx, "INSERT INTO "+schema+".orders (id, amount, paid_at) VALUES ($1, $2, now())", in.ID, in.Amount); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		res, err := ob.Enqueue(ctx, tx, orderEvent(in.ID, in.Amount), orderEffects(receiver, in.ID, in.Path, in.Capture)...)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(orderCreated{EventID: res.EventID, Effects: res.Effects})
	}
	mux := http.NewServeMux()
	mux.Handle("POST /orders", mw.Transactional(http.HandlerFunc(create)))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln) //nolint:errcheck // ends with Close
	return "http://" + ln.Addr().String(), func() { _ = srv.Close() }, nil
}

type apiAnswer struct {
	status   int
	replayed string
	body     []byte
}

func postOrder(ctx context.Context, api, key, body string) (apiAnswer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, api+"/orders", strings.NewReader(body))
	if err != nil {
		return apiAnswer{}, err
	}
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return apiAnswer{}, fmt.Errorf("POST /orders: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return apiAnswer{status: resp.StatusCode, replayed: cmp.Or(resp.Header.Get(idempotency.ReplayedHeader), "absent"), body: b}, err
}

func orderEvent(id string, amount int) outbox.Event {
	return outbox.Event{
		ID:            outbox.EventID("order.paid", id),
		AggregateType: "order",
		AggregateID:   id,
		Type:          "order.paid",
		Payload:       json.RawMessage(fmt.Sprintf(`{"order": %q, "amount": %d, "currency": "eur"}`, id, amount)),
	}
}

func orderEffects(base, id, path string, capture bool) []outbox.Effect {
	body := fmt.Sprintf(`{"type": "order.paid", "order": %q}`, id)
	effs := []outbox.Effect{{
		Kind: "webhook.order_paid", Provider: webhook.Name,
		Payload: json.RawMessage(fmt.Sprintf(`{"url": %q, "body": %s}`, base+path, body)),
	}}
	if capture {
		effs = append(effs, outbox.Effect{
			Kind: "stripe.capture", Provider: stripe.Name,
			Payload: json.RawMessage(fmt.Sprintf(`{"operation": "payment_intent.capture", "params": {"id": "pi_%s"}}`, strings.TrimPrefix(id, "ord_"))),
		})
	}
	if path == "/orders" {
		effs = append(effs, outbox.Effect{
			Kind: "email.receipt", Provider: sendgrid.Name,
			Payload: json.RawMessage(fmt.Sprintf(`{"from": {"email": "shop@example.com", "name": "Shop"},
				"to": [{"email": "customer+%s@example.com"}], "subject": "Receipt for %s", "text": "Thank you for order %s."}`, id, id, id)),
		})
	}
	return effs
}

// demoStripe runs stripe-mock when it is installed, else a local fake, and
// says which.
func demoStripe() (base, what string, stop func()) {
	if bin, err := fakes.FindStripeMock(); err == nil {
		if url, stop, err := fakes.RunStripeMock(bin); err == nil {
			return url, "stripe-mock " + url + " (Stripe's API spec and fixtures)", stop
		}
	}
	f := fakes.NewFakeStripe()
	return f.URL, "local fake Stripe " + f.URL + " (stripe-mock not installed: go install github.com/stripe/stripe-mock@" +
		fakes.StripeMockVersion + ")", f.Close
}

// path renders an effect's transitions, e.g.
// "pending -> fired +12ms (HTTP 500: in doubt) -> fired +0.6s -> confirmed +0.6s".
// After an answer that proves the provider did nothing the effect goes
// back to pending; after any other failure it stays fired (in doubt) and is
// re-fired with the same key.
func path(e demoEffect, f *sideeffects.Effect, fires []fire) string {
	since := func(t time.Time) string {
		d := t.Sub(e.committed)
		if d < time.Second {
			return fmt.Sprintf("+%dms", d.Milliseconds())
		}
		return fmt.Sprintf("+%.2fs", d.Seconds())
	}
	var b strings.Builder
	b.WriteString("pending")
	for i, fr := range fires {
		fmt.Fprintf(&b, " -> fired %s", since(fr.at))
		if fr.outcome != "ok" {
			msg, class := fr.outcome, ""
			if i := strings.Index(msg, ": "); i >= 0 {
				msg, class = msg[i+2:], msg[:i]
			}
			if len(msg) > 60 {
				msg = msg[:57] + "..."
			}
			if class == "in_doubt" {
				msg += ": in doubt"
			}
			fmt.Fprintf(&b, " (%s)", msg)
			if i < len(fires)-1 && class == "retryable" {
				b.WriteString(" -> pending")
			}
		}
	}
	switch {
	case f.State == sideeffects.StateConfirmed && f.ConfirmedAt != nil:
		fmt.Fprintf(&b, " -> confirmed %s", since(*f.ConfirmedAt))
	default:
		fmt.Fprintf(&b, " -> %s", f.State)
	}
	return b.String()
}
