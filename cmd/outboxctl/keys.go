package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/outboxd/outboxd/outbox/idempotency"
)

// keys: the Idempotency-Key middleware's stored keys (outbox/idempotency).

func newKeysCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "Idempotency keys of incoming requests: list, show, release a stuck claim",
		Long: `The keys stored by the Idempotency-Key middleware (package outbox/idempotency).

A key is scoped by caller, method and route. States: completed (the response
is stored and replayed to retries), failed (three-phase mode: the handler
failed or the key was released; the next request runs again), in_progress
(three-phase mode: a request holds the key until its lock deadline).`,
	}
	cmd.AddCommand(newKeysListCmd(a), newKeysShowCmd(a), newKeysReleaseCmd(a))
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
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s %s\t%s\t%s\n", k.ID, k.State, keyStatus(k), ago(k.CreatedAt),
					orDash(k.Scope), k.Method, k.Route, short(&k.Key, 40), keyExpiry(k))
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
	fl.StringVar(&f.State, "state", "", "only keys in this state: "+strings.Join(idempotency.States, ", "))
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
				{"id", k.ID.String()}, {"key", k.Key}, {"scope", orDash(k.Scope)}, {"route", k.Method + " " + k.Route},
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
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "released key %s (%s %s): in_progress -> failed; the next request with it runs again\n", k.ID, k.Method, k.Route)
			return nil
		},
	}
	cmd.Flags().StringVar(&o.Reason, "reason", "", "why, for the audit trail (required)")
	cmd.Flags().BoolVar(&o.Force, "force", false, "release a key whose lock has not expired (its request may still be running)")
	return cmd
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
