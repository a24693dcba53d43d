package outboxtype_test

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestOutboxtypeImportsNothingOfOutboxd: the shared values are the leaf
// every other package of outboxd may import, as the package's doc says.
func TestOutboxtypeImportsNothingOfOutboxd(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		parsed, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		require.NoError(t, err)
		for _, imp := range parsed.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			require.False(t, strings.HasPrefix(path, "github.com/outboxd/outboxd/"), "%s imports %s", f, path)
			require.NotEqual(t, "github.com/riverqueue/river/rivertype", path, "%s: River's types stay in the engine", f)
		}
	}
}
