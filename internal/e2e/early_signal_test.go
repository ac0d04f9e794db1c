package e2e

import (
	"os"
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
