package e2e

import (
	"os/user"
	"path/filepath"
	"strings"
	"testing"
)

// TestSystemUserWithoutHome: a system user whose home does not exist
// (nobody's /nonexistent, as runuser leaves HOME) cannot make the default
// ledger, and idem does not make the home; the hint names the fix,
// IDEM_LEDGER, not permissions to change, and with IDEM_LEDGER set the
// same run works. A home that exists but is not the user's is the other
// case: the default ledger's directory cannot be made in it.
func TestSystemUserWithoutHome(t *testing.T) {
	needTool(t, "runuser")
	u, err := user.Lookup("nobody")
	if err != nil {
		t.Fatalf("user nobody: %v", err)
	}
	root := sharedDir(t)
	idem := copyExe(t, idemBin(t), mkdir(t, filepath.Join(root, "bin"), 0o755))
	env := []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent", "LC_ALL=C"}
	argv := []string{"runuser", "-u", u.Username, "--", "env", "-i"}
	c := command{argv: append(append(append([]string{}, argv...), env...), idem, "run", "--key", "job:nightly", "--", "true"), dir: root}
	p := run(t, c).expect(74)
	if p.stderr != "idem: error: cannot make the default ledger: HOME /nonexistent is not a directory\n"+
		"idem: hint: set IDEM_LEDGER to a file in a directory this user owns (a system user's home is often missing), or HOME to a directory that exists\n" {
		t.Fatalf("as nobody without a home: %v", p)
	}

	// a home that is root's: the directory cannot be made in it
	c.argv = append(append(append([]string{}, argv...), "PATH=/usr/bin:/bin", "HOME="+mkdir(t, filepath.Join(root, "roots"), 0o755), "LC_ALL=C"),
		idem, "run", "--key", "job:nightly", "--", "true")
	p = run(t, c).expect(74)
	if !strings.Contains(p.stderr, "idem: error: ledger "+filepath.Join(root, "roots")+"/.local/state/idem: create directory: ") ||
		!strings.Contains(p.stderr, "\nidem: hint: this user may not create the default ledger in its home directory (a system user's is often missing or not its own): set IDEM_LEDGER to a file in a directory it owns\n") {
		t.Fatalf("as nobody with root's home: %v", p)
	}
	if n := strings.Count(p.stderr, "\n"); n != 2 {
		t.Errorf("want one error line and one hint, got %d lines: %v", n, p)
	}

	// the fix the hint names
	dir := mkdir(t, filepath.Join(root, "state"), 0o777)
	env = append(env, "IDEM_LEDGER="+filepath.Join(dir, "ledger.db"))
	c.argv = append(append(append([]string{}, argv...), env...), idem, "run", "--key", "job:nightly", "--", "echo", "ran")
	if p := run(t, c).expect(0); p.stdout != "ran\n" {
		t.Errorf("with IDEM_LEDGER set: %v", p)
	}
}
