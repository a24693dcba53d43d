package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/outboxd/outboxd/internal/cli"
	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/bundled"
	"github.com/outboxd/outboxd/sideeffects/oncall"
)

func newEditCmd(a *app) *cobra.Command {
	var (
		payload, payloadFile, reason string
		dryRun                       bool
	)
	cmd := &cobra.Command{
		Use:   "edit <effect id | key> --payload JSON --reason TEXT",
		Short: "Correct the payload of a failed effect no provider acted on, and retry it",
		Long: `Replace the payload of a failed effect that no provider acted on and send it
back to pending with the same key, audited with both payloads, your reason
and --actor. The provider's own checks run on the new payload first.

Only an effect whose attempts prove nothing was done and no result is kept
for its key can be edited: every attempt refused before any request (an
invalid payload outboxd's own checks caught: "refused before sending"), or
a last answer that refused its fields (Stripe's invalid_request_error with
HTTP 400, which Stripe keeps no result for; a 400 or 422 from a webhook
receiver or SendGrid) after only such refusals. Anything else is refused
with the reason: fix it where it was enqueued, as a new event.

The application still holds the old payload: a replay of the event reports
a conflict. Fix it there too.

  outboxctl edit 0190… --payload '{"operation": "refund.create", "params": {"payment_intent": "pi_1", "reason": "requested_by_customer"}}' \
      --reason "reason was misspelt by the backfill script; fixed there too"`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case payload != "" && payloadFile != "":
				return cli.Usagef("--payload and --payload-file: give one")
			case payloadFile != "":
				b, err := os.ReadFile(payloadFile)
				if err != nil {
					return cli.Usagef("--payload-file: %v", err)
				}
				payload = string(b)
			case payload == "":
				return cli.Usagef("--payload is required: the corrected payload, as JSON (or --payload-file)")
			}
			if !json.Valid([]byte(payload)) {
				return cli.Usagef("--payload: not valid JSON")
			}
			if strings.TrimSpace(reason) == "" && !dryRun {
				return cli.Usagef("--reason is required: say what was wrong and who confirmed the fix")
			}
			networks, err := cli.AllowedNetworks(a.Policies.WebhookAllowCIDRs)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if err := a.open(ctx); err != nil {
				return err
			}
			e, err := a.resolve(ctx, args[0])
			if err != nil {
				return err
			}
			var v providers.Validator
			for _, s := range bundled.Schemas(networks) {
				if s.Name() == e.Provider {
					v = s
				}
			}
			if v == nil {
				return fmt.Errorf("effect %s is %s's: outboxctl checks the payloads of the built-in providers' effects only", e.ID, e.Provider)
			}
			ch, err := a.op.EditPayload(ctx, e.ID, json.RawMessage(payload), v,
				outboxtype.ActionOpts{Actor: a.actor(), Reason: cmpOr(reason, "(dry run)"), DryRun: dryRun})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if a.JSON {
				return printJSON(out, ch)
			}
			for _, d := range oncall.PayloadDiff(e.Payload, json.RawMessage(payload)) {
				fmt.Fprintf(out, "  %s\n", d)
			}
			switch {
			case !ch.Applied:
				return fmt.Errorf("not edited: %s", ch.Skipped)
			case dryRun:
				fmt.Fprintf(out, "dry run: %s would move %s -> pending with this payload and key %s\n", e.ID, ch.From, e.IdempotencyKey)
			default:
				fmt.Fprintf(out, "edited %s: %s -> pending with this payload and key %s (audited with both payloads)\n", e.ID, ch.From, e.IdempotencyKey)
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&payload, "payload", "", "the corrected payload, as JSON")
	fl.StringVar(&payloadFile, "payload-file", "", "read the corrected payload from this file")
	fl.StringVar(&reason, "reason", "", "what was wrong and who confirmed the fix, for the audit trail (required)")
	fl.BoolVar(&dryRun, "dry-run", false, "show the changes and whether the edit would be done; change nothing")
	return cmd
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
