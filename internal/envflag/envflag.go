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

const (
	annotation = "envflag_var"
	secretMark = "envflag_secret"
)

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

// Secret marks flag name of fs as holding secrets (keys, tokens, a URL
// with a password): an error about its value, from the command line or
// its variable, names the flag and never shows the value.
func Secret(fs *pflag.FlagSet, name string) {
	if err := fs.SetAnnotation(name, secretMark, []string{"true"}); err != nil {
		panic(err)
	}
}

// hidden is the error for a secret flag whose value could not be read.
func hidden(f *pflag.Flag) error {
	what := "--" + f.Name
	if envs := f.Annotations[annotation]; len(envs) > 0 {
		what += " (" + envs[0] + ")"
	}
	hint := ""
	switch f.Value.Type() {
	case "stringToString":
		hint = ": give name=value pairs separated by commas"
	case "stringSlice":
		hint = ": give values separated by commas, without quotes"
	}
	return fmt.Errorf("invalid value for %s%s (not shown: it holds secrets)", what, hint)
}

// FlagError hides the value in err, a flag parsing error, when it is
// about a flag marked Secret; other errors are returned as they are.
func FlagError(cmd *cobra.Command, err error) error {
	var out error
	visit := func(f *pflag.Flag) {
		if out == nil && f.Annotations[secretMark] != nil && strings.Contains(err.Error(), `"--`+f.Name+`"`) {
			out = hidden(f)
		}
	}
	cmd.Flags().VisitAll(visit)
	cmd.InheritedFlags().VisitAll(visit)
	if out != nil {
		return out
	}
	return err
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
			if f.Annotations[secretMark] != nil {
				errs = append(errs, hidden(f).Error())
				return
			}
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
