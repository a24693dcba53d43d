package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/outboxd/outboxd/internal/cli"
	"github.com/outboxd/outboxd/outbox/idempotency"
	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/providers/endpoint"
	"github.com/outboxd/outboxd/sideeffects"
	"github.com/outboxd/outboxd/sideeffects/oncall"
)

func newStuckCmd(a *app) *cobra.Command {
	var olderThan, firedBound time.Duration
	var limit int
	var byCause bool
	cmd := &cobra.Command{
		Use:   "stuck",
		Short: "Effects that are not progressing, and why",
		Long: `List pending and fired effects that have not changed for --older-than, and
every failed effect, oldest first, each with a diagnosis that names a
command that works for it: no live River job (requeue), fired beyond the
crash-recovery bound, retrying (attempts, last error, next attempt), key
window about to close, or failed — with, per failure class, the safe
actions and the one that could cause a second real-world effect.

The crash-recovery bound comes from the settings the running dispatchers
recorded (their --rescue-after, River's 30s rescuer interval, the first
retry delay; see outboxctl dispatchers), and an effect is blamed on a dead
worker only while River still marks its job running: one backing off
between attempts (a hanging receiver) reads as retrying.

Above the list, what else needs a person, the most urgent first, each with
the command for it, as the web view's overview: destinations held back,
endpoints disabled or failing every delivery, limit keys holding effects
back, drift to review, stuck Idempotency-Keys.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if olderThan < 0 || limit <= 0 {
				return cli.Usagef("--older-than must be >= 0 and --limit positive")
			}
			ctx := cmd.Context()
			if err := a.open(ctx); err != nil {
				return err
			}
			if !a.JSON {
				if err := a.printNeeds(cmd.Context(), cmd.OutOrStdout(), firedBound, cmd.Flags().Changed("fired-bound")); err != nil {
					return err
				}
			}
			if byCause {
				return a.printStuckGroups(cmd.OutOrStdout(), cmd, olderThan, limit)
			}
			// One more than shown, to say whether the list was cut.
			stuck, err := a.op.Stuck(ctx, olderThan, limit+1)
			if err != nil {
				return err
			}
			cut := len(stuck) > limit
			if cut {
				stuck = stuck[:limit]
			}
			now := time.Now()
			sit, err := a.situation(ctx, now, firedBound, cmd.Flags().Changed("fired-bound"))
			if err != nil {
				return err
			}
			type row struct {
				outboxtype.StuckEffect
				Diagnosis string `json:"diagnosis"`
			}
			stuck = oncall.ChainsUnderHeads(stuck)
			rows := make([]row, len(stuck))
			for i, s := range stuck {
				sit.KeyWindow = a.keyWindow(s.Provider)
				rows[i] = row{s, oncall.Explain(s, sit)}
			}
			out := cmd.OutOrStdout()
			if a.JSON {
				return printJSON(out, rows)
			}
			if len(rows) == 0 {
				fmt.Fprintf(out, "nothing stuck: no live effect unchanged for %s, no failed effect\n", olderThan)
				return nil
			}
			// A blocked chain is listed under its head, in its order; a
			// head that is not stuck itself (retrying, or changed recently)
			// gets a line of its own.
			tw := table(out)
			fmt.Fprintln(tw, "ID\tKIND\tPROVIDER\tSTATE\tATTEMPTS\tUNCHANGED\tWHY")
			shown := map[uuid.UUID]bool{}
			for _, r := range rows {
				if h := r.BlockedBehind; h != nil {
					if !shown[*h] {
						shown[*h] = true
						fmt.Fprintf(tw, "%s\t\t\t\t\t\t%s\n", h, "head of a blocked chain, not stuck itself: `outboxctl show "+h.String()+"`")
					}
					fmt.Fprintf(tw, "  └ %s\t%s\t%s\t%s\t%d\t%s\tblocked behind %s (ordering key %q)\n",
						r.ID, r.Kind, r.Provider, r.State, r.Attempts, ago(r.UpdatedAt), h, *r.OrderingKey)
					continue
				}
				shown[r.ID] = true
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", r.ID, r.Kind, r.Provider, r.State, r.Attempts, ago(r.UpdatedAt), r.Diagnosis)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if cut {
				fmt.Fprintf(out, "\nthe %d oldest shown; there are more: `outboxctl stuck --by-cause` groups every stuck effect by its cause, or raise --limit\n", limit)
			}
			return nil
		},
	}
	cmd.Flags().DurationVar(&olderThan, "older-than", time.Minute, "only live effects unchanged for at least this long (below the crash-recovery bound, so an effect past it shows)")
	cmd.Flags().DurationVar(&firedBound, "fired-bound", sideeffects.DefaultRescueAfter+time.Minute,
		"crash-recovery bound: fired longer than this under a running job is reported (default: from the running dispatchers' --rescue-after)")
	cmd.Flags().IntVar(&limit, "limit", 100, "at most this many effects (groups with --by-cause)")
	cmd.Flags().BoolVar(&byCause, "by-cause", false, "group by cause (state, kind, provider and host, the last error's first words), the incident that began last first")
	return cmd
}

// printStuckGroups prints the stuck effects grouped by cause, newest
// incident first.
func (a *app) printStuckGroups(out io.Writer, cmd *cobra.Command, olderThan time.Duration, limit int) error {
	groups, err := a.op.StuckGroups(cmd.Context(), olderThan, limit)
	if err != nil {
		return err
	}
	if a.JSON {
		return printJSON(out, groups)
	}
	if len(groups) == 0 {
		fmt.Fprintf(out, "nothing stuck: no live effect unchanged for %s, no failed effect\n", olderThan)
		return nil
	}
	tw := table(out)
	fmt.Fprintln(tw, "LAST CHANGE\tEFFECTS\tSTATE\tKIND\tPROVIDER\tCAUSE\tSINCE\tNEWEST")
	for _, g := range groups {
		prov := g.Provider
		if g.Host != "" {
			prov += " " + g.Host
		}
		fmt.Fprintf(tw, "%s ago\t%d\t%s\t%s\t%s\t%s\t%s ago\t%s\n", ago(g.Newest), g.Count, g.State, g.Kind, prov, g.Cause, ago(g.Oldest), g.Example)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out, "\nlist one group: outboxctl list --state <state> --kind <kind>; why one effect: outboxctl show <id>")
	return nil
}

// printNeeds prints what asks for a person besides the stuck effects
// listed below it, one line per situation, the most urgent first, each
// with the command that deals with it, as the web view's overview does
// (oncall.Needs): a destination held back, an endpoint disabled or
// failing, a limit key holding effects back, drift, a stuck
// Idempotency-Key. Nothing when none of them is there.
func (a *app) printNeeds(ctx context.Context, out io.Writer, firedBound time.Duration, set bool) error {
	now := time.Now()
	sit, err := a.situation(ctx, now, firedBound, set)
	if err != nil {
		return err
	}
	n := oncall.Needs{HeldBack: len(sit.HeldBack)}
	reg, err := endpoint.NewRegistry(endpoint.RegistryConfig{Schema: a.Schema})
	if err != nil {
		return err
	}
	eps, err := reg.List(ctx, a.pool, endpoint.ListFilter{})
	if err != nil {
		return err
	}
	for _, ep := range eps {
		n.AddEndpoint(ep.DisabledAt, ep.FailingSince)
	}
	limits, err := a.op.Limits(ctx)
	if err != nil {
		return err
	}
	n.AddLimits(limits, now)
	if n.Drift, err = a.op.UnacknowledgedDrift(ctx); err != nil {
		return err
	}
	keys, err := a.keys(ctx)
	if err != nil {
		return err
	}
	inProgress, err := keys.List(ctx, idempotency.Filter{State: "in_progress", Limit: 100})
	if err != nil {
		return err
	}
	for _, k := range inProgress {
		if k.LockedUntil != nil && !k.LockedUntil.After(now) {
			n.StuckKeys++
		}
	}
	lines := n.Lines(now)
	if len(lines) == 0 {
		return nil
	}
	where := map[oncall.Place]string{
		oncall.PlaceHeldBack:  "outboxctl dispatchers",
		oncall.PlaceEndpoints: "outboxctl endpoints list",
		oncall.PlaceLimits:    "outboxctl limits",
		oncall.PlaceDrift:     "outboxctl drift",
		oncall.PlaceKeys:      "outboxctl keys list --state in_progress",
	}
	fmt.Fprintln(out, "needs you, most urgent first:")
	for _, l := range lines {
		fmt.Fprintf(out, "  %s: %s\n", l.Text, where[l.Place])
	}
	fmt.Fprintln(out)
	return nil
}

// held0 is holder's entry in running (zero if none).
func held0(running []outboxtype.RunningJobs, holder string) outboxtype.RunningJobs {
	for _, r := range running {
		if r.HeldBy == holder {
			return r
		}
	}
	return outboxtype.RunningJobs{}
}

// filterFlags are the selection flags list, retry and cancel share.
type filterFlags struct {
	states    []string
	kind      string
	provider  string
	source    string
	since     time.Duration
	olderThan time.Duration
	limit     int
}

func (f *filterFlags) add(cmd *cobra.Command, limit int) {
	fl := cmd.Flags()
	fl.StringSliceVar(&f.states, "state", nil, "pending, fired, confirmed, failed or cancelled (repeatable)")
	fl.StringVar(&f.kind, "kind", "", "effect kind")
	fl.StringVar(&f.provider, "provider", "", "provider name")
	fl.StringVar(&f.source, "source", "", "event id the effects came from")
	fl.DurationVar(&f.since, "since", 0, "created within this long, e.g. 1h")
	fl.DurationVar(&f.olderThan, "older-than", 0, "created at least this long ago")
	fl.IntVar(&f.limit, "limit", limit, "at most this many effects")
}

func (f *filterFlags) set() bool {
	return len(f.states) > 0 || f.kind != "" || f.provider != "" || f.source != "" || f.since > 0 || f.olderThan > 0
}

func (f *filterFlags) filter() (outboxtype.Filter, error) {
	var out outboxtype.Filter
	for _, s := range f.states {
		st := outboxtype.State(strings.ToLower(strings.TrimSpace(s)))
		switch st {
		case outboxtype.StatePending, outboxtype.StateFired, outboxtype.StateConfirmed, outboxtype.StateFailed, outboxtype.StateCancelled:
			out.States = append(out.States, st)
		default:
			return out, cli.Usagef("--state %q: use pending, fired, confirmed, failed or cancelled", s)
		}
	}
	if f.source != "" {
		id, err := uuid.Parse(f.source)
		if err != nil {
			return out, cli.Usagef("--source %q is not an event id (UUID)", f.source)
		}
		out.Source = id
	}
	if f.since < 0 || f.olderThan < 0 {
		return out, cli.Usagef("--since and --older-than must be positive durations")
	}
	if f.since > 0 && f.olderThan > 0 && f.olderThan >= f.since {
		return out, cli.Usagef("--older-than %s and --since %s select nothing: --older-than must be shorter", f.olderThan, f.since)
	}
	if f.limit <= 0 {
		return out, cli.Usagef("--limit must be positive")
	}
	now := time.Now()
	if f.since > 0 {
		out.Since = now.Add(-f.since)
	}
	if f.olderThan > 0 {
		out.Before = now.Add(-f.olderThan)
	}
	out.Kind, out.Provider, out.Limit = f.kind, f.provider, f.limit
	return out, nil
}

func newListCmd(a *app) *cobra.Command {
	var ff filterFlags
	var after string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "Effects matching filters, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := ff.filter()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if err := a.open(ctx); err != nil {
				return err
			}
			if after != "" {
				if f.After, err = a.resolve(ctx, after); err != nil {
					return err
				}
			}
			effects, err := a.op.List(ctx, f)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if a.JSON {
				return printJSON(out, effects)
			}
			tw := table(out)
			fmt.Fprintln(tw, "ID\tCREATED\tKIND\tPROVIDER\tSTATE\tATTEMPTS\tLAST ERROR")
			for _, e := range effects {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", e.ID, e.CreatedAt.UTC().Format(time.RFC3339), e.Kind, e.Provider, e.State, e.Attempts, short(e.LastError, 60))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if len(effects) == f.Limit {
				fmt.Fprintf(out, "more: add --after %s\n", effects[len(effects)-1].ID)
			}
			return nil
		},
	}
	ff.add(cmd, 50)
	cmd.Flags().StringVar(&after, "after", "", "continue after this effect id (printed at the end of a page)")
	return cmd
}

func newShowCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "show <effect id | idempotency key | provider reference>",
		Short: "Everything about one effect: columns, event, River jobs, operator actions",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if err := a.open(ctx); err != nil {
				return err
			}
			e, err := a.resolve(ctx, args[0])
			if err != nil {
				return err
			}
			ev, err := a.op.Event(ctx, e.SourceID)
			if err != nil {
				return err
			}
			jobs, err := a.op.Jobs(ctx, e.ID)
			if err != nil {
				return err
			}
			audit, err := a.op.Audit(ctx, e.ID)
			if err != nil {
				return err
			}
			attempts, err := a.op.Attempts(ctx, e.ID)
			if err != nil {
				return err
			}
			delivery, err := a.op.Delivery(ctx, e.ID)
			if err != nil {
				return err
			}
			drift, err := a.op.Drift(ctx, outboxtype.DriftFilter{EffectID: &e.ID})
			if err != nil {
				return err
			}
			var blocked *uuid.UUID
			if e.OrderingKey != nil {
				if blocked, err = a.op.BlockedBehind(ctx, e.ID); err != nil {
					return err
				}
			}
			sit, err := a.situation(ctx, time.Now(), sideeffects.DefaultRescueAfter+time.Minute, false)
			if err != nil {
				return err
			}
			sit.KeyWindow = a.keyWindow(e.Provider)
			whatNow := oncall.WhatNow(e, jobs, audit, blocked, sit)
			out := cmd.OutOrStdout()
			if a.JSON {
				return printJSON(out, map[string]any{"effect": e, "event": ev, "attempts": attempts, "jobs": jobs, "audit": audit,
					"delivery": delivery, "drift": drift, "what_now": whatNow})
			}
			fmt.Fprintf(out, "what now: %s\n\n", whatNow)
			tw := table(out)
			ts := func(t *time.Time) string {
				if t == nil {
					return "-"
				}
				return t.UTC().Format(time.RFC3339Nano)
			}
			for _, kv := range [][2]string{
				{"id", e.ID.String()}, {"kind", e.Kind}, {"provider", e.Provider}, {"state", string(e.State)},
				{"idempotency_key", e.IdempotencyKey}, {"attempts", attemptsLine(e)}, {"in_doubt", doubtLine(e)},
				{"acknowledged_at", ts(e.AcknowledgedAt)},
				{"last_error", short(e.LastError, 400)}, {"provider_ref", short(e.ProviderRef, 200)},
				{"replayed", fmt.Sprint(e.Replayed)}, {"tenant", short(e.Tenant, 200)}, {"not_before", ts(e.NotBefore)}, {"next_attempt_at", ts(e.NextAttemptAt)},
				{"created_at", ts(&e.CreatedAt)}, {"updated_at", ts(&e.UpdatedAt)}, {"first_fired_at", ts(e.FirstFiredAt)},
				{"key_window_from", ts(e.KeyWindowFrom) + a.windowNote(e)},
				{"fired_at", ts(e.FiredAt)}, {"confirmed_at", ts(e.ConfirmedAt)}, {"delivery", deliveryLine(delivery)},
				{"payload", string(e.Payload)},
			} {
				fmt.Fprintf(tw, "%s\t%s\n", kv[0], kv[1])
			}
			fmt.Fprintln(tw)
			fmt.Fprintf(tw, "event\t%s %s (%s %s) at %s\n", ev.ID, ev.Type, ev.AggregateType, ev.AggregateID, ev.CreatedAt.UTC().Format(time.RFC3339))
			fmt.Fprintf(tw, "event payload\t%s\n", ev.Payload)
			if err := tw.Flush(); err != nil {
				return err
			}
			fmt.Fprintf(out, "\nTimeline (%d attempts in all):\n", e.TotalAttempts)
			tw = table(out)
			fmt.Fprintln(tw, "AT\tWHAT\tOUTCOME\tDETAIL")
			for _, t := range oncall.Timeline(e, attempts, audit, delivery, drift) {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", ts(t.At), t.What, t.Outcome, t.Detail)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			fmt.Fprintf(out, "\nRiver jobs (%d; a job's state is River's, the effect's state above is what counts):\n", len(jobs))
			tw = table(out)
			fmt.Fprintln(tw, "JOB\tSTATE\tQUEUE\tATTEMPT\tSCHEDULED\tFINALIZED\tERRORS OF ITS EARLIER RUNS")
			for _, j := range jobs {
				errs := "-"
				if n := len(j.Errors); n > 0 {
					errs = fmt.Sprintf("%d, the last: %s", n, strings.ReplaceAll(j.Errors[n-1].Error, "\n", " "))
					if j.State == "completed" {
						errs = fmt.Sprintf("%d before it completed, the last: %s", n, strings.ReplaceAll(j.Errors[n-1].Error, "\n", " "))
					}
				}
				fmt.Fprintf(tw, "%d\t%s\t%s\t%d/%d\t%s\t%s\t%s\n", j.ID, j.State, j.Queue, j.Attempt, j.MaxAttempts,
					ts(&j.ScheduledAt), ts(j.FinalizedAt), errs)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if len(drift) > 0 {
				fmt.Fprintf(out, "\nDrift found in provider events (%d):\n", len(drift))
				for _, d := range drift {
					fmt.Fprintf(out, "  %s %s: event %s (%s), object %s: %s\n", d.CreatedAt.UTC().Format(time.RFC3339), d.Reason,
						d.EventID, d.EventType, orDash(d.ObjectID), d.Check)
				}
			}
			fmt.Fprintf(out, "\nOperator actions, provider events and late acknowledgements (%d):\n", len(audit))
			tw = table(out)
			fmt.Fprintln(tw, "AT\tACTOR\tACTION\tFROM\tTO\tREASON")
			for _, au := range audit {
				reason := au.Reason
				if au.Action == outboxtype.ActionLateAck {
					var d struct {
						Ref string `json:"provider_ref"`
					}
					_ = json.Unmarshal(au.Details, &d)
					reason = fmt.Sprintf("provider ref %q: %s", d.Ref, reason)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", au.CreatedAt.UTC().Format(time.RFC3339), au.Actor, au.Action, au.FromState, au.ToState, reason)
			}
			return tw.Flush()
		},
	}
}

// deliveryLine renders a mail's delivery status from provider events.
func deliveryLine(d *outboxtype.Delivery) string {
	if d == nil {
		return "-"
	}
	line := fmt.Sprintf("%s at %s (event %s)", d.Status, d.EventAt.UTC().Format(time.RFC3339), d.EventID)
	if d.Detail != "" {
		line += ": " + d.Detail
	}
	if d.Status == "bounce" || d.Status == "dropped" {
		line += "; the provider accepted the request but the mail did not arrive"
	}
	return line
}

func newDriftCmd(a *app) *cobra.Command {
	var (
		since  string
		reason string
		limit  int
		all    bool
	)
	cmd := &cobra.Command{
		Use:   "drift",
		Short: "Disagreements between outboxd and the providers, found in their events",
		Long: `List drift records not yet acknowledged, newest first (--all: every one):
provider events that contradict what outboxd holds. Each names the effect
(when one matches) with its state then and now, the event and when it
happened, the provider's object as the event showed it (status, amount,
currency, the provider's explanation) and what to check. Reasons:

  unknown_key            an event carries an outboxd key no effect has
  acted_while_failed     the provider acted on an effect outboxd failed (not in doubt)
  acted_while_cancelled  the provider acted on a cancelled effect
  two_objects            a second provider object carries a confirmed effect's key
  undone_after_confirm   a confirmed effect's object was later undone (refund failed, payment canceled)
  other_provider         an event of one provider names the key of another provider's effect
  other_operation        an event is about an object the effect's operation does not create
  other_object           an event is about another object than the one the effect acts on

Drift changes no effect: decide, then confirm, retry or undo at the provider,
and record the review with "outboxctl drift ack <id> --reason": the record
leaves this list and the outboxd_drift_unacknowledged gauge.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			d, err := time.ParseDuration(since)
			if err != nil || d < 0 {
				return fmt.Errorf("--since %q: give a duration such as 24h or 168h", since)
			}
			if err := a.open(ctx); err != nil {
				return err
			}
			recs, err := a.op.Drift(ctx, outboxtype.DriftFilter{Since: time.Now().Add(-d), Reason: reason, Limit: limit, Acknowledged: all})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if a.JSON {
				return printJSON(out, recs)
			}
			if len(recs) == 0 {
				what := "unacknowledged drift"
				if all {
					what = "drift"
				}
				fmt.Fprintf(out, "no %s in the last %s\n", what, since)
				return nil
			}
			for _, r := range recs {
				printDrift(out, r)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&since, "since", "168h", "how far back")
	cmd.Flags().StringVar(&reason, "reason", "", "only this reason")
	cmd.Flags().IntVar(&limit, "limit", 100, "at most this many")
	cmd.Flags().BoolVar(&all, "all", false, "also records already acknowledged")
	cmd.AddCommand(newDriftAckCmd(a))
	return cmd
}

// printDrift prints one drift record for people.
func printDrift(out io.Writer, r outboxtype.DriftRecord) {
	effect := "no effect"
	if r.EffectID != nil {
		effect = fmt.Sprintf("effect %s (%s; %s when found", r.EffectID, r.Kind, r.EffectState)
		if r.EffectStateNow != nil {
			effect += ", " + *r.EffectStateNow + " now"
			if r.EffectRefNow != nil {
				effect += " with ref " + *r.EffectRefNow
			}
		}
		effect += ")"
	}
	fmt.Fprintf(out, "#%d  %s  %s  %s\n", r.ID, r.CreatedAt.UTC().Format(time.RFC3339), r.Reason, effect)
	fmt.Fprintf(out, "  %s event %s (%s)", r.Provider, r.EventID, r.EventType)
	if at := r.EventAt(); at != "" {
		fmt.Fprintf(out, " at %s", at)
	}
	fmt.Fprintf(out, ", key %s\n", r.IdempotencyKey)
	object := r.Object()
	fmt.Fprintf(out, "  object %s\n  check: %s\n", object, r.Check)
	if r.AcknowledgedAt != nil {
		fmt.Fprintf(out, "  acknowledged %s by %s: %s\n", r.AcknowledgedAt.UTC().Format(time.RFC3339), deref(r.AcknowledgedBy), deref(r.AckReason))
	} else {
		fmt.Fprintf(out, "  reviewed? outboxctl drift ack %d --reason \"...\"\n", r.ID)
	}
	fmt.Fprintln(out)
}

func newDriftAckCmd(a *app) *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "ack <drift id ...> --reason TEXT",
		Short: "Record that drift records were reviewed",
		Long: `Record, with your reason and --actor, that drift records were reviewed (the
effect was confirmed, retried or undone at the provider, or the drift is
understood): they leave the default drift list and the
outboxd_drift_unacknowledged gauge, and keep the review ("drift --all").
Ids are the #N of "outboxctl drift".`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ids := make([]int64, len(args))
			for i, arg := range args {
				id, err := strconv.ParseInt(strings.TrimPrefix(arg, "#"), 10, 64)
				if err != nil || id <= 0 {
					return cli.Usagef("%q: give drift record ids, the #N of `outboxctl drift`", arg)
				}
				ids[i] = id
			}
			if strings.TrimSpace(reason) == "" {
				return cli.Usagef("--reason is required: say what you checked or did")
			}
			ctx := cmd.Context()
			if err := a.open(ctx); err != nil {
				return err
			}
			done, err := a.op.AckDrift(ctx, ids, a.actor(), reason)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			acked := make(map[int64]bool, len(done))
			for _, id := range done {
				acked[id] = true
				fmt.Fprintf(out, "acknowledged drift #%d\n", id)
			}
			var missed []string
			for _, id := range ids {
				if !acked[id] {
					missed = append(missed, fmt.Sprintf("#%d", id))
				}
			}
			if len(missed) > 0 {
				return fmt.Errorf("%s not acknowledged: no such record, or acknowledged already (`outboxctl drift --all` shows them)", strings.Join(missed, ", "))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "what you checked or did, for the record (required)")
	return cmd
}

func newStatsCmd(a *app) *cobra.Command {
	var windowFlag string
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Counts by state and kind, oldest live effects, attempts, confirm latency",
		Long: `Counts by state and kind, the oldest live effects, the attempts confirmed
effects took, and the confirm latency (commit to confirmed) of effects the
dispatcher confirmed; effects confirmed by hand (outboxctl confirm) are
counted apart, not in the percentiles.

Pending, fired and failed effects are always counted in full; confirmed and
cancelled ones over --window (default 1h). A window reads the per-minute
summary the running outboxd keeps (each minute once it is two minutes
old) for the minutes it holds, and only the others from the effects: a day
is 1,440 rows per kind whatever the rate. The percentiles of such a window
are estimates from the summary's histogram, within 10%, and say so. A
minute counts what ended in it: an effect retried and ended again later
counts again. --window all covers every row kept: it reads the whole
terminal index and, for the percentiles, the audit trail: seconds at a
million rows.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			window, label := time.Duration(0), "all time"
			if windowFlag != "all" {
				var err error
				if window, err = time.ParseDuration(windowFlag); err != nil || window <= 0 {
					return cli.Usagef("--window %q: use a positive duration such as 1h or 24h, or all", windowFlag)
				}
				label = "the last " + window.String()
			}
			ctx := cmd.Context()
			if err := a.open(ctx); err != nil {
				return err
			}
			st, err := a.op.Stats(ctx, window)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if a.JSON {
				return printJSON(out, st)
			}
			fmt.Fprintf(out, "Window: %s (confirmed and cancelled counts, attempts, latency)\n\n", label)
			fmt.Fprintf(out, "Effects (pending, fired, failed: all; confirmed, cancelled: %s):\n", label)
			tw := table(out)
			fmt.Fprintln(tw, "STATE\tKIND\tCOUNT")
			for _, c := range st.Counts {
				fmt.Fprintf(tw, "%s\t%s\t%d\n", c.State, c.Kind, c.Count)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			age := func(t *time.Time) string {
				if t == nil {
					return "none"
				}
				return ago(*t)
			}
			fmt.Fprintf(out, "\noldest pending: %s\noldest fired:   %s\n", age(st.OldestPending), age(st.OldestFired))
			fmt.Fprintf(out, "\nAttempts of effects confirmed in %s:\n", label)
			tw = table(out)
			fmt.Fprintln(tw, "ATTEMPTS\tCOUNT")
			for _, b := range st.Attempts {
				fmt.Fprintf(tw, "%s\t%d\n", b.Attempts, b.Count)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			estimated := ""
			if st.LatencyEstimated {
				estimated = " (estimates within 10%, from the per-minute summary)"
			}
			fmt.Fprintf(out, "\nConfirm latency (commit to confirmed), %d effects confirmed by the dispatcher in %s: p50 %s  p95 %s  p99 %s%s\n",
				st.Confirmed, label, secs(st.LatencyP50), secs(st.LatencyP95), secs(st.LatencyP99), estimated)
			fmt.Fprintf(out, "Confirmed by hand (outboxctl confirm) in %s: %d, not in the percentiles\n", label, st.ConfirmedByHand)
			return nil
		},
	}
	cmd.Flags().StringVar(&windowFlag, "window", "1h", "window for confirmed and cancelled effects, attempts and latency: a duration, or all")
	return cmd
}

func secs(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(time.Millisecond).String()
}

func attemptsLine(e *outboxtype.Effect) string {
	if e.Redrives == 0 {
		return fmt.Sprint(e.Attempts)
	}
	plural := "s"
	if e.Redrives == 1 {
		plural = ""
	}
	return fmt.Sprintf("%d since the last redrive, %d in all, %d redrive%s", e.Attempts, e.TotalAttempts, e.Redrives, plural)
}

func doubtLine(e *outboxtype.Effect) string {
	if !e.InDoubt {
		return "false"
	}
	return "true (an earlier request may have reached the provider unacknowledged)"
}

// windowNote says when the effect's key window closes, if its provider has one.
func (a *app) windowNote(e *outboxtype.Effect) string {
	w := a.keyWindow(e.Provider)
	if w <= 0 || e.KeyWindowFrom == nil {
		return ""
	}
	closes := e.KeyWindowFrom.Add(w)
	if d := time.Until(closes); d > 0 {
		return fmt.Sprintf(" (no re-fire after %s, in %s)", closes.UTC().Format(time.RFC3339), d.Round(time.Minute))
	}
	return fmt.Sprintf(" (key window closed %s ago)", (-time.Until(closes)).Round(time.Minute))
}

func newEventsCmd(a *app) *cobra.Command {
	var typ, aggregate, missing string
	var since time.Duration
	var limit int
	cmd := &cobra.Command{
		Use:   "events [event id]",
		Short: "Events with the effects each produced; events lacking an expected effect",
		Long: `List events, newest first, each with its effects' kinds and states, or one
event by id. Filters: --type, --aggregate TYPE:ID (or TYPE), --since, and
--missing-kind KIND for events that have no effect of that kind (an effect
the application should have enqueued). outbox_events carries no secondary
index (enqueueing pays for none), so this reads the whole table: expect it
to take longer than the other commands on large tables.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f := outboxtype.EventFilter{Type: typ, MissingKind: missing, Limit: limit}
			if aggregate != "" {
				f.AggregateType, f.AggregateID, _ = strings.Cut(aggregate, ":")
			}
			if since > 0 {
				f.Since = time.Now().Add(-since)
			}
			if len(args) == 1 {
				id, err := uuid.Parse(args[0])
				if err != nil {
					return cli.Usagef("%q is not an event id (UUID)", args[0])
				}
				f.ID = id
			}
			if limit <= 0 {
				return cli.Usagef("--limit must be positive")
			}
			ctx := cmd.Context()
			if err := a.open(ctx); err != nil {
				return err
			}
			events, err := a.op.Events(ctx, f)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if a.JSON {
				return printJSON(out, events)
			}
			if f.ID != uuid.Nil && len(events) == 0 {
				return fmt.Errorf("no event with id %s in schema %q", f.ID, a.Schema)
			}
			tw := table(out)
			fmt.Fprintln(tw, "EVENT\tCREATED\tTYPE\tAGGREGATE\tEFFECTS")
			for _, ev := range events {
				var effects []string
				for _, e := range ev.Effects {
					effects = append(effects, e.Kind+"="+string(e.State))
				}
				if len(effects) == 0 {
					effects = []string{"(none)"}
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s:%s\t%s\n", ev.ID, ev.CreatedAt.UTC().Format(time.RFC3339), ev.Type,
					ev.AggregateType, ev.AggregateID, strings.Join(effects, " "))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&typ, "type", "", "event type, e.g. order.paid")
	cmd.Flags().StringVar(&aggregate, "aggregate", "", "aggregate as TYPE:ID (or TYPE)")
	cmd.Flags().StringVar(&missing, "missing-kind", "", "only events without an effect of this kind")
	cmd.Flags().DurationVar(&since, "since", 0, "only events created within this long")
	cmd.Flags().IntVar(&limit, "limit", 50, "at most this many events")
	return cmd
}

func newDispatchersCmd(a *app) *cobra.Command {
	var limit int
	cmd := &cobra.Command{
		Use:   "dispatchers",
		Short: "The outboxd processes that ran against this schema and the settings each used",
		Long: `List the outboxd run processes recorded in this schema, most recently seen
first: state (running; stopped; silent: it stopped reporting without
stopping, as a killed process does), when started, last seen (refreshed
every 30s), how many dispatch jobs River marks running under it, what its
per-destination gates hold back (a webhook host whose circuit breaker is
open, or that is at its --webhook-max-per-host cap with effects waiting;
refreshed within seconds of a change), and the settings each dispatched with: providers and their API hosts, key windows,
in-doubt policies, limits and timeouts (never secrets). Jobs left running by
a process that is not running are named below the table: they wait for
River's rescue (--rescue-after). --json prints everything in full.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if err := a.open(ctx); err != nil {
				return err
			}
			ds, err := a.op.Dispatchers(ctx, limit)
			if err != nil {
				return err
			}
			running, err := a.op.RunningJobs(ctx)
			if err != nil {
				return err
			}
			now := time.Now()
			held := make(map[string]outboxtype.RunningJobs, len(running))
			for _, r := range running {
				held[r.HeldBy] = r
			}
			type row struct {
				outboxtype.DispatcherRecord
				State       string `json:"state"`
				RunningJobs int    `json:"running_jobs"`
			}
			rows := make([]row, len(ds))
			for i, d := range ds {
				rows[i] = row{d, holderState(d, now), held[d.ID].Jobs}
				delete(held, d.ID)
			}
			for holder, r := range held {
				// Jobs under a River client outboxd did not record (an
				// older outboxd, or another client): a row of their own.
				rows = append(rows, row{outboxtype.DispatcherRecord{ID: holder, SeenAt: r.Oldest}, "not recorded", r.Jobs})
			}
			out := cmd.OutOrStdout()
			if a.JSON {
				return printJSON(out, rows)
			}
			tw := table(out)
			fmt.Fprintln(tw, "ID\tSTATE\tSTARTED\tLAST SEEN\tRUNNING JOBS\tSETTINGS")
			var left []string
			for _, r := range rows {
				if r.State != "running" {
					continue
				}
				for _, dest := range r.Destinations {
					text := destinationText(dest, now)
					if text == "" {
						text = fmt.Sprintf("%d in flight", dest.InFlight)
					}
					left = append(left, fmt.Sprintf("%s: destination %s %s", r.ID, oncall.DestinationName(dest), text))
				}
			}
			for _, r := range rows {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s ago\t%d\t%s\n", r.ID, r.State, r.StartedAt.UTC().Format(time.RFC3339), ago(r.SeenAt), r.RunningJobs, r.Settings)
				if r.RunningJobs > 0 && r.State != "running" && r.State != "not recorded" {
					left = append(left, fmt.Sprintf("%s (%s) left %d dispatch jobs running, the oldest attempted %s ago: River rescues them once they have run "+
						"for --rescue-after, and their effects are re-fired with the same key (or parked, at_most_once); `outboxctl stuck` lists them",
						r.ID, r.State, r.RunningJobs, ago(held0(running, r.ID).Oldest)))
				}
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			for _, l := range left {
				fmt.Fprintln(out, "\n"+l)
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 20, "at most this many")
	return cmd
}
