package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/outboxd/outboxd/internal/cli"
	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/sideeffects/oncall"
)

// actFlags are shared by retry and cancel.
type actFlags struct {
	filterFlags
	reason string
	dryRun bool
	yes    bool
	force  bool
	// allowDuplicate: retry may re-send an at_most_once effect in doubt.
	allowDuplicate bool
}

// targets resolves explicit ids, or the filter, into effect ids.
func (a *app) targets(ctx context.Context, args []string, f *actFlags, defaultStates []outboxtype.State) ([]uuid.UUID, bool, error) {
	if len(args) > 0 && f.set() {
		return nil, false, cli.Usagef("give effect ids or filters (--state, --kind, ...), not both")
	}
	if len(args) == 0 && !f.set() {
		return nil, false, cli.Usagef("give effect ids (or idempotency keys), or filters such as --state failed --kind email.receipt")
	}
	if f.reason == "" {
		return nil, false, cli.Usagef("--reason is required: it is recorded in the audit trail")
	}
	if err := a.open(ctx); err != nil {
		return nil, false, err
	}
	if len(args) > 0 {
		ids := make([]uuid.UUID, 0, len(args))
		for _, ref := range args {
			e, err := a.resolve(ctx, ref)
			if err != nil {
				return nil, false, err
			}
			ids = append(ids, e.ID)
		}
		return ids, len(ids) > 1, nil
	}
	filter, err := f.filter()
	if err != nil {
		return nil, false, err
	}
	if len(filter.States) == 0 {
		filter.States = defaultStates
	}
	effects, err := a.op.List(ctx, filter)
	if err != nil {
		return nil, false, err
	}
	ids := make([]uuid.UUID, len(effects))
	for i, e := range effects {
		ids[i] = e.ID
	}
	return ids, true, nil
}

func newRetryCmd(a *app) *cobra.Command {
	var f actFlags
	var rf replayFlags
	bulk := a.bulk(&f, "retry", []outboxtype.State{outboxtype.StateFailed})
	cmd := &cobra.Command{
		Use:   "retry [effect id | key ...]",
		Short: "Move failed or cancelled effects back to pending with a new River job (same key)",
		Long: `Move failed or cancelled effects back to pending, with a fresh round of
attempts, and insert a River job for each. The idempotency key never
changes, so a provider that still remembers it will not act twice. What the
effect has been through carries over: its key window still runs from the
first request that carried the key, its total attempts are kept, and if an
earlier request may have reached the provider (in doubt), the worker applies
the kind's in-doubt policy to the re-fire.

Refused, and what to do instead:
  - while a River job for the effect is running (a call may be in flight):
    wait for it to end, or for River to rescue it after --rescue-after;
  - fired effects, without --force (use it for effects stuck beyond the
    crash-recovery bound);
  - effects in doubt under at_most_once (SendGrid by default), without
    --allow-duplicate: an earlier request may have been delivered, and a
    re-send can deliver it twice. Check the provider first (the key is in
    the mail's custom_args), then confirm --ref or retry --allow-duplicate;
  - effects with less than min(2h, a quarter) of their key window left, or
    none, without --force: the provider may forget the key, and a re-fire
    could act twice. Check the provider first; --force then fires under a new
    key window.

Select effects by id, or by filters (default --state failed). Policies and
key windows are read from the same flags and variables as outboxd run
(--in-doubt-policy, --stripe-key-window, --webhook-key-window).

After an outage, replay a backlog at a pace instead: --failed-since 2h
--pace 20/s (with --kind, --provider, --host) starts a paced replay that
outboxd runs in the background, resumable after a restart, with every
refusal above (it never forces). Follow and cancel it with outboxctl
replays; see docs/replays.md.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if !rf.set() {
				return bulk(cmd, args)
			}
			spec, err := rf.spec(&f, args)
			if err != nil {
				return err
			}
			return a.startReplay(cmd, spec, &f)
		},
	}
	f.add(cmd, 100)
	addActFlags(cmd, &f)
	cmd.Flags().BoolVar(&f.force, "force", false, "also move fired effects, and effects near or past their key window (check the provider first)")
	cmd.Flags().BoolVar(&f.allowDuplicate, "allow-duplicate", false, "re-send at_most_once effects in doubt, accepting that the recipient may get them twice")
	rf.add(cmd)
	return cmd
}

func newAcknowledgeCmd(a *app) *cobra.Command {
	var f actFlags
	cmd := &cobra.Command{
		Use:   "acknowledge [effect id | key ...]",
		Short: "Record that failed effects were reviewed and are correctly failed",
		Long: `Record that failed effects were reviewed and are correctly failed (a card
decline, a retired endpoint): they stay failed, with your reason in the audit
trail, and leave "stuck" and the outboxd_effects{state="failed"} gauge, so
the alert stops firing. Nothing is sent and nothing pretends it was done;
stats counts them as failed_acknowledged. A later retry clears it.

Select effects by id, or by filters (default --state failed).`,
		RunE: a.bulk(&f, "acknowledge", []outboxtype.State{outboxtype.StateFailed}),
	}
	f.add(cmd, 100)
	addActFlags(cmd, &f)
	return cmd
}

func newReleaseCmd(a *app) *cobra.Command {
	var f actFlags
	cmd := &cobra.Command{
		Use:   "release [effect id | key ...]",
		Short: "Let the effects waiting behind one on its ordering key go on",
		Long: `Let the effects after an effect on its ordering key fire, whatever becomes
of it: for the head of a blocked chain that will never complete and that you
do not want to cancel (it stays as it is, with your reason in the audit
trail, and can still be retried, cancelled or confirmed; if retried, it may
then fire after the effects behind it). "stuck" shows blocked chains under
their head. Cancelling or confirming the head also lets the chain go on.

Select effects by id, or by filters (default --state failed).`,
		RunE: a.bulk(&f, "release", []outboxtype.State{outboxtype.StateFailed}),
	}
	f.add(cmd, 100)
	addActFlags(cmd, &f)
	return cmd
}

func newRequeueCmd(a *app) *cobra.Command {
	var f actFlags
	cmd := &cobra.Command{
		Use:   "requeue [effect id | key ...]",
		Short: "Give pending or fired effects that have no River job a new one",
		Long: `Give pending and fired effects that have no live River job (rows written by
SQL, jobs discarded or cleaned up) a new one now, as the sweeper would within
--sweep-interval. The state does not change, and the key is the same; a fired
effect's re-fire applies its kind's in-doubt policy, like any re-fire.
Effects that have a live job are skipped.

Select effects by id, or by filters (default --state pending,fired).`,
		RunE: a.bulk(&f, "requeue", []outboxtype.State{outboxtype.StatePending, outboxtype.StateFired}),
	}
	f.add(cmd, 100)
	addActFlags(cmd, &f)
	return cmd
}

func newCancelCmd(a *app) *cobra.Command {
	var f actFlags
	cmd := &cobra.Command{
		Use:   "cancel [effect id | key ...]",
		Short: "Cancel pending, fired or failed effects: no worker fires them again",
		RunE:  a.bulk(&f, "cancel", []outboxtype.State{outboxtype.StatePending, outboxtype.StateFired, outboxtype.StateFailed}),
	}
	f.add(cmd, 100)
	addActFlags(cmd, &f)
	return cmd
}

func addActFlags(cmd *cobra.Command, f *actFlags) {
	cmd.Flags().StringVar(&f.reason, "reason", "", "why, for the audit trail (required)")
	cmd.Flags().BoolVar(&f.dryRun, "dry-run", false, "show what would change; change nothing")
	cmd.Flags().BoolVar(&f.yes, "yes", false, "do not ask before changing several effects")
}

// bulk is the RunE of an action on effects selected by id or filters
// (default states): confirmation for bulk changes, then do, then the report.
// The operator function is looked up when the command runs, after targets
// opened the database.
func (a *app) bulk(f *actFlags, verb string, defaultStates []outboxtype.State) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		ctx := cmd.Context()
		ids, bulk, err := a.targets(ctx, args, f, defaultStates)
		if err != nil {
			return err
		}
		if bulk && !f.dryRun {
			if err := a.confirmBulk(cmd.ErrOrStderr(), verb, len(ids), f.yes); err != nil {
				return err
			}
		}
		changes, err := a.action(verb)(ctx, ids, a.opts(f))
		if err != nil {
			return err
		}
		if err := a.report(cmd.OutOrStdout(), changes, f.dryRun, !bulk); err != nil {
			return err
		}
		if verb == "release" && f.dryRun && !a.JSON {
			return a.printWaitingBehind(ctx, cmd.OutOrStdout(), changes)
		}
		return nil
	}
}

// action is the operator function behind verb.
func (a *app) action(verb string) func(context.Context, []uuid.UUID, outboxtype.ActionOpts) ([]outboxtype.Change, error) {
	switch verb {
	case "retry":
		return a.op.Retry
	case "requeue":
		return a.op.Requeue
	case "acknowledge":
		return a.op.Acknowledge
	case "release":
		return a.op.Release
	default:
		return a.op.Cancel
	}
}

func (a *app) opts(f *actFlags) outboxtype.ActionOpts {
	return outboxtype.ActionOpts{Actor: a.actor(), Reason: f.reason, DryRun: f.dryRun, Force: f.force, AllowDuplicate: f.allowDuplicate}
}

// report prints the changes. When the operator named the effects, one that
// could not be changed makes the command fail.
func (a *app) report(out io.Writer, changes []outboxtype.Change, dryRun, strict bool) error {
	if a.JSON {
		if err := printJSON(out, changes); err != nil {
			return err
		}
	} else {
		tw := table(out)
		fmt.Fprintln(tw, "ID\tKIND\tFROM\tTO\tRESULT\tWARNING")
		for _, c := range changes {
			result := "done"
			switch {
			case !c.Applied:
				result = "skipped: " + oncall.Refusal(c, oncall.CLI)
			case dryRun:
				result = "would change (dry run)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", c.Effect.ID, c.Effect.Kind, c.From, c.To, result, c.Warning)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	skipped := 0
	for _, c := range changes {
		if !c.Applied {
			skipped++
		}
	}
	if strict && skipped > 0 {
		return fmt.Errorf("%d of %d effects not changed (see RESULT)", skipped, len(changes))
	}
	return nil
}

func newConfirmCmd(a *app) *cobra.Command {
	var f actFlags
	var ref string
	cmd := &cobra.Command{
		Use:   "confirm [effect id | key ...] [--ref REF] --reason TEXT",
		Short: "Record by hand that effects were performed, after checking the provider",
		Long: `Record by hand that effects were performed, after checking the provider,
with the provider's reference. Accepts pending, fired, failed and cancelled
effects; the effect's last error is cleared (the audit row keeps it, with
the state it left).

--ref is the provider's id for what it did: a Stripe object (re_…, pi_…),
a SendGrid message id. A webhook has none: without --ref a webhook effect is
recorded with "webhook-id <its key>", the id the receiver saw and logged,
so several webhook effects (one hanging partner's) are confirmed in one
command, by ids or by filters (--kind, --provider webhook, --state; default
--state fired,failed), after --dry-run shows which. One --ref names one
object, so with --ref give exactly one effect.

A fired effect may still have a River job marked running (a call in flight,
or a process that died). Confirming does not stop that call: if it reaches
the provider, the key makes it a replay, and its acknowledgement is
recorded in the audit trail (late_ack). When the job runs again it finds the
effect confirmed and does nothing (outboxd logs "already confirmed, not
fired").`,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			ids, bulk, err := a.targets(ctx, args, &f, []outboxtype.State{outboxtype.StateFired, outboxtype.StateFailed})
			if err != nil {
				return err
			}
			if ref != "" && (bulk || len(ids) != 1) {
				return cli.Usagef("--ref names one provider object: give exactly one effect with it (webhook effects need no --ref and may be confirmed together)")
			}
			effects := make([]*outboxtype.Effect, 0, len(ids))
			for _, id := range ids {
				e, err := a.op.Get(ctx, id)
				if err != nil {
					return err
				}
				if p := a.op.Profile(e.Provider); ref == "" && p.Refs {
					return cli.Usagef("--ref is required for %s effect %s: the provider's id for what it did (%s)", e.Provider, e.ID, p.RefExample)
				}
				effects = append(effects, e)
			}
			if bulk && !f.dryRun {
				if err := a.confirmBulk(cmd.ErrOrStderr(), "confirm", len(ids), f.yes); err != nil {
					return err
				}
			}
			changes := make([]outboxtype.Change, 0, len(effects))
			for _, e := range effects {
				opts := a.opts(&f)
				opts.Ref = ref // none for a webhook: recorded as its webhook-id
				ch, err := a.op.Confirm(ctx, e.ID, opts)
				if err != nil {
					return err
				}
				changes = append(changes, ch)
			}
			return a.report(cmd.OutOrStdout(), changes, f.dryRun, !bulk)
		},
	}
	f.add(cmd, 100)
	addActFlags(cmd, &f)
	cmd.Flags().StringVar(&ref, "ref", "", "the provider's reference, e.g. re_3Pabc or a SendGrid message id (webhooks: none needed)")
	return cmd
}

// MinPurgeAge keeps purges from deleting effects whose key a provider may
// still remember: a replayed command would then create a new effect.
const MinPurgeAge = 24 * time.Hour

func newPurgeCmd(a *app) *cobra.Command {
	var olderThan time.Duration
	var dryRun, yes, force bool
	cmd := &cobra.Command{
		Use:   "purge --older-than D",
		Short: "Delete confirmed, failed and cancelled effects (never pending or fired)",
		Long: `Delete terminal effects (confirmed, failed, cancelled) last changed more than
--older-than ago, with their audit rows, and events left without effects.
Pending and fired effects are never touched.

A purged effect no longer deduplicates: the same event enqueued again
creates it anew. --older-than below 24h (Stripe's key window) needs --force.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if olderThan <= 0 {
				return cli.Usagef("--older-than is required, e.g. --older-than 720h")
			}
			if olderThan < MinPurgeAge && !force {
				return cli.Usagef("--older-than %s is inside the providers' key windows (%s): pass --force if you mean it", olderThan, MinPurgeAge)
			}
			ctx := cmd.Context()
			if err := a.open(ctx); err != nil {
				return err
			}
			cutoff := time.Now().Add(-olderThan)
			would, err := a.op.Purge(ctx, cutoff, true)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if dryRun {
				if a.JSON {
					return printJSON(out, map[string]any{"dry_run": true, "would_delete": would})
				}
				fmt.Fprintf(out, "dry run: would delete %d effects and %d events last changed before %s, and %d drift records\n", would.Effects, would.Events, cutoff.UTC().Format(time.RFC3339), would.Drift)
				return nil
			}
			if err := a.confirmBulk(cmd.ErrOrStderr(), "delete", int(would.Effects+would.Events), yes); err != nil {
				return err
			}
			res, err := a.op.Purge(ctx, cutoff, false)
			if err != nil {
				return err
			}
			if a.JSON {
				return printJSON(out, map[string]any{"deleted": res})
			}
			fmt.Fprintf(out, "deleted %d effects and %d events last changed before %s, and %d drift records\n", res.Effects, res.Events, cutoff.UTC().Format(time.RFC3339), res.Drift)
			return nil
		},
	}
	cmd.Flags().DurationVar(&olderThan, "older-than", 0, "delete terminal effects last changed before this long ago (required)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "count what would be deleted; delete nothing")
	cmd.Flags().BoolVar(&yes, "yes", false, "do not ask before deleting")
	cmd.Flags().BoolVar(&force, "force", false, "allow --older-than below 24h")
	return cmd
}

func newMigrateCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "migrate",
		Short: "Apply River's and outboxd's migrations to the schema (safe to repeat)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cli.Migrate(cmd.Context(), cmd.OutOrStdout(), a.URL, a.Schema)
		},
	}
}

// printWaitingBehind lists, for a release's dry run, the effects each
// release would let go, in the order they go out.
func (a *app) printWaitingBehind(ctx context.Context, out io.Writer, changes []outboxtype.Change) error {
	for _, ch := range changes {
		if !ch.Applied || ch.Effect == nil || ch.Effect.OrderingKey == nil {
			continue
		}
		behind, err := a.op.WaitingBehind(ctx, ch.Effect.ID, 100)
		if err != nil {
			return err
		}
		if len(behind) == 0 {
			fmt.Fprintf(out, "\nnothing waits behind %s on ordering key %s now\n", ch.Effect.ID, *ch.Effect.OrderingKey)
			continue
		}
		fmt.Fprintf(out, "\nreleasing %s would let these go out, in this order, without it; each was enqueued after it on ordering key %s and may depend on it:\n",
			ch.Effect.ID, *ch.Effect.OrderingKey)
		for i, e := range behind {
			fmt.Fprintf(out, "  %d. %s  %s  %s\n", i+1, e.ID, e.Kind, e.State)
		}
	}
	return nil
}
