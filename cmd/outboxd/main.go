// Command outboxd dispatches the side effects recorded by package outbox:
// River workers fire each effect at its provider with an idempotency key,
// retry what can be retried, and record the outcome.
//
//	outboxd migrate   apply River's and outboxd's migrations
//	outboxd run       dispatch until SIGTERM or SIGINT, then drain
//	outboxd demo      show an effect's path end to end, locally
//
// Every flag can also be set by the environment variable shown in --help.
package main

import (
	"io"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"

	"github.com/outboxd/outboxd/internal/cli"
	"github.com/outboxd/outboxd/internal/envflag"
)

func main() { cli.Main("outboxd", newRootCmd()) }

// globalConfig holds the settings every subcommand shares.
type globalConfig struct {
	*cli.Database
	LogFormat string
	LogLevel  string
}

func newRootCmd() *cobra.Command {
	root, db := cli.NewRoot("outboxd", "Dispatch outbox side effects effectively once")
	g := &globalConfig{Database: db}
	pf := root.PersistentFlags()
	pf.StringVar(&g.LogFormat, "log-format", "text", "log format: text or json")
	envflag.Bind(pf, "log-format", "OUTBOXD_LOG_FORMAT")
	pf.StringVar(&g.LogLevel, "log-level", "info", "log level: debug, info, warn or error")
	envflag.Bind(pf, "log-level", "OUTBOXD_LOG_LEVEL")
	root.AddCommand(newMigrateCmd(g), newRunCmd(g), newDemoCmd(g))
	return root
}

// logger builds the process logger from the global settings.
func (g *globalConfig) logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(g.LogLevel)); err != nil {
		return nil, cli.Usagef("--log-level (OUTBOXD_LOG_LEVEL): %q is not debug, info, warn or error", g.LogLevel)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(g.LogFormat) {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, cli.Usagef("--log-format (OUTBOXD_LOG_FORMAT): %q is not text or json", g.LogFormat)
	}
}
