package e2e

import (
	"fmt"
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
		p, hit := injected(t, strace, idem, fault{"pread64", "error=EIO", fmt.Sprint(n), ledgerFiles(path, "", "-wal")}, args...)
		if hit != 1 {
			// strace counts calls per thread: two of idem's threads can
			// each reach their n-th read, and then two reads fail, which
			// is not what this test is about.
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

// TestFaultLockRefused: the file system refuses a lock (fcntl fails with
// ENOLCK, as on an NFS mount without a lock manager): idem says a lock
// failed and what that means, never a bare SQLite code.
func TestFaultLockRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("runs idem under strace; skipped with -short")
	}
	strace := needStrace(t)
	idem := idemBin(t)
	path := filepath.Join(t.TempDir(), "ledger.db")
	args := []string{"--ledger", path, "run", "--key", "job:lock-refused", "--", "echoargs", "hi"}
	if p := run(t, clean(nil, idem, args...)); p.code != 0 {
		t.Fatalf("first run: %v", p)
	}
	failed := 0
	// The first fcntl calls are the Go runtime's, on the standard descriptors.
	for n := 4; n <= 12; n++ {
		p, _ := injected(t, strace, idem, fault{"fcntl", "error=ENOLCK", fmt.Sprint(n), nil}, args...)
		if p.code == 0 {
			continue
		}
		failed++
		if p.code != 74 || !strings.Contains(p.stderr, "idem: hint: keep the ledger on a local file system") {
			t.Errorf("fcntl %d refused: %v, want 74 and what a refused lock means", n, p)
		}
	}
	if failed == 0 {
		t.Fatal("no refused lock made a run fail: the test tests nothing")
	}
}
