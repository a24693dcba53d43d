package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
)

func newTenantsCmd(a *app) *cobra.Command {
	var limit int
	cmd := &cobra.Command{
		Use:   "tenants",
		Short: "Fair shares: each tenant's effects waiting for their turn, and in flight",
		Long: `List the tenants (outbox.Effect.Tenant) that have effects waiting for a
place in their window, or in flight, by provider, the longest queue first:
QUEUED are due and wait for one of the tenant's effects to end, SCHEDULED
are not due yet, IN FLIGHT have a dispatch job (at most the tenant's window,
outboxd run --tenant-window and --tenant-weight). Waiting for a turn is not
an attempt. See docs/limits.md#fair-shares-between-tenants.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if err := a.open(ctx); err != nil {
				return err
			}
			tenants, err := a.op.Tenants(ctx, limit)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if a.JSON {
				return printJSON(out, tenants)
			}
			if len(tenants) == 0 {
				fmt.Fprintln(out, "no tenant has effects queued or in flight")
				return nil
			}
			now := time.Now()
			tw := table(out)
			fmt.Fprintln(tw, "PROVIDER\tTENANT\tQUEUED\tOLDEST\tSCHEDULED\tIN FLIGHT")
			for _, t := range tenants {
				oldest := "-"
				if t.OldestQueued != nil {
					oldest = now.Sub(*t.OldestQueued).Round(time.Second).String()
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%d\n", t.Provider, t.Tenant, t.Queued, oldest, t.Scheduled, t.InFlight)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 100, "at most this many tenants")
	return cmd
}
