package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/outboxd/outboxd/internal/cli"
	"github.com/outboxd/outboxd/outbox/idempotency"
)

// keys: the Idempotency-Key middleware's stored keys (outbox/idempotency).

func newKeysCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "Idempotency keys of incoming requests: list, show, release or complete a stuck claim",
		Long: `The keys stored by the Idempotency-Key middleware (package outbox/idempotency).

A key is scoped by caller, method and route. States: completed (the response
is stored and replayed to retries), failed (three-phase mode: the handler
failed or the key was released; the next request runs again), in_progress
(three-phase mode: a request holds the key until its lock deadline).`,
	}
	cmd.AddCommand(newKeysListCmd(a), newKeysShowCmd(a), newKeysReleaseCmd(a), newKeysCompleteCmd(a))
	return cmd
}

func (a *app) keys(ctx context.Context) (*idempotency.Keys, error) {
	if err := a.open(ctx); err != nil {
		return nil, err
	}
	return idempotency.NewKeys(a.pool, a.Schema)
}

func newKeysListCmd(a *app) *cobra.Command {
	var f idempotency.Filter
	var after string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "Stored keys, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if after != "" {
				id, err := uuid.Parse(after)
				if err != nil {
					return fmt.Errorf("--after %q: pass the id of the last key of the previous page", after)
				}
				f.After = &id
			}
			ks, err := a.keys(cmd.Context())
			if err != nil {
				return err
			}
			list, err := ks.List(cmd.Context(), f)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if a.JSON {
				return printJSON(out, list)
			}
			tw := table(out)
			fmt.Fprintln(tw, "ID\tSTATE\tSTATUS\tAGE\tSCOPE\tMETHOD ROUTE\tKEY\tEXPIRES")
			for _, k := range list {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.State, keyStatus(k), ago(k.CreatedAt),
					orDash(k.Scope), routeLabel(k), short(&k.Key, 40), keyExpiry(k))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if f.Limit > 0 && len(list) == f.Limit {
				fmt.Fprintf(out, "more: --after %s\n", list[len(list)-1].ID)
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.State, "state", "", "only keys in this state: "+strings.Join(idempotency.States(), ", "))
	fl.StringVar(&f.Scope, "scope", "", "only this caller scope")
	fl.StringVar(&f.Route, "route", "", `only this route, e.g. "POST /orders"`)
	fl.StringVar(&f.Key, "key", "", "only this key (as the client sent it)")
	fl.StringVar(&after, "after", "", "continue after this key id (the last of the previous page)")
	fl.IntVar(&f.Limit, "limit", 50, "at most this many")
	return cmd
}

func newKeysShowCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "show ID",
		Short: "One key: scope, route, state, stored response, expiry and audit trail",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ks, id, err := a.keyArg(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			k, audit, err := ks.Get(cmd.Context(), id)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if a.JSON {
				return printJSON(out, map[string]any{"key": k, "audit": audit})
			}
			tw := table(out)
			for _, row := range [][2]string{
				{"id", k.ID.String()}, {"key", k.Key}, {"scope", orDash(k.Scope)}, {"route", routeLabel(k)},
				{"state", k.State}, {"response", keyStatus(k) + fmt.Sprintf(" (%d bytes stored)", k.BodyBytes)},
				{"error", orDash(k.Error)}, {"created", k.CreatedAt.UTC().Format(time.RFC3339) + " (" + ago(k.CreatedAt) + " ago)"},
				{"updated", k.UpdatedAt.UTC().Format(time.RFC3339)}, {"locked until", lockNote(k)}, {"expires", keyExpiry(k)},
				{"fingerprint", k.Fingerprint},
			} {
				fmt.Fprintf(tw, "%s:\t%s\n", row[0], row[1])
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if len(audit) > 0 {
				fmt.Fprintln(out, "\naudit:")
				for _, e := range audit {
					fmt.Fprintf(out, "  %s %s by %s (%s -> %s): %s\n", e.CreatedAt.UTC().Format(time.RFC3339), e.Action, e.Actor, e.FromState, e.ToState, e.Reason)
				}
			}
			return nil
		},
	}
}

func newKeysReleaseCmd(a *app) *cobra.Command {
	var o idempotency.ReleaseOpts
	cmd := &cobra.Command{
		Use:   "release ID --reason TEXT",
		Short: "Release a stuck in_progress key so that the client's retry runs again",
		Long: `Mark an in_progress key (three-phase mode) failed, audited with actor and
reason, so that the next request with it runs the handler again.

Only in_progress keys can be released. A key whose lock deadline has not
passed may belong to a request still running: releasing it lets a retry run
the handler a second time, so it needs --force. A key past its deadline is
taken over by the next retry anyway; release it to record why.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ks, id, err := a.keyArg(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			o.Actor = a.actor()
			k, err := ks.Release(cmd.Context(), id, o)
			if err != nil {
				return keyFlagError(err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "released key %s (%s): in_progress -> failed; the next request with it runs again\n", k.ID, routeLabel(k))
			return nil
		},
	}
	cmd.Flags().StringVar(&o.Reason, "reason", "", "why, for the audit trail (required)")
	cmd.Flags().BoolVar(&o.Force, "force", false, "release a key whose lock has not expired (its request may still be running)")
	return cmd
}

func newKeysCompleteCmd(a *app) *cobra.Command {
	var o idempotency.CompleteOpts
	var body, bodyFile string
	var headers []string
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "complete ID --status N --body JSON --reason TEXT",
		Short: "Record the response of a request that succeeded but was never stored",
		Long: `Mark an in_progress or failed key completed with the response its request
gave (or should have given), audited with actor and reason: the client's
retries get that response and the handler does not run again.

Use it after a crash in three-phase mode between the handler's own commit
(the payout was made) and the middleware storing the response, once you
have checked that the request did succeed. To let a retry run the handler
again instead, use release. A key whose lock deadline has not passed may
belong to a request still running: it needs --force.

  outboxctl keys complete 0190… --status 201 --body '{"id": "po_42"}' \
      --header 'Content-Type: application/json' --reason "po_42 paid, seen at the bank"`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case body != "" && bodyFile != "":
				return cli.Usagef("--body and --body-file: give one")
			case bodyFile != "":
				b, err := os.ReadFile(bodyFile)
				if err != nil {
					return cli.Usagef("--body-file: %v", err)
				}
				o.Body = b
			default:
				o.Body = []byte(body)
			}
			o.Headers = http.Header{}
			for _, h := range headers {
				name, value, ok := strings.Cut(h, ":")
				if !ok || strings.TrimSpace(name) == "" {
					return cli.Usagef("--header %q: write it as 'Name: value'", h)
				}
				o.Headers.Add(strings.TrimSpace(name), strings.TrimSpace(value))
			}
			if o.Headers.Get("Content-Type") == "" && len(o.Body) > 0 && json.Valid(o.Body) {
				o.Headers.Set("Content-Type", "application/json")
			}
			ks, id, err := a.keyArg(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if dryRun {
				k, _, err := ks.Get(cmd.Context(), id)
				if err != nil {
					return err
				}
				fmt.Fprintf(out, "dry run: key %s (%s) is %s; would record HTTP %d with %d bytes for its retries to receive\n",
					k.ID, routeLabel(k), k.State, o.Status, len(o.Body))
				return nil
			}
			o.Actor = a.actor()
			k, err := ks.Complete(cmd.Context(), id, o)
			if err != nil {
				return keyFlagError(err)
			}
			kept := "kept forever"
			if k.ExpiresAt != nil {
				kept = "kept until " + k.ExpiresAt.UTC().Format(time.RFC3339) + ", after which a retry runs the handler again"
			}
			fmt.Fprintf(out, "completed key %s (%s) with HTTP %d: retries with it receive this response; the handler does not run again (%s)\n",
				k.ID, routeLabel(k), o.Status, kept)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&o.Status, "status", 0, "the HTTP status the request answered (required, below 500)")
	fl.StringVar(&body, "body", "", "the response body")
	fl.StringVar(&bodyFile, "body-file", "", "read the response body from this file")
	fl.StringArrayVar(&headers, "header", nil, "a response header, 'Name: value' (repeatable; JSON bodies get Content-Type: application/json)")
	fl.StringVar(&o.Reason, "reason", "", "how you know the request succeeded, for the audit trail (required)")
	fl.BoolVar(&o.Force, "force", false, "complete a key whose lock has not expired (its request may still be running)")
	fl.DurationVar(&o.RenewFor, "renew-for", 0, "keep the key this much longer from now (required for a key past its retention)")
	fl.BoolVar(&dryRun, "dry-run", false, "say what would be recorded, change nothing")
	return cmd
}

// routeLabel is a key's method and route as one label: routes recorded
// from a method pattern ("POST /payouts") carry the method already.
func routeLabel(k *idempotency.Key) string {
	if strings.HasPrefix(k.Route, k.Method+" ") {
		return k.Route
	}
	return k.Method + " " + k.Route
}

// keyArg parses a key id argument, then opens the keys of the schema.
func (a *app) keyArg(ctx context.Context, arg string) (*idempotency.Keys, uuid.UUID, error) {
	id, err := uuid.Parse(arg)
	if err != nil {
		return nil, id, errors.New("pass a key's id (the ID column of `outboxctl keys list`; find a client's key with --key)")
	}
	ks, err := a.keys(ctx)
	return ks, id, err
}

func keyStatus(k *idempotency.Key) string {
	if k.Status == nil {
		return "-"
	}
	return fmt.Sprintf("HTTP %d", *k.Status)
}

func keyExpiry(k *idempotency.Key) string {
	if k.ExpiresAt == nil {
		return "never"
	}
	if d := time.Until(*k.ExpiresAt); d > 0 {
		return "in " + ago(time.Now().Add(-d))
	}
	return "expired " + ago(*k.ExpiresAt) + " ago (new to the next request; purged by outboxd)"
}

func lockNote(k *idempotency.Key) string {
	if k.LockedUntil == nil {
		return "-"
	}
	if d := time.Until(*k.LockedUntil); d > 0 {
		return fmt.Sprintf("%s (in %s: its request may still be running)", k.LockedUntil.UTC().Format(time.RFC3339), ago(time.Now().Add(-d)))
	}
	return k.LockedUntil.UTC().Format(time.RFC3339) + " (passed: the next retry takes the key over)"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// keyFlags are the key store's options (idempotency.OptionError) as this
// command's flags.
var keyFlags = map[string]string{"Reason": "--reason", "Actor": "--actor", "Force": "pass --force", "RenewFor": "--renew-for 24h"}

// keyFlagError says a refusal of the key store with the flag that answers it.
func keyFlagError(err error) error {
	var oe *idempotency.OptionError
	if errors.As(err, &oe) {
		if flag, ok := keyFlags[oe.Option]; ok {
			return fmt.Errorf("%s (%s)", oe.Msg, flag)
		}
	}
	return err
}
