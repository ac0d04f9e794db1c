package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// TestEarlySIGTERMLeavesNothing: SIGTERM sent to idem the moment it starts
// (before its handlers exist, as the README says) ends it, but never with a
// reservation left behind or the command run: the next run runs it.
func TestEarlySIGTERMLeavesNothing(t *testing.T) {
	g := newLeaseRig(t)
	marks := g.path("ran")
	for range 10 {
		p := g.start("run", "--key", "early:sigterm", "--", "appendto", marks, "x")
		p.send(syscall.SIGTERM)
		p.wait()
		if p.signal == 0 && p.code != 143 && p.code != 0 {
			t.Fatalf("early SIGTERM: %v, want killed by it, 143, or (too late to matter) 0", p)
		}
		if p.code == 0 {
			return // the run was faster than the signal: nothing to see
		}
		if p.signal == 0 {
			return // handled: the forwarding path, tested elsewhere
		}
		if b, _ := os.ReadFile(marks); len(b) != 0 {
			t.Fatalf("the command ran although idem died of the signal before its handlers: %q", b)
		}
	}
	g.run("run", "--key", "early:sigterm", "--", "appendto", marks, "x").expect(0)
	if b, _ := os.ReadFile(marks); string(b) != "x\n" {
		t.Fatalf("after early signals the next run ran %q, want once", b)
	}
}

// TestClosedStderrWhileTheLedgerOpens: idem's stderr is a pipe nobody
// reads any more (`idem run … 2>&1 | head -c1`, a reader that has gone)
// and the open has something to say: a warning (a ledger others could
// read, which idem tightens) or an error (a ledger in a missing
// directory). idem does not die of SIGPIPE, whose handler goes in while
// the ledger opens: the first runs the command and exits 0, the second
// exits 74. With one processor (GOMAXPROCS=1) the open writes before the
// handlers are in, unless its writes wait for them.
func TestClosedStderrWhileTheLedgerOpens(t *testing.T) {
	idem := idemBin(t)
	dir := t.TempDir()
	ledger := filepath.Join(dir, "ledger.db")
	marks := filepath.Join(dir, "ran")
	output(t, clean(nil, idem, "--ledger", ledger, "run", "--key", "closed:stderr:make", "--", "true"))
	closed := func(args ...string) exitStatus {
		t.Helper()
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		r.Close()
		defer w.Close()
		cmd := exec.Command(idem, args...)
		cmd.Env = append(clean(nil, idem).env, "GOMAXPROCS=1")
		cmd.Stderr = w
		err = cmd.Run()
		st, ok := exitStatusOf(err)
		if !ok {
			t.Fatal(err)
		}
		return st
	}
	const n = 10
	for i := range n {
		if err := os.Chmod(ledger, 0o644); err != nil {
			t.Fatal(err)
		}
		key := fmt.Sprintf("closed:stderr:warn:%d", i)
		if st := closed("--ledger", ledger, "run", "--key", key, "--", "appendto", marks, "x"); st != (exitStatus{}) {
			t.Errorf("run %d with a warning to a closed stderr: %v; want exit 0", i, st)
		}
	}
	if b, _ := os.ReadFile(marks); len(b) != 2*n {
		t.Errorf("the command ran %d times in %d runs", len(b)/2, n)
	}
	missing := filepath.Join(dir, "missing", "ledger.db")
	for i := range n {
		if st := closed("--ledger", missing, "run", "--key", "closed:stderr:error", "--", "true"); st != (exitStatus{code: 74}) {
			t.Errorf("run %d with an error to a closed stderr: %v; want exit 74", i, st)
		}
	}
}
