package pgschema_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/pgschema"
)

func TestCheckAcceptsPlainNamesOnly(t *testing.T) {
	for _, ok := range []string{"", "outboxd", "_x", "a1_b2", "a23456789012345678901234567890123456789012345678901234567890123"} {
		require.NoError(t, pgschema.Check(ok), ok)
	}
	for _, bad := range []string{"Outboxd", "1x", "a-b", "a.b", `a"b`, "a b", "a234567890123456789012345678901234567890123456789012345678901234"} {
		require.ErrorContains(t, pgschema.Check(bad), "use one lowercase name", bad)
	}
}

func ExampleTable() {
	fmt.Println(pgschema.Table("outboxd", "side_effects"))
	fmt.Println(pgschema.Table("", "side_effects"))
	// Output:
	// "outboxd".side_effects
	// side_effects
}
