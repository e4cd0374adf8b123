// Package shareddata locates the real captures and traces that live beside
// the repository in ../shared/data, for tests and benchmarks. Tests skip
// with a clear message when the folder is absent (a clone without it).
package shareddata

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// RepoRoot returns the directory holding go.mod, found by walking up from
// the working directory (a test's package directory).
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("getwd: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the test directory")
		}
		dir = parent
	}
}

// Locate returns ../shared/data/sub relative to the repository root.
func Locate(sub string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	data := filepath.Join(root, "..", "shared", "data", sub)
	if _, err := os.Stat(data); err != nil {
		return "", fmt.Errorf("shared real data absent (a clone without ../shared): %w", err)
	}
	return data, nil
}

// DataDir is Locate for tests: it skips the test when the data is absent.
func DataDir(t testing.TB, sub string) string {
	t.Helper()
	dir, err := Locate(sub)
	if err != nil {
		t.Skipf("%s: %v", sub, err)
	}
	return dir
}

// Files returns the contents of the shared files matching pattern in sub,
// or nothing when the data is absent (fuzz seeds fall back to synthetic
// ones).
func Files(sub, pattern string) [][]byte {
	dir, err := Locate(sub)
	if err != nil {
		return nil
	}
	paths, _ := filepath.Glob(filepath.Join(dir, pattern))
	var out [][]byte
	for _, p := range paths {
		if b, err := os.ReadFile(p); err == nil {
			out = append(out, b)
		}
	}
	return out
}
