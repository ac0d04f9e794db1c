package e2e

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFaultSingleReadEIO: one pread64 of the ledger's files fails with EIO,
// at each of the first reads of a replay in turn. idem never calls the
// ledger corrupt for it (which would send the user to move it aside): it
// reads again and replays, or says I/O error (74).
func TestFaultSingleReadEIO(t *testing.T) {
	if testing.Short() {
		t.Skip("runs idem under strace; skipped with -short")
	}
	strace := needStrace(t)
	idem := idemBin(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.db")
	args := []string{"--ledger", path, "run", "--key", "job:read-eio", "--", "echoargs", "hi"}
	if p := run(t, clean(nil, idem, args...)); p.code != 0 {
		t.Fatalf("first run: %v", p)
	}
	single := 0
	for n := 1; n <= 10; n++ {
		var p *process
		hit := 0
		for try := 0; try < 3 && hit != 1; try++ {
			// strace counts calls per thread: when the goroutine that
			// reads moves to another of idem's threads, two threads can
			// each reach their n-th read, and then two reads fail, which
			// is not what this test is about: try again.
			p, hit = injected(t, strace, idem, fault{"pread64", "error=EIO", fmt.Sprint(n), ledgerFiles(path, "", "-wal")}, args...)
		}
		if hit != 1 {
			continue
		}
		single++
		switch {
		case strings.Contains(p.stderr, "corrupt"):
			t.Errorf("read %d failed once (injected %d): idem called the ledger corrupt: %v", n, hit, p)
		case p.code == 0 && strings.Contains(p.stderr, "idem: replayed job:read-eio"):
		case p.code == 74 && strings.Contains(p.stderr, "I/O error"):
		default:
			t.Errorf("read %d failed once: %v, want a replay or an I/O error (74)", n, p)
		}
	}
	if single < 5 {
		t.Fatalf("only %d of 10 runs had exactly one read fail: the test saw too little", single)
	}
}

// TestFaultLockRefused: the file system refuses locks (fcntl fails with
// ENOLCK, as on an NFS mount without a lock manager) on the ledger, its
// -shm or its run lock: idem says the locks were refused and to keep the
// ledger on a local file system (74), never a bare SQLite code, and not
// that another process holds the ledger (SQLite takes ENOLCK for busy and
// waits out its timeout). Nothing runs. strace -P refuses every fcntl on
// one file, as the mount would: a count across the process would land on
// another thread's call each run.
func TestFaultLockRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("runs idem under strace; skipped with -short")
	}
	strace := needStrace(t)
	idem := idemBin(t)
	for _, name := range []string{"ledger.db", "ledger.db-shm", "ledger.db.runlock"} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path, marks := filepath.Join(dir, "ledger.db"), filepath.Join(dir, "marks")
			if p := run(t, clean(nil, idem, "--ledger", path, "run", "--key", "job:first", "--", "true")); p.code != 0 {
				t.Fatalf("first run: %v", p)
			}
			p, hit := injected(t, strace, idem, fault{"fcntl", "error=ENOLCK", "1+", []string{filepath.Join(dir, name)}},
				"--ledger", path, "run", "--key", "job:lock-refused", "--", "appendto", marks, "ran")
			if hit == 0 {
				t.Fatalf("no fcntl on %s was refused: the test tests nothing: %v", name, p)
			}
			if p.code != 74 || !strings.Contains(p.stderr, "\nidem: hint: keep the ledger on a local file system") ||
				strings.Contains(p.stderr, "SQLite code 5") || strings.Contains(p.stderr, "locked by another process") {
				t.Errorf("locks on %s refused: %v, want 74 and what refused locks mean", name, p)
			}
			if _, err := os.Stat(marks); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("the command ran although the ledger could not be locked (%v)", err)
			}
		})
	}
}
