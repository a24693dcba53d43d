// Package cli holds what outboxd's two binaries share: the usage-error type
// behind exit status 2 and connecting to Postgres with errors that say which
// setting to fix.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/outboxd/outboxd/internal/envflag"
	"github.com/outboxd/outboxd/migrations"
)

// DefaultDatabaseURL is the local Postgres a newcomer has.
const DefaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// UsageError marks a mistake in how a command was invoked: a bad flag,
// value or argument. The binaries exit with status 2 on it.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// Usagef builds a UsageError.
func Usagef(format string, args ...any) error {
	return UsageError{fmt.Errorf(format, args...)}
}

// ExitCode is 0 for nil, 2 for a UsageError and 1 otherwise.
func ExitCode(err error) int {
	var ue UsageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ue):
		return 2
	default:
		return 1
	}
}

// Connect opens a pool and checks that the database answers. The URL's
// password is never printed.
func Connect(ctx context.Context, databaseURL string, maxConns int32) (*pgxpool.Pool, error) {
	return connect(ctx, databaseURL, maxConns, "--database-url (DATABASE_URL)")
}

// ConnectLimits connects to --limits-database-url, as Connect does.
func ConnectLimits(ctx context.Context, limitsURL string, maxConns int32) (*pgxpool.Pool, error) {
	return connect(ctx, limitsURL, maxConns, "--limits-database-url (OUTBOXD_LIMITS_DATABASE_URL)")
}

// OpenPool opens a pool without waiting for the database to answer: its
// connections are made when first used. flag names the setting in errors.
func OpenPool(ctx context.Context, databaseURL string, maxConns int32, flag string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, Usagef("%s is not a valid Postgres URL: %s", flag, Redact(databaseURL))
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	noJIT(cfg.ConnConfig.RuntimeParams)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", Redact(databaseURL), err)
	}
	return pool, nil
}

func connect(ctx context.Context, databaseURL string, maxConns int32, flag string) (*pgxpool.Pool, error) {
	pool, err := OpenPool(ctx, databaseURL, maxConns, flag)
	if err != nil {
		return nil, err
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("database unreachable at %s: %w (check %s and that Postgres is running)", Redact(databaseURL), err, flag)
	}
	return pool, nil
}

// noJIT turns Postgres's JIT compilation off for outboxd's own
// connections unless the URL sets jit itself (?jit=on, or -c jit in its
// options). Every statement outboxd runs is short and indexed; compiling
// one costs far more than running it: the sweeper's search for stale
// claims spent 193 ms compiling and 22 ms running (docs/storage.md).
func noJIT(params map[string]string) {
	if _, set := params["jit"]; set || strings.Contains(params["options"], "jit") {
		return
	}
	params["jit"] = "off"
}

// Redact hides the passwords of a connection string, in URL form (user
// info and the password query parameter) or key=value form.
func Redact(databaseURL string) string {
	if strings.HasPrefix(databaseURL, "postgres://") || strings.HasPrefix(databaseURL, "postgresql://") {
		u, err := url.Parse(databaseURL)
		if err != nil {
			return "(unparseable URL)"
		}
		q := u.Query()
		for _, k := range []string{"password", "sslpassword"} {
			if q.Has(k) {
				q.Set(k, "xxxxx")
			}
		}
		u.RawQuery = q.Encode()
		return u.Redacted()
	}
	return kvPassword.ReplaceAllString(databaseURL, "${1}=xxxxx")
}

// kvPassword matches a password setting of a key=value connection string,
// quoted or not.
var kvPassword = regexp.MustCompile(`(password|sslpassword)\s*=\s*('(?:[^'\\]|\\.)*'|\S+)`)

// Migrate applies River's and outboxd's migrations to schema and says what
// it did on out; both binaries' migrate commands run it.
func Migrate(ctx context.Context, out io.Writer, databaseURL, schema string) error {
	pool, err := Connect(ctx, databaseURL, 4)
	if err != nil {
		return err
	}
	defer pool.Close()
	res, err := migrations.Up(ctx, pool, schema)
	if err != nil {
		return err
	}
	if res == (migrations.Result{}) {
		fmt.Fprintf(out, "schema %q is up to date\n", schema)
		return nil
	}
	fmt.Fprintf(out, "schema %q: applied %d River and %d outboxd migrations\n", schema, res.RiverApplied, res.OutboxApplied)
	return nil
}

// Database holds the settings every command of both binaries shares.
type Database struct {
	URL    string
	Schema string
	// LimitsURL and LimitsSchema, when LimitsURL is set, are where the
	// limit keys are kept for every database that names them
	// (sideeffects.SharedLimits; docs/scaling.md).
	LimitsURL    string
	LimitsSchema string
}

// NewRoot builds a binary's root command: errors silenced for main to
// print, flag mistakes as UsageErrors, environment variables applied to
// unset flags before any command runs, and --database-url and --schema.
func NewRoot(use, short string) (*cobra.Command, *Database) {
	db := &Database{}
	root := &cobra.Command{
		Use:           use,
		Short:         short,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := envflag.Apply(cmd); err != nil {
				return UsageError{Err: err}
			}
			if err := migrations.ValidSchema(db.Schema); err != nil {
				return Usagef("--schema (OUTBOXD_SCHEMA): %w", err)
			}
			if db.LimitsSchema == "" {
				db.LimitsSchema = db.Schema
			}
			if db.LimitsURL == "" && db.LimitsSchema != db.Schema {
				return Usagef("--limits-schema (OUTBOXD_LIMITS_SCHEMA) needs --limits-database-url (OUTBOXD_LIMITS_DATABASE_URL): the database that keeps the limits")
			}
			if err := migrations.ValidSchema(db.LimitsSchema); err != nil {
				return Usagef("--limits-schema (OUTBOXD_LIMITS_SCHEMA): %w", err)
			}
			return nil
		},
	}
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return UsageError{Err: envflag.FlagError(cmd, err)} })
	pf := root.PersistentFlags()
	pf.StringVar(&db.URL, "database-url", DefaultDatabaseURL, "Postgres connection URL")
	envflag.Bind(pf, "database-url", "DATABASE_URL")
	envflag.Secret(pf, "database-url")
	pf.StringVar(&db.Schema, "schema", "public", "Postgres schema of outboxd's and River's tables")
	envflag.Bind(pf, "schema", "OUTBOXD_SCHEMA")
	pf.StringVar(&db.LimitsURL, "limits-database-url", "", "keep the rate limits in this database, shared with every database (shard) whose outboxd names it (docs/scaling.md); default: with the effects")
	envflag.Bind(pf, "limits-database-url", "OUTBOXD_LIMITS_DATABASE_URL")
	envflag.Secret(pf, "limits-database-url")
	pf.StringVar(&db.LimitsSchema, "limits-schema", "", "schema of the limits in --limits-database-url (default: --schema)")
	envflag.Bind(pf, "limits-schema", "OUTBOXD_LIMITS_SCHEMA")
	return root, db
}

// Main runs root until SIGINT or SIGTERM and exits with ExitCode, printing
// any error prefixed by the binary's name.
func Main(name string, root *cobra.Command) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := root.ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(ExitCode(err))
	}
}

// OpenLimits connects to --limits-database-url, when it is set, and checks
// that --limits-schema is migrated there: the pool that keeps the shared
// limits (nil when the limits are kept with the effects).
func (d *Database) OpenLimits(ctx context.Context, maxConns int32) (*pgxpool.Pool, error) {
	if d.LimitsURL == "" {
		return nil, nil
	}
	pool, err := ConnectLimits(ctx, d.LimitsURL, maxConns)
	if err != nil {
		return nil, err
	}
	if err := migrations.Check(ctx, pool, d.LimitsSchema); err != nil {
		pool.Close()
		return nil, fmt.Errorf("--limits-database-url, schema %q: %w (run outboxd migrate against it, or pass the right --limits-schema)", d.LimitsSchema, err)
	}
	return pool, nil
}
