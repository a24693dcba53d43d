package main

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/outboxd/outboxd/internal/cli"
	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/sideeffects"
)

// replayFlags select a paced replay on retry: --failed-since and --pace.
type replayFlags struct {
	failedSince string
	pace        string
	host        string
	tenant      string
}

func (r *replayFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&r.failedSince, "failed-since", "", "replay, in the background, the effects that failed since then: a duration (2h) or a time (2026-11-26T02:00:00Z); needs --pace")
	fl.StringVar(&r.pace, "pace", "", "with --failed-since: effects retried a second, e.g. 20/s (at most 1000)")
	fl.StringVar(&r.host, "host", "", "with --failed-since: only effects whose failed attempts went to this host[:port]")
	fl.StringVar(&r.tenant, "tenant", "", "with --failed-since: only this tenant's effects")
}

func (r *replayFlags) set() bool {
	return r.failedSince != "" || r.pace != "" || r.host != "" || r.tenant != ""
}

// spec turns the flags (and the filters retry shares) into a replay.
func (r *replayFlags) spec(f *actFlags, args []string) (outboxtype.ReplaySpec, error) {
	var spec outboxtype.ReplaySpec
	switch {
	case r.failedSince == "":
		return spec, cli.Usagef("--pace, --host and --tenant go with --failed-since: replay the effects that failed since when?")
	case r.pace == "":
		return spec, cli.Usagef("--failed-since needs --pace: how many effects a second may go back to the providers (e.g. --pace 20/s)")
	case len(args) > 0:
		return spec, cli.Usagef("--failed-since selects the effects: give no effect ids with it")
	case len(f.states) > 0 || f.source != "" || f.since > 0 || f.olderThan > 0:
		return spec, cli.Usagef("--failed-since takes --kind, --provider, --host and --tenant; not --state, --source, --since or --older-than")
	case f.force:
		return spec, cli.Usagef("a replay never forces: effects near or past their key window are skipped; retry those by id with --force after checking the provider")
	case f.reason == "":
		return spec, cli.Usagef("--reason is required: it is recorded in the audit trail of every effect the replay retries")
	}
	since, err := parseSince(r.failedSince, time.Now())
	if err != nil {
		return spec, err
	}
	pace, err := parsePace("--pace", r.pace)
	if err != nil {
		return spec, err
	}
	spec = outboxtype.ReplaySpec{FailedSince: since, Kind: f.kind, Provider: f.provider, Host: r.host, Tenant: r.tenant, Pace: pace, AllowDuplicate: f.allowDuplicate}
	if err := sideeffects.CheckReplaySpec(spec); err != nil {
		return spec, cli.Usagef("%s", err)
	}
	return spec, nil
}

// parsePace reads a pace in effects a second ("20/s" or "20"); what names
// where it was given.
func parsePace(what, s string) (float64, error) {
	pace, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(s), "/s"), 64)
	if err != nil || math.IsNaN(pace) || math.IsInf(pace, 0) || pace <= 0 {
		return 0, cli.Usagef("%s %q: give effects a second, e.g. 20/s", what, s)
	}
	return pace, nil
}

// parseSince reads a duration before now ("2h") or a time (RFC 3339).
func parseSince(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return time.Time{}, cli.Usagef("--failed-since %q: give a positive duration (2h) or a time", s)
		}
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, cli.Usagef("--failed-since %q: give a duration (2h, 90m) or a time in RFC 3339 (2026-11-26T02:00:00Z)", s)
	}
	return t, nil
}

// startReplay is retry --failed-since: it starts a paced replay, or with
// --dry-run says what it would select.
func (a *app) startReplay(cmd *cobra.Command, spec outboxtype.ReplaySpec, f *actFlags) error {
	ctx := cmd.Context()
	if err := a.open(ctx); err != nil {
		return err
	}
	opts := a.opts(f)
	r, err := a.op.StartReplay(ctx, spec, opts)
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	if a.JSON {
		return printJSON(out, r)
	}
	took := time.Duration(float64(r.Selected) / spec.Pace * float64(time.Second)).Round(time.Second)
	if f.dryRun {
		fmt.Fprintf(out, "would replay %d failed effects at %s (about %s); nothing started (dry run)\n", r.Selected, perSecond(spec.Pace), took)
		return nil
	}
	fmt.Fprintf(out, "replay %d started: %d failed effects at %s (about %s), retried in the background by outboxd\n", r.ID, r.Selected, perSecond(spec.Pace), took)
	fmt.Fprintf(out, "follow it: outboxctl replays show %d\nstop it:   outboxctl replays cancel %d --reason TEXT\n", r.ID, r.ID)
	return nil
}

func newReplaysCmd(a *app) *cobra.Command {
	var limit int
	cmd := &cobra.Command{
		Use:   "replays",
		Short: "Paced replays (retry --failed-since --pace): progress, skips, pace, cancel",
		Long: `List paced replays, newest first: what each selects, its pace, how many
effects it has retried and skipped, and how many are left. Start one with
outboxctl retry --failed-since 2h --pace 20/s --reason TEXT. outboxd runs it
in the background (a restart resumes it where it stood); each effect is
retried with every refusal retry has, and skipped effects say why
("replays show"). See docs/replays.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if err := a.open(ctx); err != nil {
				return err
			}
			replays, err := a.op.Replays(ctx, limit)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if a.JSON {
				return printJSON(out, replays)
			}
			if len(replays) == 0 {
				fmt.Fprintln(out, "no replays: start one with outboxctl retry --failed-since 2h --pace 20/s --reason TEXT")
				return nil
			}
			tw := table(out)
			fmt.Fprintln(tw, "ID\tSTATE\tSELECTS\tPACE\tSELECTED\tRETRIED\tSKIPPED\tLEFT\tSTARTED\tBY")
			for _, r := range replays {
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\n", r.ID, replayState(r), r.Selects(), perSecond(r.Spec.Pace),
					r.Selected, r.Retried, r.Skipped, r.Left(), r.CreatedAt.UTC().Format(time.RFC3339), r.Actor)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 20, "at most this many replays")
	cmd.AddCommand(newReplaysShowCmd(a), newReplaysPaceCmd(a), newReplaysCancelCmd(a), newReplaysResumeCmd(a))
	return cmd
}

// replayState is r's state, with what an operator must know.
func replayState(r outboxtype.Replay) string {
	switch {
	case r.State != outboxtype.ReplayRunning:
		return r.State
	case r.Job == 0:
		return "running, no job (outboxctl replays resume)"
	case r.LastError != "":
		return "running, last step failed"
	}
	return r.State
}

// replayErr says what to do about err from reading or changing replay id.
func replayErr(err error, id int64) error {
	if errors.Is(err, sideeffects.ErrReplayNotFound) {
		return fmt.Errorf("no replay %d: outboxctl replays lists them", id)
	}
	return err
}

func parseReplayID(s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, cli.Usagef("%q is not a replay id: give the number outboxctl replays lists", s)
	}
	return id, nil
}

func newReplaysShowCmd(a *app) *cobra.Command {
	var limit int
	cmd := &cobra.Command{
		Use:   "show <id>",
		Short: "One replay: its selection, progress, and the effects it skipped and why",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseReplayID(args[0])
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if err := a.open(ctx); err != nil {
				return err
			}
			r, err := a.op.Replay(ctx, id)
			if err != nil {
				return replayErr(err, id)
			}
			skips, err := a.op.ReplaySkips(ctx, id, limit)
			if err != nil {
				return err
			}
			paces, err := a.op.ReplayPaces(ctx, id)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if a.JSON {
				return printJSON(out, struct {
					outboxtype.Replay
					Skips []outboxtype.ReplaySkip `json:"skips"`
					Paces []outboxtype.ReplayPace `json:"paces"`
				}{r, skips, paces})
			}
			tw := table(out)
			fmt.Fprintf(tw, "replay\t%d\n", r.ID)
			fmt.Fprintf(tw, "state\t%s\n", replayState(r))
			fmt.Fprintf(tw, "selects\t%s (failed before %s; acknowledged failures are not replayed)\n", r.Selects(), r.FailedBefore.UTC().Format(time.RFC3339))
			fmt.Fprintf(tw, "pace\t%s\n", perSecond(r.Spec.Pace))
			for _, p := range paces {
				fmt.Fprintf(tw, "\t%s from %s at %s by %s: %s\n", perSecond(p.Pace), perSecond(p.Previous), p.At.UTC().Format(time.RFC3339), p.Actor, p.Reason)
			}
			fmt.Fprintf(tw, "progress\t%d selected: %d retried, %d skipped, %d left", r.Selected, r.Retried, r.Skipped, r.Left())
			if r.Again > 0 {
				fmt.Fprintf(tw, " (%d to look at again: a River job was still running for them)", r.Again)
			}
			fmt.Fprintln(tw)
			if r.State == outboxtype.ReplayRunning && r.Left() > 0 {
				fmt.Fprintf(tw, "ends in\tabout %s\n", time.Duration(float64(r.Left())/r.Spec.Pace*float64(time.Second)).Round(time.Second))
			}
			fmt.Fprintf(tw, "started\t%s by %s: %s\n", r.CreatedAt.UTC().Format(time.RFC3339), r.Actor, r.Reason)
			if r.FinishedAt != nil {
				by := ""
				if r.CancelledBy != "" {
					by = " (cancelled by " + r.CancelledBy + ")"
				}
				fmt.Fprintf(tw, "finished\t%s%s\n", r.FinishedAt.UTC().Format(time.RFC3339), by)
			}
			if r.LastError != "" {
				fmt.Fprintf(tw, "last error\t%s (River retries the step)\n", r.LastError)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if len(skips) == 0 {
				return nil
			}
			fmt.Fprintln(out, "\nskipped:")
			tw = table(out)
			fmt.Fprintln(tw, "EFFECT\tKIND\tWHY")
			for _, k := range skips {
				why := k.Reason
				if k.Transient {
					why = "(will look again) " + why
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\n", k.EffectID, k.Kind, why)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 100, "at most this many skipped effects")
	return cmd
}

func newReplaysPaceCmd(a *app) *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "pace <id> <effects a second> --reason TEXT",
		Short: "Change a running replay's pace from its next step",
		Long: `Change how many effects a second a running replay retries, from its next
step: slower when a provider answers 429s or a receiver struggles, faster
when it copes. A replay waiting for its next step at a slow pace is woken.
The change, who made it and why are kept with the replay (replays show).`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseReplayID(args[0])
			if err != nil {
				return err
			}
			pace, err := parsePace("pace", args[1])
			if err != nil {
				return err
			}
			if err := sideeffects.CheckReplayPace(pace); err != nil {
				return cli.Usagef("%s", err)
			}
			if strings.TrimSpace(reason) == "" {
				return cli.Usagef("--reason is required: it is recorded with the replay")
			}
			ctx := cmd.Context()
			if err := a.open(ctx); err != nil {
				return err
			}
			previous, ok, err := a.op.SetReplayPace(ctx, id, pace, a.actor(), reason)
			if err != nil {
				return replayErr(err, id)
			}
			if !ok {
				r, err := a.op.Replay(ctx, id)
				if err != nil {
					return err
				}
				return fmt.Errorf("replay %d is %s, not running: its pace stays %s", id, r.State, perSecond(r.Spec.Pace))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "replay %d: pace %s, was %s, from its next step\n", id, perSecond(pace), perSecond(previous))
			return nil
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded with the replay (required)")
	return cmd
}

func newReplaysCancelCmd(a *app) *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "cancel <id> --reason TEXT",
		Short: "Stop a replay before its next step; what it retried stays retried",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseReplayID(args[0])
			if err != nil {
				return err
			}
			if strings.TrimSpace(reason) == "" {
				return cli.Usagef("--reason is required: it is recorded with the replay")
			}
			ctx := cmd.Context()
			if err := a.open(ctx); err != nil {
				return err
			}
			ok, err := a.op.CancelReplay(ctx, id, a.actor(), reason)
			if err != nil {
				return replayErr(err, id)
			}
			r, err := a.op.Replay(ctx, id)
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("replay %d is %s, not running: nothing to cancel", id, r.State)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "replay %d cancelled: %d retried stay retried; %d not looked at stay failed\n", id, r.Retried, r.Left())
			return nil
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded with the replay (required)")
	return cmd
}

func newReplaysResumeCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "resume <id>",
		Short: "Give a running replay whose River job is gone a new one",
		Long: `A running replay whose River job is gone (River discarded it after repeated
errors, or it was deleted) stands still; replays lists it as "no job".
resume inserts a new job, which goes on from where the replay stood. A
replay that has a live job is left as it is.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseReplayID(args[0])
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if err := a.open(ctx); err != nil {
				return err
			}
			inserted, err := a.op.ResumeReplay(ctx, id)
			if err != nil {
				return replayErr(err, id)
			}
			if !inserted {
				fmt.Fprintf(cmd.OutOrStdout(), "replay %d has a live job already: nothing to do\n", id)
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "replay %d resumed: a new job goes on from where it stood\n", id)
			return nil
		},
	}
}
