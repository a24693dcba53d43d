package main

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestImageHoldsTheTwoBinariesAndItsContextNoData checks the Dockerfile and
// .dockerignore by construction (no Docker engine is needed): the image
// builds outboxd and outboxctl only, and the build context leaves out the
// dev database's data directory, git and build outputs while keeping every
// file the build embeds.
func TestImageHoldsTheTwoBinariesAndItsContextNoData(t *testing.T) {
	root := filepath.Join("..", "..")
	dockerfile, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	require.NoError(t, err)
	build := regexp.MustCompile(`(?m)^RUN .*go build .*-o /out/ (.*)$`).FindSubmatch(dockerfile)
	require.NotNil(t, build, "the Dockerfile builds into /out/")
	require.ElementsMatch(t, []string{"./cmd/outboxd", "./cmd/outboxctl"}, strings.Fields(string(build[1])),
		"the image holds outboxd and outboxctl, not the benchmark")

	f, err := os.Open(filepath.Join(root, ".dockerignore"))
	require.NoError(t, err, "a .dockerignore keeps .devdb/ and build outputs out of the build context")
	defer f.Close()
	var patterns []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" && !strings.HasPrefix(line, "#") {
			patterns = append(patterns, strings.TrimSuffix(strings.TrimPrefix(line, "/"), "/"))
		}
	}
	require.NoError(t, sc.Err())
	ignored := func(path string) bool {
		for _, p := range patterns {
			for dir := path; dir != "."; dir = filepath.Dir(dir) {
				if ok, _ := filepath.Match(p, dir); ok {
					return true
				}
			}
		}
		return false
	}
	for _, p := range []string{".devdb", ".devdb/base/1/1259", ".git/HEAD", "bench.json", "outboxd", "bin/outboxctl", "bench/go.mod"} {
		require.True(t, ignored(p), "%s is kept out of the build context", p)
	}
	// Everything the two binaries are built from stays in.
	needed := []string{"go.mod", "go.sum"}
	require.NoError(t, filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel == ".git" || rel == ".devdb" || rel == "bench" {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, ".sql") || strings.Contains(rel, "templates/") || strings.Contains(rel, "static/") {
			needed = append(needed, rel)
		}
		return nil
	}))
	for _, p := range needed {
		require.False(t, ignored(p), "%s is needed by the build and must stay in the context", p)
	}
}
