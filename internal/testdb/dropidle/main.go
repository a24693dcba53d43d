// Command dropidle drops the schemas the test suite's processes kept for
// reuse once those processes have ended, then vacuums the catalogs they
// were written into (make test runs it last).
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/internal/testdb"
)

func main() {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testdb.URL())
	if err != nil {
		fmt.Fprintf(os.Stderr, "dropidle: connect %s: %v\n", testdb.URL(), err)
		os.Exit(1)
	}
	defer conn.Close(ctx)
	n, err := testdb.DropIdle(ctx, conn)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dropidle: %v\n", err)
		os.Exit(1)
	}
	if n > 0 {
		fmt.Printf("dropped %d test schemas kept for reuse\n", n)
	}
	if err := testdb.VacuumCatalogs(ctx, conn); err != nil {
		fmt.Fprintf(os.Stderr, "dropidle: vacuum the catalogs: %v\n", err)
		os.Exit(1)
	}
}
