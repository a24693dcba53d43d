// Package testdb gives each test its own migrated Postgres schema in a real
// database, for that test alone while it runs, so parallel tests, packages
// and repeated runs never see each other's rows. Schemas are reused within
// a test process once emptied (pool.go), as River's riverdbtest does.
package testdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/migrations"
)

// DefaultURL is used when TEST_DATABASE_URL is unset.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// URL is the database tests run against.
func URL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	return DefaultURL
}

// DB is a pool and the fresh schema it should be used with.
type DB struct {
	Pool   *pgxpool.Pool
	Schema string
}

// New gives the test a schema with River's and outboxd's migrations
// applied and no rows but what the migrations seed: one an earlier test of
// this process gave back, emptied, or a new one (see pool.go).
func New(tb testing.TB) *DB {
	tb.Helper()
	pgpool := connect(tb)
	s := thePool.get(tb, pgpool)
	if s == nil {
		name, err := thePool.name(tb)
		if err != nil {
			pgpool.Close()
			tb.Fatalf("testdb: %v", err)
		}
		if s, err = newPooled(context.Background(), pgpool, name); err != nil {
			_, _ = pgpool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+name+" CASCADE")
			pgpool.Close()
			tb.Fatalf("testdb: %v", err)
		}
	}
	tb.Cleanup(func() {
		thePool.put(s, pgpool)
		pgpool.Close()
	})
	return &DB{Pool: pgpool, Schema: s.name}
}

// NewFresh gives the test a newly migrated schema of its own, dropped when
// the test ends and never reused: for tests whose processes outside this
// one (outboxd binaries) work in the schema, where a process that outlived
// its test must not meet the next test's rows.
func NewFresh(tb testing.TB) *DB {
	tb.Helper()
	db := NewEmpty(tb)
	if _, err := migrations.Up(context.Background(), db.Pool, db.Schema); err != nil {
		tb.Fatalf("testdb: migrate %s: %v", db.Schema, err)
	}
	return db
}

// NewEmpty reserves a schema name without creating anything in it.
func NewEmpty(tb testing.TB) *DB {
	tb.Helper()
	pool := connect(tb)
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "outboxd_test_" + hex.EncodeToString(b[:])
	tb.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
		pool.Close()
	})
	return &DB{Pool: pool, Schema: schema}
}

// connect opens a pool on the test database, creating the database on a
// fresh server.
func connect(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, URL())
	if err != nil {
		tb.Fatalf("testdb: connect %s: %v", URL(), err)
	}
	err = pool.Ping(ctx)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "3D000" { // invalid_catalog_name
		createDatabase(tb, pool.Config().ConnConfig)
		err = pool.Ping(ctx)
	}
	if err != nil {
		pool.Close()
		tb.Fatalf("testdb: Postgres unreachable at %s (set TEST_DATABASE_URL): %v", URL(), err)
	}
	return pool
}

// createDatabase creates the test database on a fresh server, through the
// server's maintenance database. Packages racing to create it are fine.
func createDatabase(tb testing.TB, cc *pgx.ConnConfig) {
	tb.Helper()
	ctx := context.Background()
	admin := cc.Copy()
	admin.Database = "postgres"
	conn, err := pgx.ConnectConfig(ctx, admin)
	if err != nil {
		tb.Fatalf("testdb: connect to create database %q: %v", cc.Database, err)
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{cc.Database}.Sanitize())
	var pgErr *pgconn.PgError
	if err != nil && !(errors.As(err, &pgErr) && (pgErr.Code == "42P04" || pgErr.Code == "23505")) { // created concurrently
		tb.Fatalf("testdb: create database %q: %v", cc.Database, err)
	}
}
