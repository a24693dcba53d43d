// Package envflag lets every command-line flag of outboxd's binaries also be
// set from an environment variable, with the flag winning when both are set,
// and shows the variable's name in --help.
package envflag

import (
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

const annotation = "envflag_var"

// Bind ties flag name of fs to environment variable env.
func Bind(fs *pflag.FlagSet, name, env string) {
	f := fs.Lookup(name)
	if f == nil {
		panic("envflag: no flag " + name)
	}
	f.Usage += " [$" + env + "]"
	if err := fs.SetAnnotation(name, annotation, []string{env}); err != nil {
		panic(err)
	}
}

// Apply sets every bound flag of cmd that was not given on the command line
// from its environment variable, if that is set. An invalid value is an
// error that names the variable.
func Apply(cmd *cobra.Command) error {
	var errs []string
	apply := func(f *pflag.Flag) {
		envs := f.Annotations[annotation]
		if f.Changed || len(envs) == 0 {
			return
		}
		// An empty variable counts as unset, as compose files often pass
		// empty values through.
		v := os.Getenv(envs[0])
		if v == "" {
			return
		}
		if err := f.Value.Set(v); err != nil {
			errs = append(errs, fmt.Sprintf("invalid %s: %v", envs[0], err))
			return
		}
		f.Changed = true
	}
	cmd.Flags().VisitAll(apply)
	cmd.InheritedFlags().VisitAll(apply)
	if len(errs) > 0 {
		sort.Strings(errs)
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}
