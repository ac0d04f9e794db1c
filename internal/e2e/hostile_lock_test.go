package e2e

// The run lock file is bound to its ledger: deleted while a run was in
// progress it is refused, not recreated, and its times are kept fresh so
// that an age-based cleaner leaves it alone.

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRunLockDeleted: a run's command leaves a process that cleared its
// environment but keeps fd 3; idem is SIGKILLed and the run lock file
// deleted. The next run takes the key over, and refuses to run (75)
// rather than create a new lock file that the leftover does not hold.
func TestRunLockDeleted(t *testing.T) {
	g := newHostileRig(t)
	job := []string{"--key", "job:lockgone", "--", "sh", "-c",
		`echo ran >> runs; env -i sh -c 'exec sleep 30' & echo $! > pid; exec sleep 30`}
	p := start(t, g.idem(job...))
	left := waitPID(t, filepath.Join(g.dir, "pid"), 0)
	t.Cleanup(func() { syscall.Kill(left, syscall.SIGKILL) })
	p.send(syscall.SIGKILL)
	p.wait()
	lock := g.ledger + ".runlock"
	if err := os.Remove(lock); err != nil {
		t.Fatal(err)
	}
	q := run(t, g.idem(job...)).expect(75)
	if !strings.Contains(q.stderr, "deleted or replaced") || !strings.Contains(q.stderr, "idem: hint:") {
		t.Errorf("no reason or hint:\n%s", q)
	}
	if runs := readFile(filepath.Join(g.dir, "runs")); runs != "ran\n" {
		t.Errorf("the command ran beside the leftover:\n%s", runs)
	}
	if _, err := os.Lstat(lock); err == nil {
		t.Errorf("the run lock was recreated")
	}
	if !alive(left) {
		t.Fatalf("the leftover is gone: the test proves nothing")
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
