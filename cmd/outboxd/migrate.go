package main

import (
	"github.com/spf13/cobra"

	"github.com/outboxd/outboxd/internal/cli"
)

func newMigrateCmd(g *globalConfig) *cobra.Command {
	return &cobra.Command{
		Use:   "migrate",
		Short: "Apply River's and outboxd's migrations to the schema (safe to repeat)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cli.Migrate(cmd.Context(), cmd.OutOrStdout(), g.URL, g.Schema)
		},
	}
}
