package outbox_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// An application that only enqueues compiles River and pgx, not the
// providers' SDKs, Prometheus or OpenTelemetry.
func TestImportingOutboxStaysSmall(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	require.NoError(t, err)
	deps := strings.Fields(string(out))
	require.LessOrEqual(t, len(deps), 100, "packages outside the standard library")
	for _, d := range deps {
		for _, banned := range []string{"github.com/stripe/stripe-go", "github.com/sendgrid/", "github.com/prometheus/", "go.opentelemetry.io/"} {
			require.False(t, strings.HasPrefix(d, banned), "outbox imports %s", d)
		}
	}
}
