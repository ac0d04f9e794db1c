package e2e

// Other processes and other users on the host cannot make idem overlap two
// runs of a key, signal or wait on their processes, or hand its command a
// file of their choosing as fd 3: a leftover of an earlier attempt that
// cleared its environment but keeps fd 3, a marker (IDEM_RUN) forged by
// another uid, a symlink or a file another user planted as the run lock.

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// hostileRig is a ledger in its own directory, and idem run there.
type hostileRig struct {
	t      *testing.T
	dir    string
	ledger string
}

func newHostileRig(t *testing.T) *hostileRig {
	t.Helper()
	needProcs(t)
	dir := t.TempDir()
	return &hostileRig{t: t, dir: dir, ledger: filepath.Join(dir, "ledger.db")}
}

// idem is `idem run ARGS...` in the rig's directory.
func (g *hostileRig) idem(args ...string) command {
	c := inherit([]string{"IDEM_LEDGER=" + g.ledger}, idemBin(g.t), append([]string{"run"}, args...)...)
	c.dir = g.dir
	return c
}

// waitPID waits until path holds a pid other than old, and returns it.
func waitPID(t *testing.T, path string, old int) int {
	t.Helper()
	for end := time.Now().Add(time.Minute); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		b, _ := os.ReadFile(path)
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid != old && alive(pid) {
			return pid
		}
	}
	t.Fatalf("no new pid in %s", path)
	return 0
}

// TestAttemptLeftoverWithoutEnvironment: each attempt starts a background
// process that clears its environment (the scan by IDEM_RUN cannot see it)
// but keeps fd 3, and exits 75. The next attempt must not start while it
// runs: idem finds it by the lock it holds and stops it first.
func TestAttemptLeftoverWithoutEnvironment(t *testing.T) {
	timed(t)
	g := newHostileRig(t)
	script := `p=$(cat pid 2>/dev/null)
if [ -n "$p" ] && [ -d /proc/$p ] && ! grep -q '^State:.*Z' /proc/$p/status; then echo overlap >> log; fi
echo attempt >> log
env -i sh -c 'exec sleep 30' &
echo $! > pid
exit 75`
	t.Cleanup(func() {
		if b, err := os.ReadFile(filepath.Join(g.dir, "pid")); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	p := run(t, g.idem("--max-attempts", "3", "--initial-delay", "10ms", "--kill-grace", "2s", "--key", "job:hostile", "--", "sh", "-c", script)).expect(75)
	log := readFile(filepath.Join(g.dir, "log"))
	if strings.Count(log, "attempt") != 3 || strings.Contains(log, "overlap") {
		t.Fatalf("attempts overlapped their predecessors' leftovers:\n%s\n%s", log, p)
	}
}

// forger starts (as nobody, or as idem's own uid) a loop that starts a
// TERM-ignoring sleep under IDEM_RUN=marker every 20ms, so that one is
// always running whatever gets killed, and writes each one's pid to the
// file it returns. The loop and its sleeps are one session, killed at the
// end of the test.
func forger(t *testing.T, marker string, asNobody bool) string {
	t.Helper()
	_, sticky := stickyDir(t)
	pidFile := filepath.Join(sticky, "forged")
	c := clean(nil, "setsid", "sh", "-c", `trap '' TERM; while :; do env IDEM_RUN="$0" sleep 1000 & echo $! > "$1"; sleep 0.02; done`, marker, pidFile)
	c.nobody, c.timeout = asNobody, 10*time.Minute
	f := start(t, c)
	t.Cleanup(func() { syscall.Kill(-f.pid(), syscall.SIGKILL) })
	return pidFile
}

// markerJob appends its IDEM_RUN to the file runs, and exits 0 if the
// file go exists, else 75.
var markerJob = []string{"sh", "-c", `echo "$IDEM_RUN" >> runs; [ -f go ] && exit 0; exit 75`}

// marker is the IDEM_RUN that a run of markerJob as key k printed: the
// run fails for good (one attempt), so that the next one, with
// --rerun-failed, scans for earlier runs' processes.
func (g *hostileRig) marker(k string) string {
	run(g.t, g.idem(append([]string{"--max-attempts", "1", "--key", k, "--"}, markerJob...)...)).expect(75)
	return strings.TrimSpace(readFile(filepath.Join(g.dir, "runs")))
}

// TestForgedMarker: a process that carries root's run marker but is not
// of that run keeps being respawned, TERM-ignoring: nobody's, with the
// marker as root's run printed it, and root's own, with the marker
// without its tag (the ledger's identity is a hash anyone who can stat
// the file computes; the tag needs the ledger's secret). Root's idem
// neither signals it nor waits on it: the next run of the key runs at
// once.
func TestForgedMarker(t *testing.T) {
	for name, asNobody := range map[string]bool{"nobody": true, "untagged": false} {
		t.Run(name, func(t *testing.T) {
			g := newHostileRig(t)
			marker := g.marker("job:hostile")
			if !asNobody {
				id, rest, _ := strings.Cut(marker, "/")
				id, _, _ = strings.Cut(id, ".")
				marker = id + "/" + rest
			}
			pidFile := forger(t, marker, asNobody)
			pid := waitPID(t, pidFile, 0)
			os.WriteFile(filepath.Join(g.dir, "go"), nil, 0o644)
			c := g.idem(append([]string{"--max-attempts", "2", "--rerun-failed", "--kill-grace", "1s", "--key", "job:hostile", "--"}, markerJob...)...)
			c.timeout = 30 * time.Second
			run(t, c).expect(0)
			if !alive(pid) {
				t.Fatalf("root's idem stopped the forger's process %d", pid)
			}
		})
	}
}

// TestSignalEndsStopLoop: a process of idem's own uid that carries an
// earlier run's marker keeps being respawned, so the scan never comes up
// empty; a SIGTERM to idem ends the stop loop after one kill grace, exit
// 143, and nothing ran. The forger respawns every 20ms; on a machine busy
// enough to leave it unscheduled for longer than idem takes from one scan
// to the next, the scan does come up empty and idem runs the command
// before the SIGTERM, as it should: that try shows nothing of the loop,
// and is made again (at most three times).
func TestSignalEndsStopLoop(t *testing.T) {
	for try := 1; ; try++ {
		ranFirst, failure := signalStopLoop(t)
		switch {
		case failure == "":
			return
		case ranFirst && try < 3:
			t.Logf("try %d: the forger was not respawned in time, and the command ran before the SIGTERM; again", try)
		default:
			t.Fatal(failure)
		}
	}
}

// signalStopLoop is one try of TestSignalEndsStopLoop: the failure ("":
// none), and whether the command ran, and ended, before the SIGTERM.
func signalStopLoop(t *testing.T) (ranFirst bool, failure string) {
	g := newHostileRig(t)
	marker := g.marker("job:hostile")
	pidFile := forger(t, marker, false)
	first := waitPID(t, pidFile, 0)
	c := g.idem(append([]string{"--max-attempts", "2", "--rerun-failed", "--kill-grace", "1s", "--key", "job:hostile", "--"}, markerJob...)...)
	p := start(t, c)
	for end := time.Now().Add(time.Minute); alive(first); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) { // idem kills it in its stop loop
			return false, fmt.Sprintf("idem did not stop %d:\n%s", first, p)
		}
	}
	p.send(syscall.SIGTERM)
	p.wait().expect(143)
	if runs := readFile(filepath.Join(g.dir, "runs")); strings.Count(runs, "\n") != 1 {
		return strings.Contains(p.stderr, "attempt 1/2 exited 75"), fmt.Sprintf("the command ran although idem was stopped before it:\n%s\n%s", runs, p)
	}
	return false, ""
}

// TestPlantedRunLock: in a directory everyone may write (mode 1777),
// nobody plants the run lock as a symlink to a file of root's, as a
// symlink to a missing path, and as a file of its own. Root's idem
// refuses each (74, nothing run), never hands the command the file as fd
// 3 and never creates the link's target.
func TestPlantedRunLock(t *testing.T) {
	secretDir := t.TempDir()
	secret := filepath.Join(secretDir, "secret")
	if err := os.WriteFile(secret, []byte("root only\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(secretDir, "created")
	for name, plant := range map[string][]string{
		"link":        {"ln", "-s", secret},
		"dangling":    {"ln", "-s", missing},
		"nobody-file": {"touch"},
	} {
		t.Run(name, func(t *testing.T) {
			needProcs(t)
			_, dir := stickyDir(t)
			g := &hostileRig{t: t, dir: dir, ledger: filepath.Join(dir, "ledger.db")}
			c := clean(nil, plant[0], append(plant[1:], g.ledger+".runlock")...)
			c.nobody = true
			run(t, c).expect(0)
			p := run(t, g.idem("--key", "job:hostile", "--", "sh", "-c", "cat <&3 > got; echo x >&3; echo ran > ran")).expect(74)
			if !strings.Contains(p.stderr, "idem: hint:") {
				t.Errorf("no hint:\n%s", p)
			}
			if _, err := os.Stat(filepath.Join(g.dir, "ran")); err == nil {
				t.Errorf("the command ran:\n%s", p)
			}
			if b, _ := os.ReadFile(secret); string(b) != "root only\n" {
				t.Errorf("root's file changed: %q", b)
			}
			if _, err := os.Lstat(missing); err == nil {
				t.Errorf("root created the link's target")
			}
		})
	}
}

// TestForgedOwnerNotSignalled: whoever can write the ledger can name any
// process as a record's owner (its pid and start time, which anyone reads
// in /proc/PID/stat, on this boot, lease expired). The next run takes the
// key over but signals the named process only if it holds the key's run
// lock, as the key's idem does: a bystander of the same user lives on.
func TestForgedOwnerNotSignalled(t *testing.T) {
	sqlite3 := needTool(t, "sqlite3")
	g := newHostileRig(t)
	run(t, g.idem("--key", "forge:owner1", "--", "true")).expect(0)
	victim := start(t, clean(nil, "sleep", "300"))
	t.Cleanup(func() { victim.send(syscall.SIGKILL) })
	forgeOwner(t, sqlite3, g.ledger, "forge:owner1", victim.pid())
	p := run(t, g.idem("--key", "forge:owner1", "--", "true")).expect(0)
	if !alive(victim.pid()) {
		t.Fatalf("idem signalled the process the forged record named as its owner: %v", p)
	}
}

// forgeOwner makes key's record in the ledger at path a run in progress
// whose lease has lapsed, owned by process pid on this host, as anyone who
// can write the ledger can (with SQLite's own shell).
func forgeOwner(t *testing.T, sqlite3, path, key string, pid int) {
	t.Helper()
	startTime, _, err := statOf(pid)
	if err != nil {
		t.Fatal(err)
	}
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	var ns syscall.Stat_t
	if err := syscall.Stat("/proc/self/ns/pid", &ns); err != nil {
		t.Fatal(err)
	}
	forge := fmt.Sprintf(`UPDATE records SET status = 'in_progress', finished_ms = NULL, exit_code = NULL, expires_ms = NULL,
		owner_boot_id = '%s', owner_pidns = %d, owner_pid = %d, owner_start = %d, lease_expires_ms = 1 WHERE key = '%s'`,
		strings.TrimSpace(string(boot)), ns.Ino, pid, startTime, key)
	if out, err := runOut(sqlite3, path, forge); err != nil {
		t.Fatalf("sqlite3: %v %s", err, out)
	}
}

// The forger of a record also puts a link where the ledger's run lock
// goes, to the run lock of another ledger, where the process the record
// names (a real idem) holds the key's byte. That proves nothing of this
// ledger: the run lock is taken by its own name, never through a link, so
// idem refuses the link (74) and signals no one.
func TestForgedOwnerLinkedLockNotSignalled(t *testing.T) {
	sqlite3 := needTool(t, "sqlite3")
	g := newHostileRig(t)
	run(t, g.idem("--key", "forge:owner2", "--", "true")).expect(0)
	other := filepath.Join(g.dir, "other.db")
	started, log := filepath.Join(g.dir, "started"), filepath.Join(g.dir, "log")
	victim := start(t, clean(nil, "idem", "--ledger", other, "run", "--key", "forge:owner2", "--",
		"sh", "-c", `trap 'echo TERM >>"$1"; exit 1' TERM; echo up >"$2"; sleep 3 & wait; echo done >>"$1"`, "sh", log, started))
	waitForFile(t, started)
	forgeOwner(t, sqlite3, g.ledger, "forge:owner2", victim.pid())
	if err := os.Remove(g.ledger + ".runlock"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(other+".runlock", g.ledger+".runlock"); err != nil {
		t.Fatal(err)
	}
	p := run(t, g.idem("--key", "forge:owner2", "--", "true")).expect(74)
	victim.wait().expect(0)
	if got, _ := os.ReadFile(log); string(got) != "done\n" {
		t.Errorf("the idem the forged record named was signalled: its command wrote %q; the forger's run: %v", got, p)
	}
}

// A copy of a ledger (idem backup, cp) records the original's run lock by
// its device and inode. A run on the copy must not take the original's
// lock file for its own (the copy's is not there yet): it would find a run
// of the same key under the original holding the key's byte, and stop it
// as a leftover of its own. The original's command is not signalled and
// ends as it would have; the copy's run runs.
func TestCopiedLedgerLeavesOriginalRun(t *testing.T) {
	quiet(t)
	needProcs(t)
	dir := t.TempDir()
	orig, copied := filepath.Join(dir, "a.db"), filepath.Join(dir, "b.db")
	started, log := filepath.Join(dir, "started"), filepath.Join(dir, "log")
	run(t, clean(nil, "idem", "--ledger", orig, "run", "--key", "copy:warm", "--", "true")).expect(0)
	run(t, clean(nil, "idem", "--ledger", orig, "backup", copied)).expect(0)
	a := start(t, clean(nil, "idem", "--ledger", orig, "run", "--key", "copy:job", "--",
		"sh", "-c", `trap 'echo TERM >>"$1"; exit 1' TERM; echo up >"$2"; sleep 3 & wait; echo done >>"$1"`, "sh", log, started))
	waitForFile(t, started)
	ranb := filepath.Join(dir, "ranb")
	b := run(t, clean(nil, "idem", "--ledger", copied, "run", "--key", "copy:job", "--", "appendto", ranb, "x")).expect(0)
	a.wait().expect(0)
	if got, _ := os.ReadFile(log); string(got) != "done\n" {
		t.Errorf("the original's command: %q, want it to end on its own; the copy's run: %v", got, b)
	}
	if got, _ := os.ReadFile(ranb); string(got) != "x\n" {
		t.Errorf("the copy's command: %q", got)
	}
}
