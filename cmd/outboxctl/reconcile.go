package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/outboxd/outboxd/internal/envflag"
	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/nats"
	"github.com/outboxd/outboxd/providers/stripe"
	"github.com/outboxd/outboxd/sideeffects/oncall"
)

func newReconcileCmd(a *app) *cobra.Command {
	var (
		apply         bool
		stripeKey     string
		stripeAPIBase string
		natsURL       string
		natsCreds     string
	)
	cmd := &cobra.Command{
		Use:   "reconcile <effect id | key | provider reference> [--apply]",
		Short: "Ask the provider what it holds for an effect's key, and say what to do",
		Long: `Ask the provider what it holds for an effect's key and print it beside the
effect, with the action it suggests:

  stripe    the objects carrying the key in metadata[outboxd_idempotency_key]:
            payment intents and customers through the Search API, refunds
            listed by their payment intent or charge, transfers by their
            destination; for a capture or a cancel, the payment intent's status
            (needs STRIPE_API_KEY; reads only)
  nats      the message of the effect's subject, stored within its stream's
            duplicate window, whose Nats-Msg-Id is the key (needs
            OUTBOXD_NATS_URL; reads only)
  sendgrid  what SendGrid's events recorded (delivery status, confirmations);
            SendGrid has no API to search sent mail by custom argument
  webhook   nothing to ask: check the receiver's log for webhook-id = the key

Exactly one object: confirm with its id (--apply does it, audited). None:
nothing was applied, so a retry is safe while the key window is open. More
than one: the request was applied more than once; check them, do not retry.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if err := a.open(ctx); err != nil {
				return err
			}
			e, err := a.resolve(ctx, args[0])
			if err != nil {
				return err
			}
			var asker providers.Reconciler
			if e.Provider == stripe.Name {
				if stripeKey == "" {
					return errors.New("reconciling a Stripe effect reads from Stripe: set STRIPE_API_KEY (a restricted read-only key is enough) or --stripe-api-key")
				}
				p, err := stripe.New(stripe.Config{APIKey: stripeKey, APIBase: stripeAPIBase})
				if err != nil {
					return err
				}
				asker = p
			}
			if e.Provider == nats.Name {
				if natsURL == "" {
					return errors.New("reconciling a NATS effect reads its stream: set OUTBOXD_NATS_URL or --nats-url (and --nats-creds where the server needs them)")
				}
				var opts []natsgo.Option
				if natsCreds != "" {
					opts = append(opts, natsgo.UserCredentials(natsCreds))
				}
				n, err := nats.NewAsker(natsURL, opts...)
				if err != nil {
					return err
				}
				defer n.Close()
				asker = n
			}
			rec, err := a.op.Reconcile(ctx, e, asker)
			if err != nil {
				return err
			}
			rec.Suggestion, _ = oncall.Suggest(rec, a.op.Profile(e.Provider), a.keyWindow(e.Provider), cliSuggest, time.Now())
			if apply {
				if len(rec.Found) != 1 || rec.Found[0].ID == "" || e.State == outboxtype.StateConfirmed || e.State == outboxtype.StateCancelled {
					return fmt.Errorf("--apply confirms only a pending, fired or failed effect for which exactly one object was found: %s", rec.Suggestion)
				}
				ch, err := a.op.Confirm(ctx, e.ID, outboxtype.ActionOpts{Actor: a.actor(), Ref: rec.Found[0].ID,
					Reason: fmt.Sprintf("reconcile: %s %s found at %s (%s)", rec.Found[0].Object, rec.Found[0].ID, e.Provider, rec.Asked)})
				if err != nil {
					return err
				}
				rec.Applied = &ch
			}
			if a.JSON {
				return printJSON(cmd.OutOrStdout(), rec)
			}
			printReconciliation(cmd.OutOrStdout(), rec)
			return nil
		},
	}
	cmd.Flags().BoolVar(&apply, "apply", false, "confirm the effect when exactly one object was found (audited)")
	cmd.Flags().StringVar(&stripeKey, "stripe-api-key", "", "Stripe key to read with (a restricted read-only key is enough)")
	envflag.Bind(cmd.Flags(), "stripe-api-key", "STRIPE_API_KEY")
	envflag.Secret(cmd.Flags(), "stripe-api-key")
	cmd.Flags().StringVar(&stripeAPIBase, "stripe-api-base", stripe.DefaultAPIBase, "Stripe API URL")
	envflag.Bind(cmd.Flags(), "stripe-api-base", "STRIPE_API_BASE")
	cmd.Flags().StringVar(&natsURL, "nats-url", "", "NATS server to read a nats effect's stream from")
	envflag.Bind(cmd.Flags(), "nats-url", "OUTBOXD_NATS_URL")
	envflag.Secret(cmd.Flags(), "nats-url")
	cmd.Flags().StringVar(&natsCreds, "nats-creds", "", "NATS credentials file")
	envflag.Bind(cmd.Flags(), "nats-creds", "OUTBOXD_NATS_CREDS")
	return cmd
}

// cliSuggest is outboxctl's surface for reconcile's suggestion: a
// confirmation it found names --apply too.
func cliSuggest(x oncall.Action) string {
	s := oncall.CLI(x)
	if x.Act == oncall.ActConfirm && x.Ref != "" {
		s = strings.TrimSuffix(s, "`") + " --reason \"found by reconcile\"` (or rerun with --apply)"
	}
	return s
}

func printReconciliation(out io.Writer, rec *outboxtype.Reconciliation) {
	e := rec.Effect
	doubt := ""
	if e.InDoubt {
		doubt = ", in doubt"
	}
	fmt.Fprintf(out, "effect %s (%s, %s%s), key %s\n", e.ID, e.Kind, e.State, doubt, e.IdempotencyKey)
	fmt.Fprintf(out, "%s: %s\n", e.Provider, rec.Asked)
	if len(rec.Found) == 0 {
		fmt.Fprintln(out, "  found: nothing")
	}
	for _, f := range rec.Found {
		fmt.Fprintf(out, "  found: %s %s %s created %s\n", f.Object, orDash(f.ID), orDash(f.Status), f.Created.UTC().Format(time.RFC3339))
	}
	for _, d := range rec.Drift {
		fmt.Fprintf(out, "  drift: %s: %s\n", d.Reason, d.Check)
	}
	if rec.Applied != nil {
		fmt.Fprintf(out, "applied: %s -> %s with ref %s (audited)\n", rec.Applied.From, rec.Applied.To, rec.Found[0].ID)
		return
	}
	fmt.Fprintf(out, "suggestion: %s\n", rec.Suggestion)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
