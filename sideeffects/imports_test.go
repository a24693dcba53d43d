package sideeffects_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestOnlyTheFacesImportTheEngine: outboxd, outboxctl, the benchmark, the
// web view and the provider-event endpoints reach the engine and the store
// through the two faces (sideeffects, outbox) and outboxtype only; no
// other package of the module imports internal/engine, and only the
// engine and the faces import internal/store.
func TestOnlyTheFacesImportTheEngine(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "github.com/outboxd/outboxd/...").Output()
	require.NoError(t, err)
	const engine = "github.com/outboxd/outboxd/internal/engine"
	const store = "github.com/outboxd/outboxd/internal/store"
	faces := map[string]bool{
		"github.com/outboxd/outboxd/sideeffects": true,
		"github.com/outboxd/outboxd/outbox":      true,
	}
	var importers []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		for _, imp := range fields[1:] {
			switch {
			case imp == engine && !faces[fields[0]]:
				importers = append(importers, fields[0]+" imports the engine")
			case imp == store && !faces[fields[0]] && fields[0] != engine:
				importers = append(importers, fields[0]+" imports the store")
			}
		}
	}
	require.Empty(t, importers, "import the engine and the store only through sideeffects or outbox")
}
