package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
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
	for _, tool := range []string{"git", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found", tool)
		}
	}
	if err := exec.Command("git", "rev-parse", "--git-dir").Run(); err != nil {
		t.Skip("not a git checkout")
	}
	head := strings.TrimSpace(runIn(t, ".", "git", "rev-parse", "HEAD"))
	clone := filepath.Join(t.TempDir(), "idem")
	runIn(t, ".", "git", "clone", "--quiet", "--no-hardlinks", ".", clone)

	// the module path is the one 'go install <module>@latest' asks for, and
	// the main package is the module's root
	if got := strings.TrimSpace(runIn(t, clone, "go", "list", "-f", "{{.ImportPath}} {{.Name}}", ".")); got != "github.com/idemhq/idem main" {
		t.Fatalf("go list . = %q, want the main package at the module root", got)
	}

	bin := t.TempDir()
	env := append(os.Environ(), "GOBIN="+bin, "GOFLAGS=-buildvcs=true")
	cmd := exec.Command("go", "install", ".")
	cmd.Dir, cmd.Env = clone, env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go install . in a clean clone: %v\n%s", err, out)
	}
	out := runIn(t, clone, filepath.Join(bin, "idem"), "--version")
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
	cmd = exec.Command("go", "build", "-o", filepath.Join(bin, "idem-x"),
		"-ldflags", "-X github.com/idemhq/idem/cmd.version=v9.8.7", ".")
	cmd.Dir, cmd.Env = clone, env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build -ldflags -X: %v\n%s", err, out)
	}
	out = runIn(t, clone, filepath.Join(bin, "idem-x"), "--version")
	if want := "idem version v9.8.7 (" + head[:12] + ")\n"; out != want {
		t.Fatalf("--version with -X = %q, want %q", out, want)
	}
}

func runIn(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}
