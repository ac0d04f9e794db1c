package e2e

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestInstallFromCleanClone installs idem with 'go install .' from a fresh
// git clone of this repository's committed tree (what 'go install
// github.com/idemhq/idem@latest' builds once published), and checks
// --version: the VCS revision from the build info, and a link-time -X
// version that overrides the module version.
func TestInstallFromCleanClone(t *testing.T) {
	if testing.Short() {
		t.Skip("builds idem twice; skipped with -short")
	}
	root := needGitCheckout(t)
	git, goTool := needTool(t, "git"), needTool(t, "go")
	head := strings.TrimSpace(runIn(t, root, nil, git, "rev-parse", "HEAD"))
	clone := filepath.Join(t.TempDir(), "idem")
	runIn(t, root, nil, git, "clone", "--quiet", "--no-hardlinks", ".", clone)

	// the module path is the one 'go install <module>@latest' asks for, and
	// the main package is the module's root
	if got := strings.TrimSpace(runIn(t, clone, nil, goTool, "list", "-f", "{{.ImportPath}} {{.Name}}", ".")); got != "github.com/idemhq/idem main" {
		t.Fatalf("go list . = %q, want the main package at the module root", got)
	}

	bin := t.TempDir()
	env := []string{"GOBIN=" + bin, "GOFLAGS=-buildvcs=true"}
	runIn(t, clone, env, goTool, "install", ".")
	out := runIn(t, clone, nil, filepath.Join(bin, "idem"), "--version")
	// "idem version v0.0.0-<date>-<rev12>": the pseudo-version Go derives
	// from HEAD (a tagged commit gives its tag and "(<rev12>)")
	want := regexp.MustCompile(`^idem version (v0\.0\.0-\d{14}-` + head[:12] + `|v\S+ \(` + head[:12] + `\))\n$`)
	if !want.MatchString(out) {
		t.Fatalf("--version of a VCS build = %q, want %s", out, want)
	}
	if testing.Verbose() {
		t.Logf("go install . gives: %s", out)
	}

	// -ldflags -X overrides the version; the revision stays
	runIn(t, clone, env, goTool, "build", "-o", filepath.Join(bin, "idem-x"),
		"-ldflags", "-X github.com/idemhq/idem/cmd.version=v9.8.7", ".")
	out = runIn(t, clone, nil, filepath.Join(bin, "idem-x"), "--version")
	if want := "idem version v9.8.7 (" + head[:12] + ")\n"; out != want {
		t.Fatalf("--version with -X = %q, want %q", out, want)
	}
}

// runIn runs name args... in dir with the test's environment plus env,
// fails the test unless it exits 0, and returns its stdout.
func runIn(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	c := inherit(env, name, args...)
	c.dir, c.timeout = dir, 10*time.Minute
	return output(t, c)
}
