package e2e

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
)

// TestInspectAnotherUsersLedger: a ledger another user may only read is
// inspected, listed by purge --dry-run and completed as that user (nobody:
// root ignores permissions), and nothing beside it or in it changes.
func TestInspectAnotherUsersLedger(t *testing.T) {
	root := sharedDir(t)
	idem := copyExe(t, idemBin(t), mkdir(t, filepath.Join(root, "bin"), 0o755))
	dir := mkdir(t, filepath.Join(root, "ledger"), 0o755)
	path := filepath.Join(dir, "ledger.db")
	newLedger(t, idemBin(t), path)
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	before := listing(t, dir)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string // a line of stdout
	}{
		{[]string{"inspect"}, `(?m)^seed:key-1 +failed `},
		{[]string{"inspect", "seed:key-0"}, `(?m)^status: +succeeded`},
		{[]string{"inspect", "--stdout", "seed:key-2"}, `^seeded\n$`},
		{[]string{"purge", "--all", "--dry-run"}, `(?m)^seed:key-0$`},
		{[]string{"__complete", "inspect", "seed:"}, `(?m)^seed:key-2$`},
	} {
		rc := clean(nil, idem, append([]string{"--ledger", path}, c.args...)...)
		rc.nobody, rc.dir = true, root
		p := run(t, rc).expect(0)
		if !regexp.MustCompile(c.want).MatchString(p.stdout) {
			t.Errorf("%v as nobody: stdout does not match %q: %v", c.args, c.want, p)
		}
	}
	if got := listing(t, dir); got != before {
		t.Errorf("the ledger's directory changed:\n%s\nwant:\n%s", got, before)
	}
	if after, _ := os.ReadFile(path); string(after) != string(data) {
		t.Error("the ledger file changed")
	}
}

// TestSpoolOnATerminalSaysSo: --stdin spool reads all of stdin before the
// command starts; on a terminal idem says so instead of seeming to hang,
// and the typed bytes reach the command.
func TestSpoolOnATerminalSaysSo(t *testing.T) {
	g := newLeaseRig(t)
	master, slave := needPTY(t)
	p, screen := g.startOnTerminal(master, slave, "run", "--key", "tty:spool", "--stdin", "spool", "--", "catstdin")
	until(t, "the notice about stdin", func() bool {
		return strings.Contains(screen(), "idem: --stdin spool reads all of stdin before the command starts: type it, then Ctrl-D")
	})
	if _, err := master.Write([]byte("typed\n\x04")); err != nil { // a line, then ^D
		t.Fatal(err)
	}
	p.wait()
	if p.exitStatus != (exitStatus{}) {
		t.Fatalf("idem: %v; terminal: %q", p.exitStatus, screen())
	}
	until(t, "the command's output", func() bool { return strings.Count(screen(), "typed") >= 2 }) // echoed, then printed
}

// TestRetryAfterFileReclaimed: idem names the IDEM_RETRY_AFTER file and
// the command creates it by writing it (a run whose command does not pays
// nothing for it). The file of a run killed with SIGKILL (which cannot
// clean up) is removed by the next run whose command uses one, and a run
// that ends removes its own: nothing piles up in the temporary directory.
func TestRetryAfterFileReclaimed(t *testing.T) {
	dir := t.TempDir()
	tmp := mkdir(t, filepath.Join(dir, "tmp"), 0o700)
	env := []string{"TMPDIR=" + tmp, "IDEM_LEDGER=" + filepath.Join(dir, "ledger.db")}
	named := filepath.Join(dir, "named")
	p := run(t, clean(env, idemBin(t), "run", "--key", "retry-after:killed", "--",
		"/bin/sh", "-c", `echo "$IDEM_RETRY_AFTER" > "$0"; echo 1s > "$IDEM_RETRY_AFTER"; kill -9 $PPID; sleep 5`, named))
	if p.signal != syscall.SIGKILL {
		t.Fatalf("the kill did not happen: %v", p)
	}
	b, err := os.ReadFile(named)
	if err != nil {
		t.Fatal(err)
	}
	left := strings.TrimSpace(string(b))
	if !strings.HasPrefix(left, tmp+"/") {
		t.Fatalf("IDEM_RETRY_AFTER %q is not under TMPDIR %s", left, tmp)
	}
	if _, err := os.Stat(left); err != nil {
		t.Fatalf("the killed run's file is not there to reclaim: %v", err)
	}
	run(t, clean(env, idemBin(t), "run", "--key", "retry-after:plain", "--", "/bin/true")).expect(0)
	if _, err := os.Stat(left); err != nil {
		t.Fatalf("a run whose command wrote no file reclaimed the killed run's (it need not look): %v", err)
	}
	run(t, clean(env, idemBin(t), "run", "--key", "retry-after:next", "--", "/bin/sh", "-c", `echo 1s > "$IDEM_RETRY_AFTER"`)).expect(0)
	if _, err := os.Stat(left); !os.IsNotExist(err) {
		t.Errorf("the next run did not reclaim %s: %v", left, err)
	}
	var files []string
	filepath.WalkDir(tmp, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files = append(files, path)
		}
		return nil
	})
	if len(files) != 0 {
		t.Errorf("files left in TMPDIR: %q", files)
	}
}

// TestRetryAfterWithoutPrivateDirectory: another user made the private
// directory first ($TMPDIR/idem-UID, theirs): the IDEM_RETRY_AFTER file
// then lives in a directory made for the run alone, the caller's and
// private, never in the shared temporary directory, where another user
// could put a link or a FIFO in its place; it goes when the run ends.
func TestRetryAfterWithoutPrivateDirectory(t *testing.T) {
	needRoot(t)
	_, tmp := stickyDir(t) // as /tmp is: everyone may make a directory there
	taken := clean(nil, "mkdir", "-m", "700", filepath.Join(tmp, "idem-0"))
	taken.nobody = true
	run(t, taken).expect(0)
	env := []string{"TMPDIR=" + tmp, "IDEM_LEDGER=" + filepath.Join(t.TempDir(), "ledger.db")}
	p := run(t, clean(env, idemBin(t), "run", "--key", "retry-after:taken", "--", "/bin/sh", "-c",
		`d=$(dirname "$IDEM_RETRY_AFTER"); echo "$d"; stat -c '%a %u' "$d"; echo 1s > "$IDEM_RETRY_AFTER"`)).expect(0)
	lines := strings.Split(strings.TrimSpace(p.stdout), "\n")
	if len(lines) != 2 || filepath.Dir(lines[0]) != tmp || lines[0] == filepath.Join(tmp, "idem-0") || lines[1] != "700 0" {
		t.Fatalf("IDEM_RETRY_AFTER's directory: %q; want a directory of root's alone, 0700, in TMPDIR", lines)
	}
	if _, err := os.Stat(lines[0]); !os.IsNotExist(err) {
		t.Errorf("the run's own directory %s is still there: %v", lines[0], err)
	}
}
