package migrations_test

import (
	"context"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/migrations"
)

// ExampleUp applies River's and outboxd's migrations to a schema, as
// outboxd migrate does; a second run applies nothing, and Check passes.
func ExampleUp() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, databaseURL())
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	// A schema of its own for the example (Temporary runs Up once); an
	// application runs Up on its real schema.
	schema, drop, err := migrations.Temporary(ctx, pool, "outboxd_example")
	if err != nil {
		panic(err)
	}
	defer drop()
	res, err := migrations.Up(ctx, pool, schema)
	if err != nil {
		panic(err)
	}
	fmt.Printf("applied again: River %d, outboxd %d\n", res.RiverApplied, res.OutboxApplied)
	fmt.Println("up to date:", migrations.Check(ctx, pool, schema) == nil)
	fmt.Println(migrations.ValidSchema("Outboxd"))
	// Output:
	// applied again: River 0, outboxd 0
	// up to date: true
	// schema "Outboxd": use one lowercase name of letters, digits and _ (at most 63, not starting with a digit), e.g. outboxd
}

func databaseURL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}
