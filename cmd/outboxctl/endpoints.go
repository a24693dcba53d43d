package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/outboxd/outboxd/internal/cli"
	"github.com/outboxd/outboxd/internal/envflag"
	"github.com/outboxd/outboxd/providers/endpoint"
	"github.com/outboxd/outboxd/sideeffects"
)

// endpoints: the registry of webhook endpoints (providers/endpoint).

type endpointsApp struct {
	*app
	key string
}

func newEndpointsCmd(a *app) *cobra.Command {
	e := &endpointsApp{app: a}
	cmd := &cobra.Command{
		Use:   "endpoints",
		Short: "Webhook endpoints: list, create, edit, disable, enable, rotate, test",
		Long: `Registered webhook endpoints (docs/endpoints.md): each receives the events
whose types it subscribes to, signed with secrets of its own. An event
enqueued with a subscribers effect (outbox.ToSubscribers) is fanned out to
one delivery per endpoint subscribed when it commits.

Creating an endpoint or rotating its secret needs the key that seals the
secrets (--endpoint-key, OUTBOXD_ENDPOINT_KEY: the one outboxd run has).
Every change is audited with --actor and, where it changes deliveries,
--reason; those take --dry-run.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return e.list(cmd) },
	}
	cmd.PersistentFlags().StringVar(&e.key, "endpoint-key", "", "the key that seals endpoint secrets (needed by create and rotate)")
	envflag.Bind(cmd.PersistentFlags(), "endpoint-key", "OUTBOXD_ENDPOINT_KEY")
	envflag.Secret(cmd.PersistentFlags(), "endpoint-key")
	cmd.AddCommand(e.newKeyCmd(), e.createCmd(), e.showCmd(), e.editCmd(), e.disableCmd(), e.enableCmd(), e.rotateCmd(), e.resealCmd(), e.clientCertCmd(), e.testCmd())
	return cmd
}

// registry opens the database and returns the registry; sealing says the
// command needs the endpoint key.
func (e *endpointsApp) registry(ctx context.Context, sealing bool) (*endpoint.Registry, error) {
	var key *endpoint.Key
	if e.key != "" {
		k, err := endpoint.ParseKey(e.key)
		if err != nil {
			return nil, cli.Usagef("--endpoint-key (OUTBOXD_ENDPOINT_KEY): %v", err)
		}
		key = k
	} else if sealing {
		return nil, cli.Usagef("--endpoint-key (OUTBOXD_ENDPOINT_KEY) is required: the key outboxd run seals endpoint secrets with (outboxctl endpoints new-key prints a new one)")
	}
	if err := e.open(ctx); err != nil {
		return nil, err
	}
	allowed, err := cli.AllowedNetworks(e.Policies.WebhookAllowCIDRs)
	if err != nil {
		return nil, err
	}
	return endpoint.NewRegistry(endpoint.RegistryConfig{Schema: e.Schema, Key: key, AllowedNetworks: allowed})
}

// reasoned is what disable and enable start from: the endpoint named by
// arg, a reason (why says what to write), and the registry.
func (e *endpointsApp) reasoned(ctx context.Context, arg, reason, why string) (uuid.UUID, *endpoint.Registry, error) {
	if _, err := endpointArg(arg); err == nil && strings.TrimSpace(reason) == "" {
		return uuid.Nil, nil, cli.Usagef("--reason is required: %s", why)
	}
	return e.endpoint(ctx, arg, false)
}

// endpoint is the endpoint id arg names and the registry (sealing: the
// command needs the endpoint key).
func (e *endpointsApp) endpoint(ctx context.Context, arg string, sealing bool) (uuid.UUID, *endpoint.Registry, error) {
	id, err := endpointArg(arg)
	if err != nil {
		return uuid.Nil, nil, err
	}
	reg, err := e.registry(ctx, sealing)
	return id, reg, err
}

func endpointArg(arg string) (uuid.UUID, error) {
	id, err := uuid.Parse(arg)
	if err != nil {
		return uuid.Nil, cli.Usagef("%q: give an endpoint id, as outboxctl endpoints lists them", arg)
	}
	return id, nil
}

// failed turns the registry's refusals into usage errors that name the
// flag.
func failed(err error) error {
	var verr *endpoint.ValidationError
	switch {
	case errors.As(err, &verr):
		flag := map[string]string{"url": "--url", "event_types": "--types", "tenant": "--tenant", "description": "--description",
			"reason": "--reason", "actor": "--actor", "id": "--id", "max_in_flight": "--max-in-flight"}[strings.SplitN(verr.Field, "[", 2)[0]]
		if strings.HasPrefix(verr.Field, "headers") {
			flag = "--header"
		}
		if flag == "" {
			flag = verr.Field
		}
		return cli.Usagef("%s: %s", flag, verr.Problem)
	case errors.Is(err, endpoint.ErrNotFound):
		return cli.Usagef("no such endpoint: outboxctl endpoints lists them")
	}
	return err
}

func (e *endpointsApp) list(cmd *cobra.Command) error {
	ctx := cmd.Context()
	reg, err := e.registry(ctx, false)
	if err != nil {
		return err
	}
	eps, err := reg.List(ctx, e.pool, endpoint.ListFilter{})
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	if e.JSON {
		return printJSON(out, eps)
	}
	if len(eps) == 0 {
		fmt.Fprintln(out, "no endpoints: outboxctl endpoints create --url URL --types order.* registers one")
		return nil
	}
	tw := table(out)
	fmt.Fprintln(tw, "ID\tURL\tTENANT\tEVENT TYPES\tSTATE\tSECRETS")
	for _, ep := range eps {
		state := "enabled"
		switch {
		case ep.DisabledAt != nil:
			state = "disabled: " + ep.DisabledReason
		case ep.FailingSince != nil:
			state = "enabled, failing every delivery since " + ep.FailingSince.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\n", ep.ID, ep.URL, dash(ep.Tenant), strings.Join(ep.EventTypes, ","), state, len(ep.Secrets))
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (e *endpointsApp) newKeyCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "new-key",
		Short: "Print a new key to seal endpoint secrets with (OUTBOXD_ENDPOINT_KEY)",
		Long: `Print 32 random bytes in base64: give them to outboxd run and outboxctl as
OUTBOXD_ENDPOINT_KEY, from wherever your other secrets are kept. Secrets
created under one key do not open under another: keep it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), endpoint.NewKey())
			return err
		},
	}
}

// endpointFlags are what create and edit set.
type endpointFlags struct {
	url, tenant, description, id string
	types                        []string
	headers                      map[string]string
	rate                         float64
	maxInFlight                  int
}

func (f *endpointFlags) bind(cmd *cobra.Command, create bool) {
	fl := cmd.Flags()
	fl.StringVar(&f.url, "url", "", "where deliveries are POSTed (https)")
	fl.StringSliceVar(&f.types, "types", nil, "event types it receives: order.paid, order.* or * (comma-separated)")
	fl.StringVar(&f.description, "description", "", "what it is, for people")
	fl.StringToStringVar(&f.headers, "header", nil, "a header added to every request, Name=value (repeatable), e.g. Authorization=Bearer …")
	fl.IntVar(&f.maxInFlight, "max-in-flight", 0, "requests in flight to it at once, per outboxd process (0: only its host's cap)")
	fl.Float64Var(&f.rate, "rate", 0, "requests a second it may take, over every replica (its limit key endpoint:<id>, as outboxctl limits set)")
	if create {
		fl.StringVar(&f.tenant, "tenant", "", "whose endpoint it is: only that tenant's events reach it")
		fl.StringVar(&f.id, "id", "", "its id (default: a new one)")
	}
}

func (e *endpointsApp) createCmd() *cobra.Command {
	var f endpointFlags
	var reason string
	cmd := &cobra.Command{
		Use:   "create --url URL --types TYPES",
		Short: "Register an endpoint; its signing secret is printed once",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkRate(cmd, f.rate); err != nil {
				return err
			}
			ep := endpoint.Endpoint{URL: f.url, Tenant: f.tenant, Description: f.description, EventTypes: f.types, Headers: f.headers,
				MaxInFlight: f.maxInFlight}
			if f.id != "" {
				id, err := uuid.Parse(f.id)
				if err != nil {
					return cli.Usagef("--id %q: a UUID", f.id)
				}
				ep.ID = id
			}
			ctx := cmd.Context()
			reg, err := e.registry(ctx, true)
			if err != nil {
				return err
			}
			got, secret, err := reg.Create(ctx, e.pool, ep, endpoint.Change{Actor: e.actor(), Reason: reason})
			if err != nil {
				return failed(err)
			}
			if err := e.setRate(cmd, got.ID, f.rate, "set with the endpoint"); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if e.JSON {
				return printJSON(out, map[string]any{"endpoint": got, "secret": secret})
			}
			owner := "no tenant's"
			if got.Tenant != "" {
				owner = "tenant " + got.Tenant + "'s"
			}
			fmt.Fprintf(out, "endpoint %s created (%s): %s receives %s\n", got.ID, owner, got.URL, strings.Join(got.EventTypes, ", "))
			fmt.Fprintf(out, "signing secret (shown once; give it to the endpoint's owner): %s\n", secret)
			return nil
		},
	}
	f.bind(cmd, true)
	cmd.Flags().StringVar(&reason, "reason", "", "why (audited)")
	return cmd
}

func (e *endpointsApp) showCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "show <id>",
		Short: "An endpoint, its secrets' ages, its deliveries not yet ended and its history",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			id, reg, err := e.endpoint(ctx, args[0], false)
			if err != nil {
				return err
			}
			ep, err := reg.Get(ctx, e.pool, id)
			if err != nil {
				return failed(err)
			}
			open, err := reg.Deliveries(ctx, e.pool, id, 1000)
			if err != nil {
				return err
			}
			hist, err := reg.History(ctx, e.pool, id)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if e.JSON {
				return printJSON(out, map[string]any{"endpoint": ep, "open_deliveries": len(open), "history": hist})
			}
			fmt.Fprintf(out, "endpoint    %s\nurl         %s\ntenant      %s\nevent types %s\n", ep.ID, ep.URL, dash(ep.Tenant), strings.Join(ep.EventTypes, ", "))
			if ep.Description != "" {
				fmt.Fprintf(out, "description %s\n", ep.Description)
			}
			for name := range ep.Headers {
				fmt.Fprintf(out, "header      %s: (set)\n", name)
			}
			if ep.MaxInFlight > 0 {
				fmt.Fprintf(out, "in flight   at most %d at once per outboxd process\n", ep.MaxInFlight)
			}
			if c := ep.ClientCertificate; c != nil {
				fmt.Fprintf(out, "client cert %s (issued by %s, until %s)\n", c.Subject, c.Issuer, c.NotAfter.Format(time.RFC3339))
			}
			if ep.DisabledAt != nil {
				fmt.Fprintf(out, "state       disabled since %s: %s\n", ep.DisabledAt.Format(time.RFC3339), ep.DisabledReason)
			} else if ep.FailingSince != nil {
				fmt.Fprintf(out, "state       enabled, failing every delivery since %s\n", ep.FailingSince.Format(time.RFC3339))
			} else {
				fmt.Fprintln(out, "state       enabled")
			}
			for i, s := range ep.Secrets {
				if i == 0 && s.ExpiresAt == nil {
					fmt.Fprintf(out, "secret      current, created %s\n", s.CreatedAt.Format(time.RFC3339))
					continue
				}
				fmt.Fprintf(out, "secret      rotated, signs until %s\n", s.ExpiresAt.Format(time.RFC3339))
			}
			fmt.Fprintf(out, "open        %d deliveries pending or in flight (limit key %s)\n", len(open), endpoint.LimitKey(id))
			fmt.Fprintln(out, "\nhistory:")
			tw := table(out)
			for _, h := range hist {
				fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", h.CreatedAt.Format(time.RFC3339), h.Action, h.Actor, h.Reason)
			}
			return tw.Flush()
		},
	}
}

func (e *endpointsApp) editCmd() *cobra.Command {
	var (
		f      endpointFlags
		reason string
		dryRun bool
	)
	cmd := &cobra.Command{
		Use:   "edit <id> [--url URL] [--types TYPES] [--header Name=value] [--description TEXT]",
		Short: "Change an endpoint's URL, event types, headers or description",
		Long: `Change an endpoint. A new URL applies to its deliveries not yet sent, new
event types to events recorded from now on. --dry-run says what would change
and how many deliveries a new URL would move.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := endpointArg(args[0])
			if err != nil {
				return err
			}
			var u endpoint.Update
			fl := cmd.Flags()
			if fl.Changed("url") {
				u.URL = &f.url
			}
			if fl.Changed("description") {
				u.Description = &f.description
			}
			if fl.Changed("types") {
				u.EventTypes = f.types
			}
			if fl.Changed("header") {
				u.Headers = f.headers
			}
			if fl.Changed("max-in-flight") {
				u.MaxInFlight = &f.maxInFlight
			}
			if err := checkRate(cmd, f.rate); err != nil {
				return err
			}
			if u.URL == nil && u.Description == nil && u.EventTypes == nil && u.Headers == nil && u.MaxInFlight == nil && !fl.Changed("rate") {
				return cli.Usagef("nothing to change: give --url, --types, --header, --rate, --max-in-flight or --description")
			}
			ctx := cmd.Context()
			reg, err := e.registry(ctx, false)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if dryRun {
				return e.dryRun(ctx, out, reg, id, func(tx pgx.Tx) (string, error) {
					ep, err := reg.Edit(ctx, tx, id, u, endpoint.Change{Actor: e.actor(), Reason: reason})
					if err != nil {
						return "", err
					}
					return fmt.Sprintf("would become: %s receiving %s", ep.URL, strings.Join(ep.EventTypes, ", ")), nil
				})
			}
			ep, err := reg.Edit(ctx, e.pool, id, u, endpoint.Change{Actor: e.actor(), Reason: reason})
			if err != nil {
				return failed(err)
			}
			if err := e.setRate(cmd, id, f.rate, reason); err != nil {
				return err
			}
			if e.JSON {
				return printJSON(out, ep)
			}
			fmt.Fprintf(out, "endpoint %s: %s receives %s\n", ep.ID, ep.URL, strings.Join(ep.EventTypes, ", "))
			return nil
		},
	}
	f.bind(cmd, false)
	cmd.Flags().StringVar(&reason, "reason", "", "why (audited)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "say what would change; change nothing")
	return cmd
}

// checkRate refuses a --rate given that is not a positive rate.
func checkRate(cmd *cobra.Command, rate float64) error {
	if cmd.Flags().Changed("rate") && !(rate > 0 && rate < 1e9) {
		return cli.Usagef("--rate %v: give requests a second, e.g. 10", rate)
	}
	return nil
}

// setRate sets endpoint id's rate over every replica when --rate was
// given, audited as outboxctl limits set is.
func (e *endpointsApp) setRate(cmd *cobra.Command, id uuid.UUID, rate float64, reason string) error {
	if !cmd.Flags().Changed("rate") {
		return nil
	}
	if _, err := e.op.SetLimit(cmd.Context(), endpoint.LimitKey(id), &rate, false, e.actor(), cmp.Or(reason, "endpoint's rate"), false); err != nil {
		return fmt.Errorf("endpoint %s saved; its rate was not: %w (outboxctl limits set %s %v)", id, err, endpoint.LimitKey(id), rate)
	}
	return nil
}

// dryRun runs change in a transaction it rolls back, and says what it did
// and how many of the endpoint's deliveries are open.
func (e *endpointsApp) dryRun(ctx context.Context, out io.Writer, reg *endpoint.Registry, id uuid.UUID, change func(pgx.Tx) (string, error)) error {
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a dry run writes nothing
	what, err := change(tx)
	if err != nil {
		return failed(err)
	}
	open, err := reg.Deliveries(ctx, tx, id, sideeffects.MaxHeldDeliveries)
	if err != nil {
		return err
	}
	if e.JSON {
		return printJSON(out, map[string]any{"dry_run": true, "change": what, "open_deliveries": len(open)})
	}
	fmt.Fprintf(out, "dry run: %s; %d deliveries pending or in flight are affected; nothing changed\n", what, len(open))
	return nil
}

func (e *endpointsApp) disableCmd() *cobra.Command {
	var (
		reason string
		dryRun bool
	)
	cmd := &cobra.Command{
		Use:   "disable <id> --reason TEXT",
		Short: "Stop an endpoint's deliveries: new events skip it, open ones wait",
		Long: `Disable an endpoint: events recorded from now on are not fanned out to it,
and its deliveries already recorded wait (pending, spending no attempt) until
it is enabled, when they are delivered or dropped.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			id, reg, err := e.reasoned(ctx, args[0], reason, "say why the endpoint stops")
			if err != nil {
				return err
			}
			by := endpoint.Change{Actor: e.actor(), Reason: reason}
			out := cmd.OutOrStdout()
			if dryRun {
				return e.dryRun(ctx, out, reg, id, func(tx pgx.Tx) (string, error) {
					return "would disable " + id.String() + " (its open deliveries wait)", reg.Disable(ctx, tx, id, by)
				})
			}
			if err := reg.Disable(ctx, e.pool, id, by); err != nil {
				return failed(err)
			}
			if e.JSON {
				return printJSON(out, map[string]any{"endpoint": id, "disabled": true})
			}
			fmt.Fprintf(out, "endpoint %s disabled: new events skip it; its open deliveries wait until outboxctl endpoints enable\n", id)
			return nil
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why (required, audited)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "say what would change; change nothing")
	return cmd
}

func (e *endpointsApp) enableCmd() *cobra.Command {
	var (
		reason string
		drop   bool
		dryRun bool
	)
	cmd := &cobra.Command{
		Use:   "enable <id> --reason TEXT [--drop-held]",
		Short: "Let an endpoint receive again: deliver what it held, or drop it",
		Long: `Enable an endpoint. Its deliveries that waited while it was disabled go out
at once, with their keys (a receiver that saw one before deduplicates it by
webhook-id); or, with --drop-held, they are cancelled with --reason first,
each audited, and only new events reach it.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			id, reg, err := e.reasoned(ctx, args[0], reason, "say why the endpoint receives again")
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if dryRun {
				held, err := reg.Held(ctx, e.pool, id, sideeffects.MaxHeldDeliveries)
				if err != nil {
					return err
				}
				verb := "delivered at once"
				if drop {
					verb = "cancelled"
				}
				return e.dryRun(ctx, out, reg, id, func(tx pgx.Tx) (string, error) {
					var msg strings.Builder
					fmt.Fprintf(&msg, "would enable %s; its %d held deliveries %s", id, len(held), verb)
					if len(held) > 0 {
						fmt.Fprintf(&msg, ", recorded %s to %s:", held[0].CreatedAt.UTC().Format(time.RFC3339), held[len(held)-1].CreatedAt.UTC().Format(time.RFC3339))
						const shown = 20
						for _, h := range held[:min(len(held), shown)] {
							fmt.Fprintf(&msg, "\n  %s  event %s  %s  %s", h.EffectID, h.EventID, h.EventType, h.CreatedAt.UTC().Format(time.RFC3339))
						}
						if len(held) > shown {
							fmt.Fprintf(&msg, "\n  … and %d more (outboxctl list --kind endpoint:%s --state pending)", len(held)-shown, id)
						}
					}
					return msg.String(), reg.Enable(ctx, tx, id, endpoint.Change{Actor: e.actor(), Reason: reason})
				})
			}
			res, err := e.op.EnableEndpoint(ctx, reg, id, drop, e.actor(), reason)
			if err != nil {
				return failed(err)
			}
			if e.JSON {
				return printJSON(out, map[string]any{"endpoint": id, "enabled": true, "held": res.Held, "dropped": res.Dropped, "delivering": res.Delivering})
			}
			if drop {
				fmt.Fprintf(out, "endpoint %s enabled; %d held deliveries cancelled (%d could not be: in flight or ended)\n", id, res.Dropped, res.Held-res.Dropped)
				return nil
			}
			fmt.Fprintf(out, "endpoint %s enabled; %d held deliveries go out now\n", id, res.Delivering)
			return nil
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why (required, audited)")
	cmd.Flags().BoolVar(&drop, "drop-held", false, "cancel the deliveries it held instead of delivering them")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "say what would change; change nothing")
	return cmd
}

func (e *endpointsApp) rotateCmd() *cobra.Command {
	var overlap time.Duration
	var retire bool
	var reason string
	cmd := &cobra.Command{
		Use:   "rotate <id> [--overlap 24h | --retire-old]",
		Short: "Give an endpoint a new signing secret, printed once; the old one signs too for --overlap",
		Long: `Give an endpoint a new signing secret, printed once. The old one keeps
signing beside it for --overlap (at most a week), so that the receiver can
move to the new one. After a leak, --retire-old stops the old secret, and
every one rotated out before it, signing at once: the receiver must take
the new secret before its next delivery verifies.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := endpointArg(args[0])
			if err != nil {
				return err
			}
			switch {
			case retire && cmd.Flags().Changed("overlap"):
				return cli.Usagef("--retire-old and --overlap: choose one (--retire-old is no overlap at all)")
			case retire:
				overlap = endpoint.RetireAtOnce
			case overlap <= 0 || overlap > endpoint.MaxOverlap:
				return cli.Usagef("--overlap %s: give how long the old secret keeps signing, e.g. 24h, at most %s (the receiver moves to the new one meanwhile); after a leak, --retire-old", overlap, endpoint.MaxOverlap)
			}
			ctx := cmd.Context()
			reg, err := e.registry(ctx, true)
			if err != nil {
				return err
			}
			secret, err := reg.Rotate(ctx, e.pool, id, overlap, endpoint.Change{Actor: e.actor(), Reason: reason})
			if err != nil {
				return failed(err)
			}
			out := cmd.OutOrStdout()
			if e.JSON {
				until := time.Now().Add(max(overlap, 0))
				return printJSON(out, map[string]any{"endpoint": id, "secret": secret, "old_secret_until": until, "retired_old": retire})
			}
			fmt.Fprintf(out, "endpoint %s: new signing secret (shown once): %s\n", id, secret)
			if retire {
				fmt.Fprintln(out, "every earlier secret stopped signing: requests carry the new one only")
				return nil
			}
			fmt.Fprintf(out, "requests carry signatures by both until %s; then only the new one\n", time.Now().Add(overlap).Format(time.RFC3339))
			return nil
		},
	}
	cmd.Flags().DurationVar(&overlap, "overlap", endpoint.DefaultOverlap, "how long the old secret keeps signing beside the new one (at most a week)")
	cmd.Flags().BoolVar(&retire, "retire-old", false, "after a leak: every earlier secret stops signing at once")
	cmd.Flags().StringVar(&reason, "reason", "", "why (audited)")
	return cmd
}

func (e *endpointsApp) resealCmd() *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "reseal --reason TEXT",
		Short: "Seal every endpoint secret again with the first key of --endpoint-key, to retire an old key",
		Long: `To change the endpoint key: give every outboxd and outboxctl the list
"NEW,OLD" (OUTBOXD_ENDPOINT_KEY, new key first: new secrets are sealed with
it, and a secret opens with whichever key sealed it), run this command with
that list, then give them NEW alone. It seals every signing secret and
client certificate key sealed with another key of the list again with the
first (each endpoint changed is audited). Secrets keep their expiry; no
receiver sees a change.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if strings.TrimSpace(reason) == "" {
				return cli.Usagef("--reason is required: why the endpoint key changes")
			}
			ctx := cmd.Context()
			reg, err := e.registry(ctx, true)
			if err != nil {
				return err
			}
			res, err := reg.Reseal(ctx, e.pool, endpoint.Change{Actor: e.actor(), Reason: reason})
			if err != nil {
				return failed(err)
			}
			out := cmd.OutOrStdout()
			if e.JSON {
				return printJSON(out, res)
			}
			fmt.Fprintf(out, "resealed %d secrets and %d client certificate keys of %d endpoints with the first key: the others can be dropped from OUTBOXD_ENDPOINT_KEY\n",
				res.Secrets, res.ClientKeys, res.Endpoints)
			return nil
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why (required, audited)")
	return cmd
}

func (e *endpointsApp) clientCertCmd() *cobra.Command {
	var certFile, keyFile string
	var remove bool
	cmd := &cobra.Command{
		Use:   "client-cert <id> --cert FILE --key FILE | --remove",
		Short: "Give an endpoint a client certificate to present to its receiver (mutual TLS)",
		Long: `Set the certificate (PEM, with its chain) and private key (PEM) an endpoint
presents to its receiver when the receiver requires mutual TLS. The key is
sealed with the endpoint key (--endpoint-key) and never shown; outboxctl
endpoints show prints the certificate's subject and expiry.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := endpointArg(args[0])
			if err != nil {
				return err
			}
			var certPEM, keyPEM []byte
			switch {
			case remove && (certFile != "" || keyFile != ""):
				return cli.Usagef("--remove takes no --cert or --key")
			case !remove && (certFile == "" || keyFile == ""):
				return cli.Usagef("give --cert and --key (PEM files), or --remove")
			case !remove:
				if certPEM, err = os.ReadFile(certFile); err != nil {
					return cli.Usagef("--cert: %v", err)
				}
				if keyPEM, err = os.ReadFile(keyFile); err != nil {
					return cli.Usagef("--key: %v", err)
				}
			}
			ctx := cmd.Context()
			reg, err := e.registry(ctx, !remove)
			if err != nil {
				return err
			}
			if err := reg.SetClientCertificate(ctx, e.pool, id, certPEM, keyPEM, endpoint.Change{Actor: e.actor()}); err != nil {
				var verr *endpoint.ValidationError
				if errors.As(err, &verr) {
					return cli.Usagef("--cert/--key: %s", verr.Problem)
				}
				return failed(err)
			}
			out := cmd.OutOrStdout()
			if remove {
				fmt.Fprintf(out, "endpoint %s: client certificate removed\n", id)
				return nil
			}
			ep, err := reg.Get(ctx, e.pool, id)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "endpoint %s presents %s (issued by %s, until %s)\n", id, ep.ClientCertificate.Subject, ep.ClientCertificate.Issuer,
				ep.ClientCertificate.NotAfter.Format(time.RFC3339))
			return nil
		},
	}
	cmd.Flags().StringVar(&certFile, "cert", "", "the client certificate, PEM (with its chain)")
	cmd.Flags().StringVar(&keyFile, "key", "", "its private key, PEM")
	cmd.Flags().BoolVar(&remove, "remove", false, "remove the endpoint's client certificate")
	return cmd
}

func (e *endpointsApp) testCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "test <id>",
		Short: "Send an endpoint a test event (type " + endpoint.TestEventType + "), as any delivery",
		Long: `Record an event of type ` + endpoint.TestEventType + ` with one delivery to this endpoint,
whatever types it subscribes to: outboxd run sends it as any other (signed,
retried, shown by outboxctl show). Prints the delivery's effect id.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			id, reg, err := e.endpoint(ctx, args[0], false)
			if err != nil {
				return err
			}
			effect, err := reg.SendTest(ctx, e.pool, id, endpoint.Change{Actor: e.actor()})
			if err != nil {
				return failed(err)
			}
			out := cmd.OutOrStdout()
			if e.JSON {
				return printJSON(out, map[string]any{"effect_id": effect})
			}
			fmt.Fprintf(out, "test event recorded; its delivery is effect %s (outboxctl show %s)\n", effect, effect)
			return nil
		},
	}
}
