package e2e

// Where the module is, and the builds of idem the tests run: the test
// binary itself (testscript.Main puts it on PATH as idem), and builds with
// a build tag that gives internal/probe's points a meaning.

import (
	"context"
	"fmt"
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
// idem is built with idem-net beside it, which it hands PostgreSQL ledgers.
func buildTagged(t *testing.T, tags, pkg string) string {
	t.Helper()
	goTool := needTool(t, "go")
	dir := t.TempDir()
	if pkg == "." {
		if err := buildIdems(goTool, moduleRoot(t), dir, tags); err != nil {
			t.Fatal(err)
		}
		return filepath.Join(dir, "idem")
	}
	bin := filepath.Join(dir, filepath.Base(pkg))
	c := inherit(nil, goTool, "build", "-tags", tags, "-o", bin, pkg)
	c.dir, c.timeout = moduleRoot(t), 10*time.Minute
	output(t, c)
	return bin
}

// buildIdems builds idem and idem-net (which idem hands PostgreSQL
// ledgers, from beside it) from the module at root into dir, with -tags
// tags.
func buildIdems(goTool, root, dir, tags string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	for name, pkg := range map[string]string{"idem": ".", "idem-net": "./cmd/idem-net"} {
		c := exec.CommandContext(ctx, goTool, "build", "-tags", tags, "-o", filepath.Join(dir, name), pkg)
		c.Dir = root
		if out, err := c.CombinedOutput(); err != nil {
			return fmt.Errorf("go build -tags %s %s: %v\n%s", tags, pkg, err, out)
		}
	}
	return nil
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
