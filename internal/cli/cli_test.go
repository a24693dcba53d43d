package cli_test

import (
	"context"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/internal/cli"
	"github.com/outboxd/outboxd/internal/testdb"
)

// outboxd's own connections run without JIT compilation, unless the URL
// asks for it.
func TestConnectTurnsJITOffUnlessTheURLSetsIt(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		url, want string
	}{
		{testdb.URL(), "off"},
		{withParam(testdb.URL(), "jit=on"), "on"},
		{withParam(testdb.URL(), "options=-c%20jit%3Don"), "on"},
	} {
		pool, err := cli.Connect(ctx, c.url, 2)
		if err != nil {
			t.Fatal(err)
		}
		var got string
		err = pool.QueryRow(ctx, "SHOW jit").Scan(&got)
		pool.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got != c.want {
			t.Errorf("%s: jit = %s, want %s", cli.Redact(c.url), got, c.want)
		}
	}
}

func withParam(u, p string) string {
	if strings.Contains(u, "?") {
		return u + "&" + p
	}
	return u + "?" + p
}
