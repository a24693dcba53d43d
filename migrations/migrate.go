package migrations

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/outboxd/outboxd/pgschema"
	"github.com/pressly/goose/v3"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// VersionTable is goose's bookkeeping table. It is not goose's default name so
// that an application's own goose migrations can live in the same schema.
const VersionTable = "outboxd_schema_version"

// lockKey serialises concurrent migrators of one schema (several replicas
// starting at once); migrations of different schemas run side by side.
const lockKey = `hashtextextended('outboxd migrate ' || $1, 0)`

// Result says what a run changed; an up-to-date schema gives zero counts.
type Result struct {
	RiverApplied  int
	OutboxApplied int
}

// Up creates the schema if needed and applies every pending River and outboxd
// migration. Running it again is a no-op.
func Up(ctx context.Context, pool *pgxpool.Pool, schema string) (Result, error) {
	var res Result
	if err := ValidSchema(schema); err != nil {
		return res, err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return res, fmt.Errorf("migrate: connect: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock("+lockKey+")", schema); err != nil {
		return res, fmt.Errorf("migrate: take lock: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock("+lockKey+")", schema) //nolint:errcheck // released with the session anyway

	if _, err := conn.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{schema}.Sanitize()); err != nil {
		return res, fmt.Errorf("migrate: create schema %q: %w", schema, err)
	}

	rm, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: schema})
	if err != nil {
		return res, fmt.Errorf("migrate: river: %w", err)
	}
	rr, err := rm.Migrate(ctx, rivermigrate.DirectionUp, nil)
	if err != nil {
		return res, fmt.Errorf("migrate: river migrations: %w", err)
	}
	res.RiverApplied = len(rr.Versions)

	p, db, err := gooseProvider(pool, schema)
	if err != nil {
		return res, err
	}
	defer db.Close()
	gr, err := p.Up(ctx)
	if err != nil {
		return res, fmt.Errorf("migrate: outboxd migrations: %w", err)
	}
	res.OutboxApplied = len(gr)
	return res, nil
}

// ValidSchema accepts a plain lowercase Postgres identifier (pgschema.Check),
// and not "": migrations name the schema they create.
func ValidSchema(schema string) error {
	if schema == "" {
		return fmt.Errorf("schema \"\": name the schema to migrate, e.g. outboxd")
	}
	return pgschema.Check(schema)
}

// ErrNotMigrated reports a schema whose migrations are missing or behind.
var ErrNotMigrated = errors.New("migrations not applied: run `outboxd migrate` (or `outboxctl migrate`)")

// Check reports ErrNotMigrated unless both River's and outboxd's migrations
// are fully applied to schema.
func Check(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	if err := ValidSchema(schema); err != nil {
		return err
	}
	rm, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: schema})
	if err != nil {
		return fmt.Errorf("migrate: river: %w", err)
	}
	existing, err := rm.ExistingVersions(ctx)
	if err != nil || len(existing) == 0 {
		return fmt.Errorf("%w (river tables in schema %q: %v)", ErrNotMigrated, schema, err)
	}
	all := rm.AllVersions()
	if existing[len(existing)-1].Version < all[len(all)-1].Version {
		return fmt.Errorf("%w (river schema %q at version %d of %d)", ErrNotMigrated, schema,
			existing[len(existing)-1].Version, all[len(all)-1].Version)
	}

	p, db, err := gooseProvider(pool, schema)
	if err != nil {
		return err
	}
	defer db.Close()
	current, target, err := p.GetVersions(ctx)
	if err != nil {
		return fmt.Errorf("%w (outboxd tables in schema %q: %v)", ErrNotMigrated, schema, err)
	}
	if current < target {
		return fmt.Errorf("%w (outboxd schema %q at version %d of %d)", ErrNotMigrated, schema, current, target)
	}
	return nil
}

// gooseProvider runs goose on connections whose search_path is the target
// schema, so the migration files need no schema name of their own.
func gooseProvider(pool *pgxpool.Pool, schema string) (*goose.Provider, *sql.DB, error) {
	cc := pool.Config().ConnConfig.Copy()
	cc.RuntimeParams["search_path"] = schema
	db := stdlib.OpenDB(*cc)
	p, err := goose.NewProvider(goose.DialectPostgres, db, FS,
		goose.WithTableName(VersionTable),
		goose.WithDisableGlobalRegistry(true),
	)
	if err != nil {
		db.Close()
		return nil, nil, fmt.Errorf("migrate: goose: %w", err)
	}
	return p, db, nil
}

// Temporary creates a schema named prefix + "_" + 8 random hex digits,
// applies every migration to it, and returns it with a func that drops it:
// for demos, benchmarks, examples and tests that must not touch a real
// schema.
func Temporary(ctx context.Context, pool *pgxpool.Pool, prefix string) (schema string, drop func(), err error) {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", nil, err
	}
	schema = prefix + "_" + hex.EncodeToString(b[:])
	if err := ValidSchema(schema); err != nil {
		return "", nil, err
	}
	drop = func() {
		_, _ = pool.Exec(context.WithoutCancel(ctx), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	}
	if _, err := Up(ctx, pool, schema); err != nil {
		drop()
		return "", nil, err
	}
	return schema, drop, nil
}
