package e2e

// Where the module is, and the builds of idem the tests run: the test
// binary itself (testscript.Main puts it on PATH as idem), and builds with
// a build tag that gives internal/probe's points a meaning.

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// moduleRoot is the directory of the module's go.mod: the test runs in
// internal/e2e, but builds, clones and the documentation are the module's.
func moduleRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// buildTagged builds the module's main package pkg ("." for idem, or a
// path such as "./bench/cmd/floor") with -tags tags and returns the binary.
func buildTagged(t *testing.T, tags, pkg string) string {
	t.Helper()
	goTool := needTool(t, "go")
	name := filepath.Base(pkg)
	if pkg == "." {
		name = "idem"
	}
	bin := filepath.Join(t.TempDir(), name)
	c := inherit(nil, goTool, "build", "-tags", tags, "-o", bin, pkg)
	c.dir, c.timeout = moduleRoot(t), 10*time.Minute
	output(t, c)
	return bin
}

// idemBin is idem as the test binary provides it (testscript.Main puts it
// on PATH).
func idemBin(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("idem")
	if err != nil {
		t.Fatalf("idem is not on PATH: %v", err)
	}
	return p
}
