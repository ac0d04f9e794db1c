package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/rogpeppe/go-internal/txtar"
)

// dynamicUID is a uid in the range DynamicUser= allocates from
// (61184-65519) that no password database names, as a dynamic user's is
// not in /etc/passwd.
const dynamicUID = 61234

// TestShippedSystemdUnits: the example units the packages ship are the
// ones the systemd recipe's script verifies and runs, byte for byte, and
// the service's ExecStart= works in the environment systemd gives it:
// env -i with PATH and STATE_DIRECTORY only, no HOME, as a uid in no
// password database, in the layout DynamicUser= makes (/var/lib/idem a
// link to private/idem, the service's 0700 directory). It runs, a second
// start replays, and the ledger is in the state directory.
func TestShippedSystemdUnits(t *testing.T) {
	root := moduleRoot(t)
	ar, err := txtar.ParseFile(filepath.Join(root, "testscripts", "readme_systemd.txtar"))
	if err != nil {
		t.Fatal(err)
	}
	var service string
	for _, name := range []string{"idem-example.service", "idem-example.timer"} {
		shipped, err := os.ReadFile(filepath.Join(root, "packaging", "systemd", name))
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, f := range ar.Files {
			if f.Name == name {
				found = true
				if string(f.Data) != string(shipped) {
					t.Errorf("packaging/systemd/%s is not the unit testscripts/readme_systemd.txtar tests: change both together", name)
				}
			}
		}
		if !found {
			t.Errorf("testscripts/readme_systemd.txtar does not test packaging/systemd/%s", name)
		}
		if name == "idem-example.service" {
			service = string(shipped)
		}
	}

	needTool(t, "setpriv")
	m := regexp.MustCompile(`(?m)^ExecStart=(.*)$`).FindStringSubmatch(service)
	if m == nil {
		t.Fatal("the shipped service has no ExecStart=")
	}
	dir := sharedDir(t)
	idem := copyExe(t, idemBin(t), mkdir(t, filepath.Join(dir, "bin"), 0o755))
	// What systemd does to the line before it runs it: $$ and %% undone.
	line := strings.NewReplacer("$$", "$", "%%", "%", "/usr/bin/idem", idem).Replace(m[1])
	argv := splitExecStart(t, line)

	// DynamicUser='s layout: private is root's (0700 in systemd; the
	// service reaches it through its own mount namespace, which here is
	// a directory it may traverse), private/idem the service's, and the
	// state directory a link to it.
	lib := mkdir(t, filepath.Join(dir, "var", "lib"), 0o755)
	private := mkdir(t, filepath.Join(lib, "private"), 0o711)
	state := mkdir(t, filepath.Join(private, "idem"), 0o700)
	if err := os.Chown(state, dynamicUID, dynamicUID); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("private/idem", filepath.Join(lib, "idem")); err != nil {
		t.Fatal(err)
	}
	start := func() *process {
		uid := strconv.Itoa(dynamicUID)
		c := command{argv: append([]string{"setpriv", "--reuid", uid, "--regid", uid, "--clear-groups",
			"env", "-i", "PATH=/usr/bin:/bin", "STATE_DIRECTORY=" + filepath.Join(lib, "idem")}, argv...), dir: "/"}
		return run(t, c)
	}
	if p := start().expect(0); p.stdout != "the daily job ran\n" || p.stderr != "" {
		t.Fatalf("the first start: %v", p)
	}
	p := start().expect(0)
	if p.stdout != "the daily job ran\n" || !regexp.MustCompile(`^idem: replayed example:daily:\d{4}-\d\d-\d\d: succeeded `).MatchString(p.stderr) {
		t.Fatalf("the second start does not replay: %v", p)
	}
	fi, err := os.Stat(filepath.Join(state, "ledger.db"))
	if err != nil {
		t.Fatalf("the ledger is not in the state directory: %v", err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != dynamicUID || fi.Mode().Perm() != 0o600 {
		t.Errorf("the ledger is uid %d mode %v, want the service's uid and 0600", st.Uid, fi.Mode().Perm())
	}
	out := output(t, inherit(nil, idem, "--ledger", filepath.Join(lib, "idem", "ledger.db"), "inspect", "--prefix", "example:"))
	if !regexp.MustCompile(`(?m)^example:daily:\d{4}-\d\d-\d\d +succeeded +1/5 `).MatchString(out) || strings.Count(out, "example:") != 1 {
		t.Errorf("inspect of the state directory's ledger:\n%s", out)
	}
}

// splitExecStart splits an ExecStart= line of the form the shipped unit
// uses, /bin/sh -c '...', into its argv.
func splitExecStart(t *testing.T, line string) []string {
	t.Helper()
	head, script, ok := strings.Cut(line, " -c '")
	if !ok || !strings.HasSuffix(script, "'") || strings.Contains(head, " ") {
		t.Fatalf("ExecStart= is not PROGRAM -c '...': %s", line)
	}
	return []string{head, "-c", strings.TrimSuffix(script, "'")}
}
