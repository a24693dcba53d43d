package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/outboxd/outboxd/internal/cli"
	"github.com/outboxd/outboxd/internal/migrate"
)

func newMigrateCmd(g *globalConfig) *cobra.Command {
	return &cobra.Command{
		Use:   "migrate",
		Short: "Apply River's and outboxd's migrations to the schema (safe to repeat)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			pool, err := cli.Connect(ctx, g.DatabaseURL, 4)
			if err != nil {
				return err
			}
			defer pool.Close()
			res, err := migrate.Up(ctx, pool, g.Schema)
			if err != nil {
				return err
			}
			if res == (migrate.Result{}) {
				fmt.Fprintf(cmd.OutOrStdout(), "schema %q is up to date\n", g.Schema)
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "schema %q: applied %d River and %d outboxd migrations\n",
				g.Schema, res.RiverApplied, res.OutboxApplied)
			return nil
		},
	}
}
