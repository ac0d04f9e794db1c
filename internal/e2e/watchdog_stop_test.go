package e2e

// The stop-and-release path: idem paused (SIGSTOP) for longer than its
// lease, during a backoff and while its command runs, and a key purged
// while idem was paused. A lease that lapsed with no I/O error is 75, said
// as such, and the key is given back as retryable; a key no longer ours is
// 75 too; never 70, never the libraries' words.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/ledger"
)

// noLibraryWords fails the test when idem's stderr carries what only a
// library says, or calls itself buggy.
func noLibraryWords(t *testing.T, p *process) {
	t.Helper()
	for _, s := range []string{"context deadline exceeded", "context canceled", "sql: ", "this is a bug",
		"check the ledger's disk and permissions"} {
		if strings.Contains(p.stderr, s) {
			t.Errorf("stderr says %q: %v", s, p)
		}
	}
}

// pauseFor stops p (SIGSTOP) for d, then resumes it.
func pauseFor(p *process, d time.Duration) {
	p.send(syscall.SIGSTOP)
	time.Sleep(d)
	p.send(syscall.SIGCONT)
}

// TestPausedDuringBackoff: idem is paused for longer than its 2s lease
// while it backs off after a transient failure. It exits 75 saying it was
// paused, nothing else ran, and the key is retryable with the one attempt
// counted.
func TestPausedDuringBackoff(t *testing.T) {
	timed(t)
	for i := range 3 {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			g := newLeaseRig(t)
			key := "paused:backoff:" + strconv.Itoa(i)
			marks := g.path("marks")
			p := g.start("run", "--key", key, "--lease", "2s", "--max-attempts", "3", "--initial-delay", "6s",
				"--", "sh", "-c", `echo x >> "$0"; exit 75`, marks)
			l := g.openLedger()
			for range 1000 {
				if h, err := l.History(context.Background(), key); err == nil && len(h) == 1 && !h[0].Ended.IsZero() {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			// Into the backoff by a varying amount: the pause ends before,
			// at or after a renewal was due.
			time.Sleep(time.Duration(i) * 300 * time.Millisecond)
			pauseFor(p, 3*time.Second)
			p.wait().expect(75)
			if !strings.Contains(p.stderr, "idem was paused") || !strings.Contains(p.stderr, "given back as retryable") {
				t.Errorf("stderr does not say idem was paused and the key given back: %v", p)
			}
			noLibraryWords(t, p)
			rec, _ := g.record(key)
			if rec.Status != ledger.StatusRetryable || rec.Attempts != 1 {
				t.Errorf("record %s, %d attempts; want retryable, 1", rec.Status, rec.Attempts)
			}
			if got := pgLines(t, marks); len(got) != 1 {
				t.Errorf("the command ran %d times, want once", len(got))
			}
		})
	}
}

// TestPausedDuringRun: idem is paused for longer than its 2s lease while
// its command runs (the command does not pause with it). On resuming, idem
// stops the command, renews no more, gives the key back as retryable (the
// stopped attempt not counted) and exits 75 saying it was paused.
func TestPausedDuringRun(t *testing.T) {
	timed(t)
	g := newLeaseRig(t)
	const key = "paused:run:1"
	ready := g.path("ready")
	p := g.start("run", "--key", key, "--lease", "2s", "--", "sleeper", "60s", ready)
	child := waitPid(t, ready)
	pauseFor(p, 3*time.Second)
	p.wait().expect(75)
	if !strings.Contains(p.stderr, "idem was paused") || !strings.Contains(p.stderr, "the command was stopped") ||
		!strings.Contains(p.stderr, "given back as retryable") {
		t.Errorf("stderr does not say idem was paused, the command stopped, the key given back: %v", p)
	}
	noLibraryWords(t, p)
	if alive(child) {
		t.Errorf("the command (pid %d) still runs", child)
	}
	rec, _ := g.record(key)
	if rec.Status != ledger.StatusRetryable || rec.Attempts != 0 {
		t.Errorf("record %s, %d attempts; want retryable, 0", rec.Status, rec.Attempts)
	}
}

// TestPausedAndPurged: the key is purged (--force) while idem is paused
// past its lease: on resuming, idem finds the key no longer its own, kills
// its command and exits 75 (lost the lease), writing nothing.
func TestPausedAndPurged(t *testing.T) {
	timed(t)
	g := newLeaseRig(t)
	const key = "paused:purged:1"
	ready := g.path("ready")
	p := g.start("run", "--key", key, "--lease", "2s", "--", "sleeper", "60s", ready)
	child := waitPid(t, ready)
	p.send(syscall.SIGSTOP)
	time.Sleep(2500 * time.Millisecond)
	g.run("purge", "--force", key).expect(0)
	p.send(syscall.SIGCONT)
	p.wait().expect(75)
	if !strings.Contains(p.stderr, "lost the lease") {
		t.Errorf("stderr does not say the lease was lost: %v", p)
	}
	noLibraryWords(t, p)
	if alive(child) {
		t.Errorf("the command (pid %d) still runs", child)
	}
	if _, err := g.openLedger().Get(context.Background(), key); err != ledger.ErrNotFound {
		t.Errorf("the purged key was written again: %v", err)
	}
}

// waitPid waits for sleeper's pid file and returns the pid.
func waitPid(t *testing.T, path string) int {
	t.Helper()
	for range 2000 {
		if b, err := os.ReadFile(path); err == nil {
			if pid, _ := strconv.Atoi(string(b)); pid > 0 {
				return pid
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("%s never got a pid", filepath.Base(path))
	return 0
}

// alive reports whether pid runs (a zombie does not).
func alive(pid int) bool {
	_, state, err := statOf(pid)
	return err == nil && state != 'Z' && state != 'X'
}

// TestInheritedDescriptorsStayWithIdem: a descriptor idem inherits from its
// parent (bash's exec 7<) does not reach the command: beyond 0-2 it has
// fd 3, the run lock, and nothing else (nothing at all where there is no
// run lock).
func TestInheritedDescriptorsStayWithIdem(t *testing.T) {
	g := newLeaseRig(t)
	list := `for n in 3 4 5 6 7 8 9 10 11 12; do [ -e /proc/$$/fd/$n ] && echo "$n $(readlink /proc/$$/fd/$n)"; done; true`
	p := start(t, g.command(needTool(t, "bash"), "-c", `exec 7</etc/hostname 8>"$0.extra"; exec idem run --key fds:inherited -- sh -c "$1"`,
		g.path("x"), list)).wait().expect(0)
	got := strings.TrimSpace(p.stdout)
	if !procsBuiltIn {
		// The portable fallback has no run lock: nothing beyond 0-2.
		if got != "" {
			t.Errorf("the command's descriptors beyond 0-2: %q; want none", got)
		}
		return
	}
	lines := strings.Split(got, "\n")
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "3 ") || !strings.HasSuffix(lines[0], ".runlock") {
		t.Errorf("the command's descriptors beyond 0-2: %q; want only 3, the run lock", lines)
	}
}

// TestPausedBeforeStart: idem is paused for longer than its 2s lease
// after it reserved a new key and before its command starts (strace stops
// it at its open of the run lock, which comes between the two), on a new
// ledger (whose run lock idem then binds) and on one in use. On resuming
// it starts nothing, gives the key back as it was, the attempt that never
// started not counted, and exits 75 saying it was paused; the key's one
// attempt (--max-attempts 1) is then the next run's, which runs the
// command.
func TestPausedBeforeStart(t *testing.T) {
	needProcs(t) // the pause comes at the run lock, which the portable fallback has none of
	timed(t)
	strace := needStrace(t)
	for _, inUse := range []bool{false, true} {
		t.Run(fmt.Sprintf("in use %v", inUse), func(t *testing.T) {
			g := newLeaseRig(t)
			if inUse {
				g.run("run", "--key", "paused:before-start:other", "--", "true").expect(0)
			}
			key := "paused:before-start:1"
			marks := g.path("marks")
			job := []string{"run", "--key", key, "--lease", "2s", "--kill-grace", "300ms", "--max-attempts", "1",
				"--", "sh", "-c", `echo x >> "$0"`, marks}
			c := g.command(append([]string{"idem"}, job...)...)
			c.wrap = []string{strace, "-f", "-qq", "-o", g.path("trace"), "-P", g.ledger + ".runlock",
				"-e", "trace=openat", "-e", "inject=openat:signal=SIGSTOP:when=1"}
			p := start(t, c)
			t.Cleanup(func() {
				if t.Failed() {
					b, _ := os.ReadFile(g.path("trace"))
					t.Logf("strace: %s", b)
				}
			})
			idem := stoppedChild(t, p, g.path("trace"))
			time.Sleep(3 * time.Second)
			if err := syscall.Kill(idem, syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			p.wait().expect(75)
			if !strings.Contains(p.stderr, "idem was paused") || !strings.Contains(p.stderr, "the command did not start") ||
				!strings.Contains(p.stderr, "the key was given back as it was, this attempt not counted") {
				t.Errorf("stderr does not say idem was paused and the key given back as it was: %v", p)
			}
			noLibraryWords(t, p)
			if _, err := g.openLedger().Get(context.Background(), key); !errors.Is(err, ledger.ErrNotFound) {
				t.Errorf("the key's record after the pause: %v; want none", err)
			}
			if got := pgLines(t, marks); len(got) != 0 {
				t.Fatalf("the command ran %d times during the pause, want never", len(got))
			}
			g.run(job...).expect(0)
			if got := pgLines(t, marks); len(got) != 1 {
				t.Errorf("the command ran %d times, want once", len(got))
			}
		})
	}
}

// stoppedChild waits until strace (p, writing trace) has stopped its
// child with the SIGSTOP it injects, and returns the child's pid. (A
// child in a ptrace stop of a moment, at a system call or another signal,
// shows the same state: only strace's line tells the SIGSTOP.)
func stoppedChild(t *testing.T, p *process, trace string) int {
	t.Helper()
	children := func() []int {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", p.pid(), p.pid()))
		var pids []int
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
		return pids
	}
	for range 2000 {
		if b, _ := os.ReadFile(trace); !strings.Contains(string(b), "stopped by SIGSTOP") {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		for _, pid := range children() {
			st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			if err == nil && (strings.Contains(string(st), ") t ") || strings.Contains(string(st), ") T ")) {
				return pid
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	pids := children()
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	t.Fatalf("no child of strace (%v) stopped: %v", pids, p.wait())
	return 0
}
