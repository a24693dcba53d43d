package sideeffects_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestOnlyTheFacesImportTheEngine: outboxd, outboxctl, the benchmark, the
// web view and the provider-event endpoints reach the engine through the
// two faces (sideeffects, outbox) and outboxtype only; no other package of
// the module imports internal/engine.
func TestOnlyTheFacesImportTheEngine(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "github.com/outboxd/outboxd/...").Output()
	require.NoError(t, err)
	const engine = "github.com/outboxd/outboxd/internal/engine"
	allowed := map[string]bool{
		"github.com/outboxd/outboxd/sideeffects": true,
		"github.com/outboxd/outboxd/outbox":      true,
	}
	var importers []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		for _, imp := range fields[1:] {
			if imp == engine && !allowed[fields[0]] {
				importers = append(importers, fields[0])
			}
		}
	}
	require.Empty(t, importers, "import the engine only through sideeffects or outbox")
}
