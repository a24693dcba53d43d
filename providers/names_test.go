package providers_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestProviderNamesStayInTheirPackages: outside providers/, no code names
// a built-in provider (a "webhook", "stripe" or "sendgrid" string, or
// webhook.Name and the like) but the places that build providers from
// settings or use them as fixtures; what a provider means to operators is
// its providers.Profile. The list below is exact: a new place fails, and
// so does one that went away (shrink the list).
func TestProviderNamesStayInTheirPackages(t *testing.T) {
	t.Parallel()
	allowed := map[string]int{
		// outboxd run builds the built-in providers from its flags and
		// describes their settings; outboxctl reads their key-window flags
		// and builds a Stripe client or a JetStream asker to reconcile with.
		"cmd/outboxd/run.go":         7,
		"internal/cli/policies.go":   3,
		"cmd/outboxctl/reconcile.go": 2,
		// Fixtures: the demo's and the benchmark's effects.
		"cmd/outboxd/demo.go":            2,
		"cmd/outboxd/demo_fixtures.go":   3,
		"cmd/outboxbench/enqueue.go":     3,
		"cmd/outboxbench/idempotency.go": 1,
		"cmd/outboxbench/limits.go":      6,
		"cmd/outboxbench/main.go":        1,
		"cmd/outboxbench/tenants.go":     4,
	}
	names := map[string]bool{"webhook": true, "stripe": true, "sendgrid": true, "nats": true, "kafka": true}
	found := map[string]int{}
	root := ".."
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel == "providers" || rel == "bench" || (rel != "." && strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(x ast.Node) bool {
			switch x := x.(type) {
			case *ast.BasicLit:
				if s, err := strconv.Unquote(x.Value); x.Kind == token.STRING && err == nil && names[s] {
					found[rel]++
				}
			case *ast.SelectorExpr:
				if id, ok := x.X.(*ast.Ident); ok && names[id.Name] && x.Sel.Name == "Name" {
					found[rel]++
				}
			}
			return true
		})
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, allowed, found, "a provider's name outside providers/: say what the provider means in its providers.Profile instead")
}
