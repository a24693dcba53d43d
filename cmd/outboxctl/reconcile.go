package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/outboxd/outboxd/internal/envflag"
	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/stripe"
)

// reconciliation is what reconcile found, for --json.
type reconciliation struct {
	Effect     *outboxtype.Effect       `json:"effect"`
	Asked      string                   `json:"asked"`
	Found      []providers.Found        `json:"found"`
	Delivery   *outboxtype.Delivery     `json:"delivery,omitempty"`
	Suggestion string                   `json:"suggestion"`
	Applied    *outboxtype.Change       `json:"applied,omitempty"`
	Drift      []outboxtype.DriftRecord `json:"drift,omitempty"`
}

func newReconcileCmd(a *app) *cobra.Command {
	var (
		apply         bool
		stripeKey     string
		stripeAPIBase string
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
			rec := &reconciliation{Effect: e}
			switch e.Provider {
			case stripe.Name:
				if stripeKey == "" {
					return errors.New("reconciling a Stripe effect reads from Stripe: set STRIPE_API_KEY (a restricted read-only key is enough) or --stripe-api-key")
				}
				p, err := stripe.New(stripe.Config{APIKey: stripeKey, APIBase: stripeAPIBase})
				if err != nil {
					return err
				}
				lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				defer cancel()
				rec.Found, rec.Asked, err = p.Lookup(lctx, e.Payload, e.IdempotencyKey)
				if err != nil {
					return fmt.Errorf("asking Stripe: %w", err)
				}
			case "sendgrid":
				if rec.Delivery, err = a.op.Delivery(ctx, e.ID); err != nil {
					return err
				}
				rec.Asked = "read the SendGrid events outboxd received for the key"
				if rec.Delivery != nil {
					rec.Found = []providers.Found{{ID: deref(e.ProviderRef), Object: "mail", Status: rec.Delivery.Status, Created: rec.Delivery.EventAt}}
				}
			default:
				rec.Asked = "nothing to ask " + e.Provider + ": look for webhook-id " + e.IdempotencyKey + " in the receiver's log"
			}
			if rec.Drift, err = a.op.Drift(ctx, outboxtype.DriftFilter{EffectID: &e.ID}); err != nil {
				return err
			}
			rec.Suggestion = a.suggest(e, rec)
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
	return cmd
}

// suggest says what to do about e given what the provider holds.
func (a *app) suggest(e *outboxtype.Effect, rec *reconciliation) string {
	id := e.ID.String()
	switch n := len(rec.Found); {
	case e.Provider != stripe.Name && e.Provider != "sendgrid":
		return fmt.Sprintf("check the receiver; if it acted: `outboxctl confirm %s --ref <its id>`", id)
	case n > 1:
		return fmt.Sprintf("%d objects carry the key: the request was applied more than once; check them and undo the extra ones; do not retry", n)
	case n == 1 && e.State == outboxtype.StateConfirmed:
		if e.ProviderRef != nil && *e.ProviderRef != "" && rec.Found[0].ID != "" && *e.ProviderRef != rec.Found[0].ID {
			return fmt.Sprintf("confirmed with ref %s, but the provider holds %s: check both", *e.ProviderRef, rec.Found[0].ID)
		}
		return "confirmed, and the provider agrees: nothing to do"
	case n == 1 && e.State == outboxtype.StateCancelled:
		return fmt.Sprintf("cancelled, but the provider acted (%s): undo it there if it must not stand", rec.Found[0].ID)
	case n == 1:
		return fmt.Sprintf("the provider acted: `outboxctl confirm %s --ref %s --reason \"found by reconcile\"` (or rerun with --apply)", id, rec.Found[0].ID)
	case e.Provider == "sendgrid":
		return "no SendGrid event recorded for this mail: look the key up in the Activity Feed (custom arg outboxd_idempotency_key); " +
			"found: `outboxctl confirm --ref`; not found: `outboxctl retry --allow-duplicate` risks nothing only if it was truly not sent"
	case e.State == outboxtype.StateConfirmed:
		return "confirmed, but the provider holds no object for the key: check the provider by hand"
	case e.State == outboxtype.StatePending || e.State == outboxtype.StateCancelled:
		return "nothing at the provider, as expected"
	}
	window := a.keyWindow(e.Provider)
	if window > 0 && e.KeyWindowFrom != nil && time.Since(*e.KeyWindowFrom) > window {
		return fmt.Sprintf("nothing at the provider, but the key window has passed: a re-fire is a new request; `outboxctl retry %s --force` after making sure", id)
	}
	return fmt.Sprintf("nothing at the provider: a retry is safe within the key window (`outboxctl retry %s`; --allow-duplicate for at_most_once kinds)", id)
}

func printReconciliation(out io.Writer, rec *reconciliation) {
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
