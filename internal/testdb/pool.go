package testdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/migrations"
)

// Migrating a schema takes about half a second, and a run of the suite
// asks for hundreds; so, as River's riverdbtest does, a schema a test is
// done with goes back to an idle pool of its process, and the next test
// gets it emptied (every table truncated, sequences restarted, the rows
// the migrations seed written again) instead of a new one.
//
// A schema is reused only if the test left its shape as the migrations
// made it: its catalog fingerprint (tables, columns, indexes, constraints,
// triggers, functions and their settings) is taken when it is made and
// compared when it comes back; a test that altered anything gives it up,
// and it is dropped.
//
// Pooled schemas are named after the server process of a connection their
// test process holds open while it runs (outboxd_test_p<pid>_…). When a
// test process ends, its connection closes and its schemas are orphans:
// the next process to ask for one drops them, and so does
// `go run ./internal/testdb/dropidle` (which make test runs last).
type pool struct {
	mu     sync.Mutex
	holder *pgx.Conn // open while this process runs; names its schemas
	prefix string
	made   int
	idle   []*pooled
}

// pooled is a migrated schema with what it must look like when reused.
type pooled struct {
	name        string
	fingerprint string
	seeded      []string // tables the migrations left rows in
}

var thePool pool

// PoolPrefix starts the name of every schema the pool makes.
const PoolPrefix = "outboxd_test_p"

// versionTables keep their rows: they say which migrations ran.
var versionTables = map[string]bool{migrations.VersionTable: true, "river_migration": true}

// reseed writes again the rows a migration seeds, as the migration did.
// A migration that seeds another table makes reuse fail loudly (see
// check), so this list cannot silently fall behind.
var reseed = map[string]string{
	// 00026_minute_summary.sql
	"outboxd_minutes_summarized": `INSERT INTO outboxd_minutes_summarized (since, up_to) VALUES (date_trunc('minute', now()), date_trunc('minute', now()))`,
}

// get returns an emptied idle schema, or "" when none is idle.
func (p *pool) get(tb testing.TB, pgpool *pgxpool.Pool) *pooled {
	tb.Helper()
	p.mu.Lock()
	if len(p.idle) == 0 {
		p.mu.Unlock()
		return nil
	}
	s := p.idle[len(p.idle)-1]
	p.idle = p.idle[:len(p.idle)-1]
	p.mu.Unlock()
	if err := s.empty(context.Background(), pgpool); err != nil {
		tb.Logf("testdb: not reusing %s: %v", s.name, err)
		_, _ = pgpool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+s.name+" CASCADE")
		return nil
	}
	return s
}

// name reserves the name of a new pooled schema, dropping the orphans of
// ended processes the first time.
func (p *pool) name(tb testing.TB) (string, error) {
	tb.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.holder == nil {
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, URL())
		if err != nil {
			return "", err
		}
		if _, err := DropIdle(ctx, conn); err != nil {
			_ = conn.Close(ctx)
			return "", err
		}
		var b [3]byte
		_, _ = rand.Read(b[:])
		p.holder = conn
		p.prefix = fmt.Sprintf("%s%d_%s_", PoolPrefix, conn.PgConn().PID(), hex.EncodeToString(b[:]))
	}
	p.made++
	return fmt.Sprintf("%s%03d", p.prefix, p.made), nil
}

// put takes back a schema a test is done with, if it is as it was made.
func (p *pool) put(s *pooled, pgpool *pgxpool.Pool) {
	ctx := context.Background()
	fp, err := fingerprint(ctx, pgpool, s.name)
	if err != nil || fp != s.fingerprint {
		_, _ = pgpool.Exec(ctx, "DROP SCHEMA IF EXISTS "+s.name+" CASCADE")
		return
	}
	p.mu.Lock()
	p.idle = append(p.idle, s)
	p.mu.Unlock()
}

// newPooled migrates a new pooled schema and records its shape.
func newPooled(ctx context.Context, pgpool *pgxpool.Pool, name string) (*pooled, error) {
	if _, err := migrations.Up(ctx, pgpool, name); err != nil {
		return nil, fmt.Errorf("migrate %s: %w", name, err)
	}
	s := &pooled{name: name}
	var err error
	if s.fingerprint, err = fingerprint(ctx, pgpool, name); err != nil {
		return nil, err
	}
	tables, err := tablesOf(ctx, pgpool, name)
	if err != nil {
		return nil, err
	}
	for _, t := range tables {
		if versionTables[t] {
			continue
		}
		var rows bool
		if err := pgpool.QueryRow(ctx, fmt.Sprintf("SELECT EXISTS (SELECT 1 FROM %s)", pgx.Identifier{name, t}.Sanitize())).Scan(&rows); err != nil {
			return nil, err
		}
		if rows {
			if _, ok := reseed[t]; !ok {
				return nil, fmt.Errorf("migrations seed rows in %s.%s: add how to write them again to testdb's reseed", name, t)
			}
			s.seeded = append(s.seeded, t)
		}
	}
	return s, nil
}

// empty truncates every table but the version tables, restarts every
// sequence and writes the seeded rows again, in one transaction.
func (s *pooled) empty(ctx context.Context, pgpool *pgxpool.Pool) error {
	tables, err := tablesOf(ctx, pgpool, s.name)
	if err != nil {
		return err
	}
	var truncate []string
	for _, t := range tables {
		if !versionTables[t] {
			truncate = append(truncate, pgx.Identifier{s.name, t}.Sanitize())
		}
	}
	return pgx.BeginFunc(ctx, pgpool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL search_path TO "+pgx.Identifier{s.name}.Sanitize()); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "TRUNCATE "+strings.Join(truncate, ", ")); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT setval(format('%I.%I', schemaname, sequencename), start_value, false)
			FROM pg_sequences WHERE schemaname = $1 AND sequencename <> $2`, s.name, migrations.VersionTable+"_id_seq"); err != nil {
			return err
		}
		for _, t := range s.seeded {
			if _, err := tx.Exec(ctx, reseed[t]); err != nil {
				return fmt.Errorf("seed %s: %w", t, err)
			}
		}
		return nil
	})
}

func tablesOf(ctx context.Context, pgpool *pgxpool.Pool, schema string) ([]string, error) {
	rows, err := pgpool.Query(ctx, `SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') ORDER BY 1`, schema)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// fingerprint sums up a schema's shape: a test that changes any of it
// makes the schema unfit for reuse.
func fingerprint(ctx context.Context, pgpool *pgxpool.Pool, schema string) (string, error) {
	// Names in the definitions are qualified by the search path: read
	// them under one that never includes the schema.
	var fp *string
	err := pgx.BeginFunc(ctx, pgpool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL search_path TO pg_catalog"); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `
		WITH ns AS (SELECT oid FROM pg_namespace WHERE nspname = $1)
		SELECT md5(string_agg(x, E'\n' ORDER BY x)) FROM (
			SELECT 'rel ' || c.relname || ' ' || c.relkind::text || ' ' || c.relpersistence::text || ' ' || coalesce(array_to_string(c.reloptions, ','), '')
				|| ' ' || c.relrowsecurity::text FROM pg_class c WHERE c.relnamespace = (SELECT oid FROM ns)
			UNION ALL
			SELECT 'col ' || c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod) || ' ' || a.attnotnull::text
				|| ' ' || a.attgenerated::text || ' ' || coalesce(pg_get_expr(d.adbin, d.adrelid), '')
				FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
				LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
				WHERE c.relnamespace = (SELECT oid FROM ns) AND a.attnum > 0 AND NOT a.attisdropped
			UNION ALL
			SELECT 'idx ' || pg_get_indexdef(i.indexrelid) || ' ' || i.indisvalid::text FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
				WHERE c.relnamespace = (SELECT oid FROM ns)
			UNION ALL
			SELECT 'con ' || conrelid::regclass::text || ' ' || conname || ' ' || pg_get_constraintdef(oid) || ' ' || convalidated::text
				FROM pg_constraint WHERE connamespace = (SELECT oid FROM ns)
			UNION ALL
			SELECT 'trg ' || pg_get_triggerdef(t.oid) || ' ' || t.tgenabled::text FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
				WHERE c.relnamespace = (SELECT oid FROM ns) AND NOT t.tgisinternal
			UNION ALL
			SELECT 'fn ' || p.oid::regprocedure::text || ' ' || md5(p.prosrc) || ' ' || coalesce(array_to_string(p.proconfig, ','), '')
				|| ' ' || p.provolatile::text || ' ' || p.prosecdef::text FROM pg_proc p WHERE p.pronamespace = (SELECT oid FROM ns)
			UNION ALL
			SELECT 'typ ' || t.typname FROM pg_type t WHERE t.typnamespace = (SELECT oid FROM ns)
		) s(x)`, schema).Scan(&fp)
	})
	if err != nil {
		return "", err
	}
	if fp == nil {
		return "", fmt.Errorf("schema %s is gone", schema)
	}
	return *fp, nil
}

// DropIdle drops the pooled schemas of test processes that have ended
// (their holding connection is gone) and returns how many it dropped.
func DropIdle(ctx context.Context, conn *pgx.Conn) (int, error) {
	rows, err := conn.Query(ctx, `SELECT nspname FROM pg_namespace
		WHERE starts_with(nspname, $1)
		AND (regexp_match(substr(nspname, length($1) + 1), '^([0-9]+)_'))[1]::int
			NOT IN (SELECT pid FROM pg_stat_activity WHERE pid IS NOT NULL)`, PoolPrefix)
	if err != nil {
		return 0, err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, err
	}
	dropped := 0
	for _, n := range names {
		// Another process may be dropping the same orphan: not an error.
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{n}.Sanitize()+" CASCADE"); err == nil {
			dropped++
		}
	}
	return dropped, nil
}

// catalogs are the system tables a migrated schema writes rows into; a
// run of the suite makes and drops hundreds of schemas.
var catalogs = []string{"pg_attribute", "pg_class", "pg_depend", "pg_type", "pg_constraint", "pg_index",
	"pg_attrdef", "pg_proc", "pg_trigger", "pg_namespace", "pg_description", "pg_sequence", "pg_shdepend"}

// VacuumCatalogs vacuums the test database's catalogs. On a cluster with
// autovacuum off (as this project's development machines run) nothing
// else does, and their dead rows slow every later run's schema work: the
// suite took a third longer after a day's runs, with pg_attribute at
// 158 MB, three quarters of it dead. A role that does not own the
// catalogs is told so by Postgres in a warning, and nothing is vacuumed.
func VacuumCatalogs(ctx context.Context, conn *pgx.Conn) error {
	_, err := conn.Exec(ctx, "VACUUM pg_catalog."+strings.Join(catalogs, ", pg_catalog."))
	return err
}
