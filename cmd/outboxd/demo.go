package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/outboxd/outboxd/internal/fakes"
	"github.com/outboxd/outboxd/internal/migrate"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/webhook"
	"github.com/outboxd/outboxd/sideeffects"
)

func newDemoCmd(g *globalConfig) *cobra.Command {
	var keep bool
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Enqueue a few events locally and watch their effects confirmed",
		Long: `Run outboxd end to end against DATABASE_URL, in a fresh schema of its own:
start a local webhook receiver that verifies signatures, enqueue events inside
application transactions, dispatch them, and print each effect's path
pending -> fired -> confirmed with timings. One receiver endpoint fails once
with HTTP 500, to show a retry carrying the same webhook-id.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return demo(cmd.Context(), cmd.OutOrStdout(), g, keep) },
	}
	cmd.Flags().BoolVar(&keep, "keep", false, "keep the demo schema afterwards for inspection")
	return cmd
}

// fire is one provider call the demo saw.
type fire struct {
	at      time.Time
	outcome string
}

// recordingProvider wraps a provider to note when each effect was fired and
// how each attempt ended, for the demo's report.
type recordingProvider struct {
	providers.Provider
	mu    sync.Mutex
	fires map[string][]fire
}

func (r *recordingProvider) Send(ctx context.Context, req providers.Request) (providers.Result, error) {
	start := time.Now()
	res, err := r.Provider.Send(ctx, req)
	outcome := "ok"
	if err != nil {
		outcome = err.Error()
	}
	r.mu.Lock()
	r.fires[req.EffectID] = append(r.fires[req.EffectID], fire{at: start, outcome: outcome})
	r.mu.Unlock()
	return res, err
}

func (r *recordingProvider) firesOf(id uuid.UUID) []fire {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]fire(nil), r.fires[id.String()]...)
}

type demoEffect struct {
	outbox.EffectResult
	order     string
	committed time.Time
}

func demo(ctx context.Context, out io.Writer, g *globalConfig, keep bool) error {
	pool, err := connect(ctx, g.DatabaseURL, 10)
	if err != nil {
		return err
	}
	defer pool.Close()

	var b [4]byte
	_, _ = rand.Read(b[:])
	schema := "outboxd_demo_" + hex.EncodeToString(b[:])
	if _, err := migrate.Up(ctx, pool, schema); err != nil {
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
	rec := &recordingProvider{Provider: wh, fires: map[string][]fire{}}
	ob, err := outbox.New(outbox.Config{Schema: schema, Providers: []providers.Validator{webhook.Schema{AllowedNetworks: loopback}}})
	if err != nil {
		return err
	}

	fmt.Fprintf(out, "outboxd demo: schema %s, webhook receiver %s\n\n", schema, recv.URL)

	// Start dispatching first, as a running outboxd would be.
	d, err := sideeffects.NewDispatcher(pool, sideeffects.Config{
		Schema:            schema,
		Providers:         []providers.Provider{rec},
		Retry:             sideeffects.RetryPolicy{BaseDelay: 500 * time.Millisecond},
		FetchCooldown:     20 * time.Millisecond,
		FetchPollInterval: 200 * time.Millisecond,
		Logger:            slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
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

	orders := []struct {
		id, path string
		amount   int
		ledger   bool
	}{
		{"ord_1001", "/orders", 4200, true},
		{"ord_1002", "/orders", 1999, false},
		{"ord_1003", "/flaky", 500, false},
	}
	var effects []demoEffect
	for _, o := range orders {
		var res *outbox.Result
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "INSERT INTO "+schema+".orders (id, amount, paid_at) VALUES ($1, $2, now())", o.id, o.amount); err != nil {
				return err
			}
			var err error
			res, err = ob.Enqueue(ctx, tx, orderEvent(o.id, o.amount), orderEffects(recv.URL, o.id, o.path, o.ledger)...)
			return err
		})
		if err != nil {
			return fmt.Errorf("enqueue %s: %w", o.id, err)
		}
		committed := time.Now()
		kinds := make([]string, len(res.Effects))
		for i, e := range res.Effects {
			kinds[i] = e.Kind
			effects = append(effects, demoEffect{EffectResult: e, order: o.id, committed: committed})
		}
		fmt.Fprintf(out, "committed order %s with event %s and effects %s\n", o.id, res.EventID, strings.Join(kinds, ", "))
	}

	// A retried command replays: same derived event id, same content.
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		res, err := ob.Enqueue(ctx, tx, orderEvent("ord_1001", 4200), orderEffects(recv.URL, "ord_1001", "/orders", true)...)
		if err == nil {
			fmt.Fprintf(out, "replayed order ord_1001: duplicate=%t, no new effect or job\n\n", res.Duplicate)
		}
		return err
	})
	if err != nil {
		return err
	}

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

	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ORDER\tEFFECT\tKEY\tPATH (time since commit)")
	confirmed := 0
	for i, e := range effects {
		f := final[i]
		if f.State == sideeffects.StateConfirmed {
			confirmed++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s…\t%s\n", e.order, e.Kind, e.Key[:12], path(e, f, rec.firesOf(e.ID)))
	}
	_ = tw.Flush()

	ds := recv.Deliveries()
	verified := 0
	for _, dl := range ds {
		if dl.Verified {
			verified++
		}
	}
	fmt.Fprintf(out, "\nreceiver: %d requests, %d with valid signatures, %d distinct webhook-ids for %d effects\n",
		len(ds), verified, len(recv.ByID()), len(effects))
	if confirmed != len(effects) {
		return errors.New("not every effect was confirmed")
	}
	fmt.Fprintf(out, "all %d effects confirmed\n", confirmed)
	if keep {
		fmt.Fprintf(out, "schema %s kept: SELECT * FROM %s.side_effects;\n", schema, schema)
	}
	return nil
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

func orderEffects(base, id, path string, ledger bool) []outbox.Effect {
	body := fmt.Sprintf(`{"type": "order.paid", "order": %q}`, id)
	effs := []outbox.Effect{{
		Kind: "webhook.order_paid", Provider: webhook.Name,
		Payload: json.RawMessage(fmt.Sprintf(`{"url": %q, "body": %s}`, base+path, body)),
	}}
	if ledger {
		effs = append(effs, outbox.Effect{
			Kind: "webhook.ledger_entry", Provider: webhook.Name,
			Payload: json.RawMessage(fmt.Sprintf(`{"url": %q, "body": %s}`, base+"/ledger", body)),
		})
	}
	return effs
}

// path renders an effect's transitions, e.g.
// "pending -> fired +12ms (HTTP 500) -> pending -> fired +0.6s -> confirmed +0.6s".
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
			msg := fr.outcome
			if i := strings.Index(msg, ": "); i >= 0 {
				msg = msg[i+2:]
			}
			fmt.Fprintf(&b, " (%s)", msg)
			if i < len(fires)-1 {
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
