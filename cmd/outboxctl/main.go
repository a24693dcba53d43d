// Command outboxctl is the operator's view of outboxd: find stuck and failed
// side effects, see why, and redrive, cancel or resolve them by hand, with
// every action recorded in an audit trail.
//
//	outboxctl stuck | list | show | stats        read (tables, or --json)
//	outboxctl retry | cancel | confirm | purge   act (--dry-run, audited)
//	outboxctl replays                            paced replays (retry --failed-since --pace)
//	outboxctl migrate
//
// Exit status: 0 success, 1 operational error, 2 usage error.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"regexp"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/outboxd/outboxd/internal/cli"
	"github.com/outboxd/outboxd/internal/envflag"
	"github.com/outboxd/outboxd/migrations"
	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/sideeffects"
	"github.com/outboxd/outboxd/sideeffects/oncall"
)

func main() { cli.Main("outboxctl", newRootCmd(os.Stdin)) }

// app holds the global settings and what commands share.
type app struct {
	*cli.Database
	JSON     bool
	Actor    string
	Policies cli.Policies
	stdin    io.Reader

	fleet fleet

	pool *pgxpool.Pool
	// limitsPool is the shared limits' place, when it is another pool.
	limitsPool *pgxpool.Pool
	op         *sideeffects.Operator
	// windows are the providers' key windows less their margins
	// (sideeffects.Operator.KeyWindows), read when the database is opened.
	windows map[string]time.Duration
}

func newRootCmd(stdin io.Reader) *cobra.Command {
	root, db := cli.NewRoot("outboxctl", "Inspect and repair outboxd side effects")
	a := &app{Database: db, stdin: stdin}
	// Everything printed may hold text from receivers: escape control
	// characters on the way out.
	pre := root.PersistentPreRunE
	root.PersistentPreRunE = func(cmd *cobra.Command, args []string) error {
		cmd.SetOut(newEscapeWriter(cmd.OutOrStdout()))
		cmd.SetErr(newEscapeWriter(cmd.ErrOrStderr()))
		if err := pre(cmd, args); err != nil {
			return err
		}
		return a.selectShard(cmd)
	}
	root.PersistentPostRun = func(*cobra.Command, []string) { a.close() }
	pf := root.PersistentFlags()
	pf.BoolVar(&a.JSON, "json", false, "print JSON instead of a table")
	pf.StringVar(&a.Actor, "actor", "", "who acts, for the audit trail (default: the OS user)")
	envflag.Bind(pf, "actor", "OUTBOXCTL_ACTOR")
	// The same settings as outboxd run's, from the same variables.
	a.Policies.Bind(pf)
	a.fleet.bind(pf)

	root.AddCommand(newStuckCmd(a), newListCmd(a), newShowCmd(a), newEventsCmd(a), newStatsCmd(a), newDispatchersCmd(a),
		newRetryCmd(a), newRequeueCmd(a), newEditCmd(a), newAcknowledgeCmd(a), newReleaseCmd(a), newCancelCmd(a), newConfirmCmd(a), newPurgeCmd(a), newKeysCmd(a), newDriftCmd(a), newLimitsCmd(a), newTenantsCmd(a), newEndpointsCmd(a), newReplaysCmd(a), newReconcileCmd(a), newMigrateCmd(a))
	a.enableFleet(root)
	return root
}

// keyWindow is a provider's key window minus margin (zero: none), as the
// configured policies give it or else as the dispatchers running the
// provider recorded it; it drives the "key window" diagnoses.
func (a *app) keyWindow(provider string) time.Duration { return a.windows[provider] }

// situation is what stuck's diagnoses know of the dispatchers
// (oncall.SituationOf): how many reported in the last minute, what
// their gates hold back and, unless the operator gave --fired-bound
// (bound, set), the crash-recovery bound their own settings give.
func (a *app) situation(ctx context.Context, now time.Time, bound time.Duration, set bool) (oncall.Situation, error) {
	ds, err := a.op.Dispatchers(ctx, 100)
	if err != nil {
		return oncall.Situation{Now: now, FiredBound: bound}, err
	}
	sit := oncall.SituationOf(now, bound, ds)
	sit.Profiles = a.op.Profiles()
	if set {
		sit.FiredBound, sit.BoundFrom = bound, "--fired-bound"
	}
	return sit, nil
}

// holderState and destinationText are outboxtype's, for the tables.
func holderState(d outboxtype.DispatcherRecord, now time.Time) string {
	return oncall.HolderState(d, now)
}

func destinationText(d providers.DestinationState, now time.Time) string {
	return oncall.DestinationText(d, now)
}

// open connects and checks that the schema is migrated.
func (a *app) open(ctx context.Context) error {
	pool, err := cli.Connect(ctx, a.URL, 4)
	if err != nil {
		return err
	}
	a.pool = pool
	if err := migrations.Check(ctx, pool, a.Schema); err != nil {
		return fmt.Errorf("schema %q: %w (or pass the right --schema)", a.Schema, err)
	}
	if err := a.Policies.Validate(); err != nil {
		return err
	}
	inDoubt, err := a.Policies.InDoubtPolicies()
	if err != nil {
		return err
	}
	var shared *sideeffects.SharedLimits
	if lp, err := a.OpenLimits(ctx, 2); err != nil {
		return err
	} else if lp != nil {
		a.limitsPool = lp
		shared = &sideeffects.SharedLimits{Pool: lp, Schema: a.LimitsSchema}
	}
	op, err := sideeffects.NewOperator(pool, sideeffects.OperatorConfig{
		Schema: a.Schema, Guarantees: a.Policies.Guarantees(), InDoubt: inDoubt, SharedLimits: shared,
	})
	if err != nil {
		return err
	}
	a.op = op
	if a.windows, err = op.KeyWindows(ctx); err != nil {
		return err
	}
	return nil
}

func (a *app) actor() string {
	if a.Actor != "" {
		return a.Actor
	}
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	return "unknown"
}

var keyRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// resolve turns an effect id, an idempotency key or a provider reference
// into an effect.
func (a *app) resolve(ctx context.Context, ref string) (*outboxtype.Effect, error) {
	if id, err := uuid.Parse(ref); err == nil {
		e, err := a.op.Get(ctx, id)
		if errors.Is(err, sideeffects.ErrNotFound) {
			if evs, evErr := a.op.Events(ctx, outboxtype.EventFilter{ID: id, Limit: 1}); evErr == nil && len(evs) == 1 {
				return nil, fmt.Errorf("%s is an event, not an effect: `outboxctl events %s` shows it with its effects", id, id)
			}
			if c, cErr := a.op.Carried(ctx, ref); cErr == nil {
				return nil, errors.New(oncall.Carried(*c, time.Now()))
			}
			return nil, fmt.Errorf("no effect with id %s in schema %q: find ids with `outboxctl list`", id, a.Schema)
		}
		if err != nil {
			return nil, fmt.Errorf("read effect %s: %w", id, err)
		}
		return e, nil
	}
	if keyRE.MatchString(strings.ToLower(ref)) {
		e, err := a.op.GetByKey(ctx, strings.ToLower(ref))
		if errors.Is(err, sideeffects.ErrNotFound) {
			if c, cErr := a.op.Carried(ctx, ref); cErr == nil {
				return nil, errors.New(oncall.Carried(*c, time.Now()))
			}
			return nil, fmt.Errorf("no effect with idempotency key %s in schema %q", ref, a.Schema)
		}
		if err != nil {
			return nil, fmt.Errorf("read effect %s: %w", ref, err)
		}
		return e, nil
	}
	// A provider's reference, as Stripe's dashboard or SendGrid's activity
	// shows it (pi_…, re_…, a message id or an event's sg_message_id).
	effs, err := a.op.ByProviderRef(ctx, ref, 10)
	if err != nil {
		return nil, fmt.Errorf("read effect %s: %w", ref, err)
	}
	switch len(effs) {
	case 0:
		return nil, cli.Usagef("%q is neither an effect id (UUID), an idempotency key (64 hex characters) nor the provider reference of an effect in schema %q "+
			"(a Stripe id such as pi_…, a SendGrid message id)", ref, a.Schema)
	case 1:
		return effs[0], nil
	}
	var b strings.Builder
	for _, e := range effs {
		fmt.Fprintf(&b, "\n  %s  %s  %s", e.ID, e.Kind, e.State)
	}
	return nil, cli.Usagef("%d effects have the provider reference %q (e.g. the payment intent's creation and its capture): give one id:%s", len(effs), ref, b.String())
}

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func table(w io.Writer) tableWriter { return tableWriter{tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)} }

// tableWriter is a table whose rows are written one Write each (a row is
// one Fprintf or Fprintln): a line break inside a row came from a value (a
// receiver's answer, an operator's reason) and is shown as \n or \r, so
// that no value can start a row or a line of its own.
type tableWriter struct{ *tabwriter.Writer }

func (t tableWriter) Write(p []byte) (int, error) {
	row, end := p, []byte(nil)
	if bytes.HasSuffix(row, []byte("\n")) {
		row, end = row[:len(row)-1], []byte("\n")
	}
	if !bytes.ContainsAny(row, "\r\n") {
		return t.Writer.Write(p)
	}
	row = bytes.ReplaceAll(row, []byte("\r"), []byte(`\r`))
	row = bytes.ReplaceAll(row, []byte("\n"), []byte(`\n`))
	if _, err := t.Writer.Write(append(row, end...)); err != nil {
		return 0, err
	}
	return len(p), nil
}

func ago(t time.Time) string { return oncall.Ago(t, time.Now()) }

func short(s *string, n int) string {
	if s == nil {
		return ""
	}
	v := strings.ReplaceAll(*s, "\n", " ")
	if len(v) > n {
		return v[:n-1] + "…"
	}
	return v
}

// confirmBulk asks before a change to many effects unless yes is set.
func (a *app) confirmBulk(out io.Writer, what string, n int, yes bool) error {
	if yes || n == 0 {
		return nil
	}
	fmt.Fprintf(out, "About to %s %d effects. Type yes to continue: ", what, n)
	line, _ := bufio.NewReader(a.stdin).ReadString('\n')
	if strings.TrimSpace(line) != "yes" {
		return cli.Usagef("not confirmed: nothing changed (pass --yes to skip the question)")
	}
	return nil
}
