package e2e

// The run lock file is bound to its ledger: deleted or replaced while a
// process of a run still has it open, idem keeps locking on that file,
// and its times are kept fresh so that an age-based cleaner leaves it
// alone.

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// envlessLeftoverJob is a job whose first execution leaves a process that
// cleared its environment (no scan by IDEM_RUN finds it) but keeps fd 3,
// its pid in the file pid, and then does what first says; a later
// execution appends "overlap" to runs when that process still runs.
func envlessLeftoverJob(key, first string, flags ...string) []string {
	return append(append([]string{"--key", key}, flags...), "--", "sh", "-c",
		`echo ran >> runs
		if [ -e pid ] && [ -d /proc/$(cat pid) ] && ! grep -q '^State:.*Z' /proc/$(cat pid)/status; then echo overlap >> runs; fi
		[ -e pid ] && exit 0
		env -i sh -c 'exec sleep 30' & echo $! > pid
		`+first)
}

// TestRunLockDeleted: a run's command leaves a process that cleared its
// environment but keeps fd 3; idem is SIGKILLed and the run lock file
// deleted. The next run takes the key over on the old file, which the
// leftover keeps open: it finds the leftover by the lock it holds there
// and stops it before the command runs again, instead of running beside
// it on a new file.
func TestRunLockDeleted(t *testing.T) {
	g := newHostileRig(t)
	job := envlessLeftoverJob("job:lockgone", "exec sleep 30")
	rerunWithoutLockFile(t, g, job, leftBehind(t, g, job))
}

// TestRunLockMoved: as TestRunLockDeleted, with the run lock file moved
// aside (mv) instead of deleted: the kernel then names the leftover's file
// by its new name, and idem knows it for its ledger's by the mark it
// carries, not by its name.
func TestRunLockMoved(t *testing.T) {
	g := newHostileRig(t)
	job := envlessLeftoverJob("job:lockmoved", "exec sleep 30")
	left := leftBehind(t, g, job)
	if err := os.Rename(g.ledger+".runlock", filepath.Join(g.dir, "moved-aside")); err != nil {
		t.Fatal(err)
	}
	rerunAfterLockFileWent(t, g, job, left)
}

// TestRunLockDeletedAfterRetryable: the leftover outlives an invocation
// that ended retryable (its next attempt's backoff would pass the
// deadline), so no record is in progress when the run lock file is
// deleted. The next run must still not run beside it: the leftover keeps
// the old file open, and idem stops it there.
func TestRunLockDeletedAfterRetryable(t *testing.T) {
	g := newHostileRig(t)
	job := envlessLeftoverJob("job:lockgone-retry", "exit 75", "--initial-delay", "1h", "--max-delay", "1h", "--deadline", "30s")
	run(t, g.idem(job...)).expect(75)
	left := waitPID(t, filepath.Join(g.dir, "pid"), 0)
	t.Cleanup(func() { syscall.Kill(left, syscall.SIGKILL) })
	rerunWithoutLockFile(t, g, job, left)
	// With nothing left holding the old file, the next run binds a new one.
	run(t, g.idem("--key", "job:lockgone-other", "--", "true")).expect(0)
	if _, err := os.Stat(g.ledger + ".runlock"); err != nil {
		t.Errorf("no new run lock once the old file was let go: %v", err)
	}
}

// TestRunLockKeptFresh: a run sets the times of a lock file untouched for
// days, so that a cleaner deleting old files (find -mtime +0 -delete, as
// systemd-tmpfiles and tmpreaper do by age) leaves it; and once nothing
// is in progress, a deleted lock file is simply made again.
func TestRunLockKeptFresh(t *testing.T) {
	g := newHostileRig(t)
	run(t, g.idem("--key", "job:fresh-1", "--", "true")).expect(0)
	lock := g.ledger + ".runlock"
	old := time.Now().Add(-72 * time.Hour)
	if err := os.Chtimes(lock, old, old); err != nil {
		t.Fatal(err)
	}
	run(t, g.idem("--key", "job:fresh-2", "--", "true")).expect(0)
	run(t, inherit(nil, "find", g.dir, "-name", "*.runlock", "-mtime", "+0", "-delete")).expect(0)
	if _, err := os.Stat(lock); err != nil {
		t.Fatalf("the cleaner deleted the run lock: %v", err)
	}
	if err := os.Remove(lock); err != nil {
		t.Fatal(err)
	}
	run(t, g.idem("--key", "job:fresh-3", "--", "true")).expect(0)
	if _, err := os.Stat(lock); err != nil {
		t.Fatalf("no new run lock: %v", err)
	}
}

// TestLedgerKeptFresh: a ledger's writes go to its -wal, so its main file
// keeps an old modification time between checkpoints; a run sets it to
// now when it is old, so that a cleaner deleting old files leaves the
// ledger whole and its keys recorded.
func TestLedgerKeptFresh(t *testing.T) {
	g := newHostileRig(t)
	run(t, g.idem("--key", "job:fresh-ledger", "--", "echo", "once")).expect(0)
	old := time.Now().Add(-72 * time.Hour)
	for _, f := range []string{g.ledger, g.ledger + "-wal", g.ledger + "-shm", g.ledger + ".runlock"} {
		if err := os.Chtimes(f, old, old); err != nil {
			t.Fatal(err)
		}
	}
	run(t, g.idem("--key", "job:fresh-other", "--", "true")).expect(0)
	run(t, inherit(nil, "find", g.dir, "-name", "ledger.db*", "-mtime", "+0", "-delete")).expect(0)
	if _, err := os.Stat(g.ledger); err != nil {
		t.Fatalf("the cleaner deleted the ledger: %v", err)
	}
	if p := run(t, g.idem("--key", "job:fresh-ledger", "--", "echo", "once")).expect(0); !strings.Contains(p.stderr, "replayed") {
		t.Errorf("the recorded key did not replay: %v", p)
	}
}

// rerunWithoutLockFile deletes the run lock file while the leftover left
// still has it open, then runs job once more: it must run once the
// leftover is stopped, never beside it.
func rerunWithoutLockFile(t *testing.T, g *hostileRig, job []string, left int) {
	t.Helper()
	if err := os.Remove(g.ledger + ".runlock"); err != nil {
		t.Fatal(err)
	}
	rerunAfterLockFileWent(t, g, job, left)
}

// leftBehind starts job, waits for its leftover and SIGKILLs idem; it
// returns the leftover's pid.
func leftBehind(t *testing.T, g *hostileRig, job []string) int {
	t.Helper()
	p := start(t, g.idem(job...))
	left := waitPID(t, filepath.Join(g.dir, "pid"), 0)
	t.Cleanup(func() { syscall.Kill(left, syscall.SIGKILL) })
	p.send(syscall.SIGKILL)
	p.wait()
	return left
}

// rerunAfterLockFileWent runs job once more after the run lock file left
// its path while the leftover left still has it open: it must run once
// the leftover is stopped, never beside it.
func rerunAfterLockFileWent(t *testing.T, g *hostileRig, job []string, left int) {
	t.Helper()
	run(t, g.idem(job...)).expect(0)
	if runs := readFile(filepath.Join(g.dir, "runs")); runs != "ran\nran\n" {
		t.Errorf("the command ran beside the leftover:\n%s", runs)
	}
	if alive(left) {
		t.Errorf("the leftover %d still runs", left)
	}
}
