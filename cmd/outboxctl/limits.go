package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/outboxd/outboxd/internal/cli"
	"github.com/outboxd/outboxd/outboxtype"
)

func newLimitsCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "limits",
		Short: "Rate limits shared by every replica: rates, pauses, waiting effects",
		Long: `List every rate limit key (a Stripe or SendGrid account, a webhook host) as
all replicas share it: the rate set for it and by whom (default: the
provider's published limit; config: outboxd run --limit; operator:<name>:
"outboxctl limits set"), the rate it may take now (lowered by 429s and
503s, climbing back), the pause a 429 or 503 put on it, the 429s and 503s
and the requests it let through, and the effects waiting for it. Waiting is not an attempt: it
spends none of an effect's retry budget. See docs/limits.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if err := a.open(ctx); err != nil {
				return err
			}
			limits, err := a.op.Limits(ctx)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if a.JSON {
				return printJSON(out, limits)
			}
			if len(limits) == 0 {
				fmt.Fprintln(out, "no rate limits: no key has a rate, and no provider answered 429")
				return nil
			}
			now := time.Now()
			tw := table(out)
			fmt.Fprintln(tw, "KEY\tRATE\tSET BY\tNOW\tPAUSED\t429s+503s\tLET THROUGH\tWAITING")
			for _, l := range limits {
				rate, by, now1, paused, waiting := "-", "-", "-", "-", "0"
				if l.Rate != nil {
					rate, by = outboxtype.RateText(*l.Rate, l.InAnySecond), l.RateSource
				}
				if l.CurrentRate > 0 {
					now1 = perSecond(l.CurrentRate)
				}
				if l.PausedUntil != nil {
					paused = fmt.Sprintf("for %.1fs", max(0, l.PausedUntil.Sub(now).Seconds()))
				}
				if l.WaitingEffects > 0 {
					waiting = fmt.Sprintf("%d, longest %s", l.WaitingEffects, now.Sub(*l.WaitingSince).Round(time.Second))
					provider, _, _ := strings.Cut(l.Key, ":")
					if closes := l.KeyWindowCloses(a.keyWindow(provider)); !closes.IsZero() {
						// Named before it closes: past it, the effect
						// fails for reconciliation instead of waiting.
						waiting += "; a key window closes in " + closes.Sub(now).Round(time.Minute).String()
						if closes.Sub(now) < time.Hour {
							waiting += " (WARNING: raise the rate, or check the provider)"
						}
					}
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", l.Key, rate, by, now1, paused, l.Throttles, l.Granted, waiting)
			}
			return tw.Flush()
		},
	}
	cmd.AddCommand(newLimitsSetCmd(a), newLimitsResumeCmd(a), newLimitsHistoryCmd(a))
	return cmd
}

// perSecond is a rate for people: a tenth of a unit from 1/s up, three
// significant digits below (a replay's pace of 0.01/s is not "0/s").
func perSecond(r float64) string { return outboxtype.RateText(r, false) }

func newLimitsSetCmd(a *app) *cobra.Command {
	var (
		reason      string
		resume      bool
		inAnySecond bool
	)
	cmd := &cobra.Command{
		Use:   "set <key> <rate/s | none> --reason TEXT",
		Short: "Set a limit key's rate for every replica, audited",
		Long: `Set the rate of a limit key, in requests a second, for every replica (each
reads it within a second): "stripe:live-a1b2 60", "webhook:api.partner.example
20", or "none" to leave the key no rate of its own (it then slows only when
the provider answers 429). The rate is kept over the rates replicas are
started with (--limit) until set again. --in-any-second holds the rate as
"at most N in any second", as partners often state theirs, instead of as
an average (no burst after a quiet spell; requests a twentieth further
apart; N a whole number). --resume also ends the pause a 429 put on the
key. Keys are those "outboxctl limits" lists; a new key is a
provider's name, a colon and what it limits by.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			key := args[0]
			name, rest, ok := strings.Cut(key, ":")
			if !ok || name == "" || rest == "" {
				return cli.Usagef("%.80q: a limit key is <provider>:<what it limits>, as `outboxctl limits` lists them (e.g. webhook:api.partner.example)", key)
			}
			if err := outboxtype.CheckLimitKey(key); err != nil {
				return cli.Usagef("limit key %.80q: %w", key, err)
			}
			var rate *float64
			if args[1] != "none" {
				r, err := strconv.ParseFloat(strings.TrimSuffix(args[1], "/s"), 64)
				if err != nil || !(r > 0) || math.IsInf(r, 0) {
					return cli.Usagef("rate %q: give requests a second (e.g. 50), or none", args[1])
				}
				rate = &r
			}
			if inAnySecond {
				if rate == nil {
					return cli.Usagef("--in-any-second holds a rate: give one (e.g. 4), not none")
				}
				if err := outboxtype.CheckRateInAnySecond(*rate); err != nil {
					return cli.Usagef("rate %w", err)
				}
			}
			if strings.TrimSpace(reason) == "" {
				return cli.Usagef("--reason is required: say why the rate changes")
			}
			ctx := cmd.Context()
			if err := a.open(ctx); err != nil {
				return err
			}
			before, err := a.op.SetLimit(ctx, key, rate, inAnySecond, a.actor(), reason, resume)
			if err != nil {
				return err
			}
			from, to := "none", "none"
			if before != nil {
				from = perSecond(*before)
			}
			if rate != nil {
				to = outboxtype.RateText(*rate, inAnySecond)
			}
			out := cmd.OutOrStdout()
			if a.JSON {
				return printJSON(out, map[string]any{"key": key, "from_rate": before, "to_rate": rate, "in_any_second": inAnySecond, "resumed": resume})
			}
			fmt.Fprintf(out, "limit %s: %s -> %s", key, from, to)
			if resume {
				fmt.Fprint(out, ", pause ended")
			}
			fmt.Fprintln(out, " (every replica within a second)")
			return nil
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why (required, audited)")
	cmd.Flags().BoolVar(&resume, "resume", false, "also end the pause a 429 put on the key")
	cmd.Flags().BoolVar(&inAnySecond, "in-any-second", false, "hold the rate as at most that many requests in any second, not as an average")
	return cmd
}

func newLimitsResumeCmd(a *app) *cobra.Command {
	var (
		reason string
		all    bool
	)
	cmd := &cobra.Command{
		Use:   "resume <key>... | --all --reason TEXT",
		Short: "Lift a limit key's hold now: its pause ends and what waits for it goes out, audited",
		Long: `End the pause of each key (a 429's, a broker out of reach, a disabled
endpoint's hold) and its lowered rate, for every replica, and make the
effects waiting for it due at once: about a second later, once every
replica has read the key again, at the key's rate (at most 10,000 a key
per call; the rest at the time they were given). --all lifts every key
that is paused or has effects waiting. A disabled endpoint holds its
deliveries again at their next attempt: enable it with "outboxctl
endpoints enable". With --shard-database, --all-shards lifts the keys
once in the place every shard shares and makes the waiting effects of
every shard due (--all: the keys any shard waits for); --shard NAME
makes only that shard's due.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if all == (len(args) > 0) {
				return cli.Usagef("name the keys to resume (as `outboxctl limits` lists them), or give --all")
			}
			if strings.TrimSpace(reason) == "" {
				return cli.Usagef("--reason is required: say why the hold is lifted")
			}
			ctx := cmd.Context()
			// Each shard's waiting effects, for --all-shards; the first
			// shard's operator lifts the keys in the shared place.
			shards := []cli.Shard{{}}
			if a.fleet.All {
				shards = a.fleet.shards
			} else if err := a.open(ctx); err != nil {
				return err
			}
			known := map[string]bool{}
			var keys []string
			for i, sh := range shards {
				if a.fleet.All {
					if err := a.openShard(ctx, sh); err != nil {
						return fmt.Errorf("shard %s: %w", sh.Name, err)
					}
				}
				reports, err := a.op.Limits(ctx)
				if err != nil {
					return err
				}
				for _, l := range reports {
					if all && !known[l.Key] && l.Holding(time.Now()) {
						keys = append(keys, l.Key)
					}
					known[l.Key] = true
				}
				if i == len(shards)-1 && a.fleet.All {
					if err := a.openShard(ctx, shards[0]); err != nil {
						return fmt.Errorf("shard %s: %w", shards[0].Name, err)
					}
				}
			}
			for _, k := range args {
				if !known[k] {
					return cli.Usagef("%q is no limit key: `outboxctl limits` lists them", k)
				}
				keys = append(keys, k)
			}
			out := cmd.OutOrStdout()
			if len(keys) == 0 {
				if a.JSON {
					return printJSON(out, map[string]int{})
				}
				fmt.Fprintln(out, "no limit key is paused or has effects waiting")
				return nil
			}
			woken, err := a.op.ResumeLimits(ctx, keys, a.actor(), reason)
			if err != nil {
				return err
			}
			if !a.fleet.All {
				if a.JSON {
					return printJSON(out, woken)
				}
				for _, k := range keys {
					fmt.Fprintf(out, "limit %s resumed: %d waiting effects go out now\n", k, woken[k])
				}
				return nil
			}
			byShard := map[string]map[string]int{shards[0].Name: woken}
			for _, sh := range shards[1:] {
				if err := a.openShard(ctx, sh); err != nil {
					return fmt.Errorf("limits %s resumed; shard %s: %w", strings.Join(keys, ", "), sh.Name, err)
				}
				if byShard[sh.Name], err = a.op.WakeWaiting(ctx, keys); err != nil {
					return fmt.Errorf("limits %s resumed; shard %s: %w", strings.Join(keys, ", "), sh.Name, err)
				}
			}
			if a.JSON {
				return printJSON(out, byShard)
			}
			for _, k := range keys {
				total, parts := 0, make([]string, 0, len(shards))
				for _, sh := range shards {
					total += byShard[sh.Name][k]
					parts = append(parts, fmt.Sprintf("%s %d", sh.Name, byShard[sh.Name][k]))
				}
				fmt.Fprintf(out, "limit %s resumed: %d waiting effects go out now (%s)\n", k, total, strings.Join(parts, ", "))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why (required, audited)")
	cmd.Flags().BoolVar(&all, "all", false, "every key that is paused or has effects waiting")
	return cmd
}

func newLimitsHistoryCmd(a *app) *cobra.Command {
	var limit int
	cmd := &cobra.Command{
		Use:   "history [key]",
		Short: "Who changed which limit's rate, when and why",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if err := a.open(ctx); err != nil {
				return err
			}
			key := ""
			if len(args) == 1 {
				key = args[0]
			}
			changes, err := a.op.LimitHistory(ctx, key, limit)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if a.JSON {
				return printJSON(out, changes)
			}
			if len(changes) == 0 {
				fmt.Fprintln(out, "no changes of limits at run time")
				return nil
			}
			tw := table(out)
			fmt.Fprintln(tw, "AT\tKEY\tFROM\tTO\tBY\tREASON")
			for _, c := range changes {
				from, to := "none", "none"
				if c.FromRate != nil {
					from = perSecond(*c.FromRate)
				}
				if c.ToRate != nil {
					to = outboxtype.RateText(*c.ToRate, c.InAnySecond)
				}
				if c.Resumed {
					to += ", resumed"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", c.At.UTC().Format(time.RFC3339), c.Key, from, to, c.Actor, c.Reason)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 50, "at most this many")
	return cmd
}
