package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
)

// TestTheDocsGiveEveryFlagsDefault: docs/operating.md's table of outboxd
// run's settings names each flag with the default --help shows, and the
// environment variable it reads.
func TestTheDocsGiveEveryFlagsDefault(t *testing.T) {
	doc, err := os.ReadFile("../../docs/operating.md")
	require.NoError(t, err)
	root := newRootCmd()
	run, _, err := root.Find([]string{"run"})
	require.NoError(t, err)
	flags := pflag.NewFlagSet("all", pflag.ContinueOnError)
	flags.AddFlagSet(run.Flags())
	flags.AddFlagSet(root.PersistentFlags())

	row := regexp.MustCompile("(?m)^\\| `--([a-z0-9-]+)` \\| `([A-Z0-9_]+)` \\| ([^|]+) \\|")
	firstCode := regexp.MustCompile("^`([^`]*)`")
	checked := 0
	for _, m := range row.FindAllStringSubmatch(string(doc), -1) {
		name, env, cell := m[1], m[2], strings.TrimSpace(m[3])
		f := flags.Lookup(name)
		require.NotNil(t, f, "docs/operating.md names --%s, which outboxd run does not have", name)
		require.Equal(t, []string{env}, f.Annotations["envflag_var"], "--%s: docs name %s", name, env)
		c := firstCode.FindStringSubmatch(cell)
		if c == nil || strings.Contains(cell, " per ") {
			// "(none)", "provider's", "400 per provider, …": said in words.
			if strings.HasPrefix(cell, "(none") {
				require.Contains(t, []string{"", "[]", "0s", "false"}, f.DefValue, "--%s: docs say (none), --help %q", name, f.DefValue)
			}
			continue
		}
		documented := c[1]
		if dd, err1 := time.ParseDuration(documented); err1 == nil {
			fd, err2 := time.ParseDuration(f.DefValue)
			require.NoError(t, err2, "--%s: docs give a duration, --help %q", name, f.DefValue)
			require.Equal(t, dd, fd, "--%s: docs say %s, --help %s", name, documented, f.DefValue)
		} else {
			require.Equal(t, documented, f.DefValue, "--%s: docs and --help disagree", name)
		}
		checked++
	}
	require.Greater(t, checked, 20, "the table was read")
}
