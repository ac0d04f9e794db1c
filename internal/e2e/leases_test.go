package e2e

// Leases and signals: idem killed, stopped past its lease, interrupted or
// raced by 31 others on one key, and what the next run then does (takes
// the key over, stops the old process group, is fenced off, replays).
// Real idem processes (this test binary, as testscript.Main registers it),
// real children, real signals. Each test checks what happened afterwards in
// /proc and in the ledger; none asserts on time.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/idemhq/idem/internal/ledger"
	"github.com/idemhq/idem/internal/ledger/sqlite"
)

// leaseRig starts idem processes against one ledger in a temporary
// directory, with the test's environment.
type leaseRig struct {
	t      *testing.T
	dir    string
	ledger string
	env    []string
}

func newLeaseRig(t *testing.T) *leaseRig {
	t.Helper()
	dir := t.TempDir()
	l := filepath.Join(mkdir(t, filepath.Join(dir, "state"), 0o700), "ledger.db")
	env := append(os.Environ(), "IDEM_LEDGER="+l, "NO_COLOR=1")
	return &leaseRig{t: t, dir: dir, ledger: l, env: env}
}

func (g *leaseRig) path(name string) string { return filepath.Join(g.dir, name) }

// command is argv in the rig's directory and environment.
func (g *leaseRig) command(argv ...string) command {
	return command{argv: argv, dir: g.dir, env: g.env}
}

// start starts `idem ARGS...`. (A test that needs another program first,
// such as `gate FIFO idem ARGS...`, starts g.command(argv...) itself.)
func (g *leaseRig) start(args ...string) *process {
	g.t.Helper()
	return start(g.t, g.command(append([]string{"idem"}, args...)...))
}

// run runs `idem ARGS...` to its end.
func (g *leaseRig) run(args ...string) *process {
	g.t.Helper()
	return g.start(args...).wait()
}

// waitMarks waits until the marks file of crashjob has n lines and returns
// the pids and start times recorded there.
func (g *leaseRig) waitMarks(path string, n int) []procMark {
	g.t.Helper()
	for range 1000 {
		if m := readMarks(path); len(m) >= n {
			return m
		}
		time.Sleep(5 * time.Millisecond)
	}
	g.t.Fatalf("%s never got %d marks", path, n)
	return nil
}

func (g *leaseRig) openLedger() *sqlite.Ledger {
	g.t.Helper()
	l, err := sqlite.Open(context.Background(), g.ledger)
	if err != nil {
		g.t.Fatal(err)
	}
	g.t.Cleanup(func() { l.Close() })
	return l
}

func (g *leaseRig) record(key string) (*ledger.Record, []ledger.Attempt) {
	g.t.Helper()
	l := g.openLedger()
	rec, err := l.Get(context.Background(), key)
	if err != nil {
		g.t.Fatalf("get %s: %v", key, err)
	}
	hist, err := l.History(context.Background(), key)
	if err != nil {
		g.t.Fatalf("history %s: %v", key, err)
	}
	return rec, hist
}

// classes renders a history as "n:class:code ...".
func classes(hist []ledger.Attempt) string {
	var b strings.Builder
	for i, a := range hist {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%d:%s:%d", a.N, a.Class, a.ExitCode)
	}
	return b.String()
}

// TestLeaseConcurrentRuns starts 32 `idem run` of one key in the same
// instant (on a ledger none of them has created yet): exactly one executes.
// Without --wait the others exit 75; with --wait they all exit 0 and print
// the output. No process may show a raw SQLITE_BUSY.
func TestLeaseConcurrentRuns(t *testing.T) {
	busy(t)
	const n = 32
	for _, tc := range []struct {
		name string
		wait bool
		argv []string // after "--"; OUT is replaced by the output file
	}{
		{"instant", false, []string{"appendto", "OUT", "ran"}},
		{"instant-wait", true, []string{"appendto", "OUT", "ran"}},
		{"slow", false, []string{"slowappend", "OUT", "ran", "300ms"}},
		{"slow-wait", true, []string{"slowappend", "OUT", "ran", "300ms"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newLeaseRig(t)
			out := g.path("out")
			fifo := g.path("gate")
			if err := syscall.Mkfifo(fifo, 0o600); err != nil {
				t.Fatal(err)
			}
			args := []string{"gate", fifo, "idem", "run", "--key", "concurrent:32"}
			if tc.wait {
				args = append(args, "--wait")
			}
			args = append(args, "--")
			for _, a := range tc.argv {
				if a == "OUT" {
					a = out
				}
				args = append(args, a)
			}
			procs := make([]*process, n)
			for i := range procs {
				procs[i] = start(t, g.command(args...))
			}
			time.Sleep(200 * time.Millisecond) // let every gate block on the FIFO
			began := time.Now()
			w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range procs {
				p.wait()
			}
			wall := time.Since(began)
			w.Close()

			ran, replayed, busy := 0, 0, 0
			for _, p := range procs {
				if rawStoreError(p.stderr) {
					t.Errorf("raw SQLite error: %v", p)
				}
				switch {
				case p.code == 0 && p.stdout == "ran\n":
					if strings.Contains(p.stderr, "idem: replayed concurrent:32: succeeded") {
						replayed++
					} else {
						ran++
					}
				case p.code == 75 && !tc.wait && strings.HasPrefix(p.stderr, `idem: error: key "concurrent:32" is in progress on `):
					busy++
				default:
					t.Errorf("unexpected end: %v", p)
				}
			}
			b, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Count(string(b), "\n"); got != 1 || ran != 1 {
				t.Errorf("the command ran %d times (%d lines in the file), want exactly once", ran, got)
			}
			t.Logf("%d processes, wall %v: 1 ran, %d replayed, %d busy (75)", n, wall.Round(time.Millisecond), replayed, busy)
		})
	}
}

// TestLeaseTakeoverAfterSIGKILL kills idem while its child (and the child's
// grandchild) runs. The next run on this host takes over at once, because
// the owner is dead (its 30s lease has not expired); it stops the old
// group before it starts anything (the new execution checks that no old
// process still runs), and the history shows the abandoned attempt.
func TestLeaseTakeoverAfterSIGKILL(t *testing.T) {
	timed(t)
	needProcs(t)
	g := newLeaseRig(t)
	marks := g.path("marks")
	args := []string{"run", "--key", "crash:sigkill", "--kill-grace", "300ms", "--", "crashjob", marks}
	a := g.start(args...)
	old := g.waitMarks(marks, 2)
	a.send(syscall.SIGKILL)
	a.wait()
	if a.signal != syscall.SIGKILL {
		t.Fatalf("idem was not killed: %v", a)
	}

	b := g.run(args...).expect(0)
	if !strings.HasPrefix(b.stdout, "done ") {
		t.Fatalf("the new run did not execute cleanly: %v", b)
	}
	for _, m := range old {
		if m.running() {
			t.Errorf("process %d of the abandoned attempt still runs", m.pid)
		}
	}
	rec, hist := g.record("crash:sigkill")
	if rec.Status != ledger.StatusSucceeded || rec.Attempts != 2 {
		t.Errorf("record: %s after %d attempts, want succeeded after 2", rec.Status, rec.Attempts)
	}
	if got, want := classes(hist), "1:abandoned:75 2:success:0"; got != want {
		t.Errorf("history %q, want %q", got, want)
	}
}

// TestLeaseFencedAfterSIGSTOP stops idem past its lease; a second run takes
// the key over and succeeds. The taker sees the stopped owner on this host
// and stops it (SIGTERM and SIGCONT, SIGKILL after the grace) before it runs
// anything: the first owner ends with its write fenced off (exit 75) or
// killed, and the recorded result stays the second's.
func TestLeaseFencedAfterSIGSTOP(t *testing.T) {
	timed(t)
	needProcs(t)
	g := newLeaseRig(t)
	marks := g.path("marks")
	args := []string{"run", "--key", "crash:sigstop", "--lease", "1s", "--kill-grace", "300ms", "--", "crashjob", marks}
	a := g.start(args...)
	old := g.waitMarks(marks, 2)
	a.send(syscall.SIGSTOP)
	time.Sleep(1500 * time.Millisecond) // past the 1s lease

	b := g.run(args...).expect(0)
	if !strings.HasPrefix(b.stdout, "done ") {
		t.Fatalf("the second run did not execute cleanly: %v", b)
	}
	for _, m := range old[:2] {
		if m.running() {
			t.Errorf("process %d of the stopped owner's run still runs", m.pid)
		}
	}
	a.wait()
	switch {
	case a.signal == syscall.SIGKILL:
	case a.code == 75 && strings.HasPrefix(a.stderr, `idem: error: lost the lease on key "crash:sigstop": another run took it over, or it was purged with --force; `):
	default:
		t.Errorf("the first run neither was killed nor says it lost its lease: %v", a)
	}

	c := g.run(args...).expect(0)
	if c.stdout != b.stdout || !strings.Contains(c.stderr, "idem: replayed crash:sigstop: succeeded") {
		t.Errorf("replay %v, want the second run's output %q", c, b.stdout)
	}
	_, hist := g.record("crash:sigstop")
	if got, want := classes(hist), "1:abandoned:75 2:success:0"; got != want {
		t.Errorf("history %q, want %q", got, want)
	}
}

// TestLeaseSIGTERMStopsGroup sends SIGTERM to idem whose child has a
// grandchild (which ignores SIGTERM, so the grace and SIGKILL matter): both
// are gone when idem exits 143, the key is retryable, and the next run
// executes.
func TestLeaseSIGTERMStopsGroup(t *testing.T) {
	timed(t)
	g := newLeaseRig(t)
	marks := g.path("marks")
	args := []string{"run", "--key", "crash:sigterm", "--kill-grace", "300ms", "--", "crashjob", marks}
	a := g.start(args...)
	old := g.waitMarks(marks, 2)
	a.send(syscall.SIGTERM)
	a.wait().expect(143)
	for _, m := range old {
		if m.running() {
			t.Errorf("process %d still runs after idem exited", m.pid)
		}
	}
	if !strings.Contains(a.stderr, "idem: crash:sigterm: interrupted by SIGTERM; recorded as retryable after attempt 1") {
		t.Errorf("stderr does not report the interruption: %v", a)
	}
	rec, _ := g.record("crash:sigterm")
	if rec.Status != ledger.StatusRetryable {
		t.Fatalf("record is %s, want retryable", rec.Status)
	}

	b := g.run(args...).expect(0)
	if !strings.HasPrefix(b.stdout, "done ") {
		t.Fatalf("the next run did not execute: %v", b)
	}
	_, hist := g.record("crash:sigterm")
	if got, want := classes(hist), "1:interrupted:143 2:success:0"; got != want {
		t.Errorf("history %q, want %q", got, want)
	}
}

// TestLeaseSignalLastAttemptIsFinal: an interrupted attempt that was the
// last of the budget makes the record final.
func TestLeaseSignalLastAttemptIsFinal(t *testing.T) {
	g := newLeaseRig(t)
	ready := g.path("ready")
	a := g.start("run", "--key", "crash:last", "--max-attempts", "1", "--", "trapexit", "9", ready)
	waitForFile(t, ready)
	a.send(syscall.SIGINT)
	a.wait().expect(130)
	rec, hist := g.record("crash:last")
	if rec.Status != ledger.StatusFailed || classes(hist) != "1:interrupted:9" {
		t.Errorf("record %s, history %q; want failed, 1:interrupted:9", rec.Status, classes(hist))
	}
}

// TestLeaseSuccessDuringGrace: a child that exits 0 after idem forwarded
// SIGTERM did its work: recorded as success.
func TestLeaseSuccessDuringGrace(t *testing.T) {
	g := newLeaseRig(t)
	ready := g.path("ready")
	a := g.start("run", "--key", "crash:grace", "--", "trapexit", "0", ready)
	waitForFile(t, ready)
	a.send(syscall.SIGTERM)
	a.wait().expect(0)
	if a.stdout != "caught terminated\n" {
		t.Errorf("stdout %q", a.stdout)
	}
	rec, _ := g.record("crash:grace")
	if rec.Status != ledger.StatusSucceeded {
		t.Errorf("record is %s, want succeeded", rec.Status)
	}
}

// waitCaught waits until process pid catches sig (idem has set up its
// signal handling), so that a test's signal is not the default action.
func waitCaught(t *testing.T, pid int, sig syscall.Signal) {
	t.Helper()
	for range 2000 {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
		for _, line := range strings.Split(string(b), "\n") {
			if hex, ok := strings.CutPrefix(line, "SigCgt:"); ok {
				mask, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
				if err == nil && mask&(1<<(uint(sig)-1)) != 0 {
					return
				}
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("process %d never caught %v", pid, sig)
}

func waitForFile(t *testing.T, path string) {
	t.Helper()
	for range 2000 {
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("%s did not appear", path)
}

// TestLeaseGrandchildHoldsStdout: a command whose background grandchild
// keeps stdout open does not hang idem: idem records the child's own exit
// while the grandchild still runs.
func TestLeaseGrandchildHoldsStdout(t *testing.T) {
	quiet(t)
	g := newLeaseRig(t)
	pidfile := g.path("grandchild.pid")
	a := g.run("run", "--key", "crash:holder", "--", "bgholder", pidfile).expect(0)
	b, err := os.ReadFile(pidfile)
	if err != nil {
		t.Fatal(err)
	}
	pid := atoi(string(b))
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	if _, state, err := statOf(pid); err != nil || state == 'Z' {
		t.Fatalf("the grandchild is gone already (%v): idem cannot be shown not to wait for it", err)
	}
	if a.stdout != "parent done\n" {
		t.Errorf("stdout %q", a.stdout)
	}
	rec, hist := g.record("crash:holder")
	if rec.Status != ledger.StatusSucceeded || string(rec.Stdout) != "parent done\n" || classes(hist) != "1:success:0" {
		t.Errorf("record %s %q, history %q", rec.Status, rec.Stdout, classes(hist))
	}
}

// TestLeaseRetryAfter: a delay written to IDEM_RETRY_AFTER is the next
// backoff (the history keeps each delay), capped by --max-delay; bad content
// is ignored with a warning.
func TestLeaseRetryAfter(t *testing.T) {
	quiet(t)
	for _, tc := range []struct {
		name, content string
		want          time.Duration
		warn          bool
	}{
		{"duration", "300ms\n", 300 * time.Millisecond, false},
		{"seconds", " 1 ", time.Second, false},
		{"fraction", "0.25", 250 * time.Millisecond, false},
		{"capped", "1h", 1500 * time.Millisecond, false},
		{"garbage", "soon", 20 * time.Millisecond, true},
		{"negative", "-5s", 20 * time.Millisecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newLeaseRig(t)
			key := "retry-after:" + tc.name
			p := g.run("run", "--key", key, "--initial-delay", "20ms", "--jitter", "0", "--max-delay", "1500ms",
				"--", "retryafter", g.path("counter"), tc.content).expect(0)
			if p.stdout != "call 1\ncall 2\n" {
				t.Errorf("stdout %q", p.stdout)
			}
			warned := strings.Contains(p.stderr, "idem: warning: attempt 1 wrote ") &&
				strings.Contains(p.stderr, " to IDEM_RETRY_AFTER: not a duration")
			if warned != tc.warn {
				t.Errorf("warning %v, want %v: %v", warned, tc.warn, p)
			}
			_, hist := g.record(key)
			if len(hist) != 2 || hist[0].Delay != tc.want {
				t.Fatalf("history %+v: want the first delay %v", hist, tc.want)
			}
		})
	}
}

// TestLeaseWaitInterrupted: Ctrl-C while waiting exits 130 and leaves the
// record as it was (no replay counted, the holder undisturbed).
func TestLeaseWaitInterrupted(t *testing.T) {
	timed(t)
	g := newLeaseRig(t)
	marks := g.path("marks")
	args := []string{"run", "--key", "wait:intr", "--kill-grace", "300ms", "--", "crashjob", marks}
	holder := g.start(args...)
	held := g.waitMarks(marks, 2)
	before, _ := g.record("wait:intr")

	w := g.start(append([]string{"run", "--wait"}, args[1:]...)...)
	waitCaught(t, w.pid(), syscall.SIGINT)
	time.Sleep(300 * time.Millisecond) // let it poll a few times
	w.send(syscall.SIGINT)
	w.wait().expect(130)
	// One line says whom it waits for (stderr is not a terminal), then the error.
	wantErr := regexp.MustCompile(`^idem: wait:intr: in progress on \S+ \(pid \d+, attempt 1/3\); waiting for it \(--wait\)\n` +
		`idem: error: interrupted by SIGINT while waiting for key "wait:intr"; nothing ran and the record was not touched\n$`)
	if w.stdout != "" || !wantErr.MatchString(w.stderr) {
		t.Errorf("waiter: %v", w)
	}
	after, hist := g.record("wait:intr")
	if after.Status != ledger.StatusInProgress || after.Token != before.Token || after.Replays != 0 ||
		after.Attempts != 1 || classes(hist) != "1::0" {
		t.Errorf("record changed: %+v, history %q", after, classes(hist))
	}
	for _, m := range held {
		if !m.running() {
			t.Errorf("the holder's process %d was disturbed", m.pid)
		}
	}
	holder.send(syscall.SIGTERM)
	holder.wait().expect(143)
}

// TestLeaseWaitTakesOverDeadHolder: a waiter whose holder is SIGKILLed takes
// the key over (the owner is dead), stops the holder's group and runs.
func TestLeaseWaitTakesOverDeadHolder(t *testing.T) {
	timed(t)
	needProcs(t)
	g := newLeaseRig(t)
	marks := g.path("marks")
	args := []string{"run", "--key", "wait:dead", "--kill-grace", "300ms", "--", "crashjob", marks}
	holder := g.start(args...)
	old := g.waitMarks(marks, 2)
	w := g.start(append([]string{"run", "--wait"}, args[1:]...)...)
	time.Sleep(200 * time.Millisecond)
	holder.send(syscall.SIGKILL)
	holder.wait()
	w.wait().expect(0)
	if !strings.HasPrefix(w.stdout, "done ") {
		t.Fatalf("the waiter did not run the command cleanly: %v", w)
	}
	for _, m := range old {
		if m.running() {
			t.Errorf("process %d of the dead holder still runs", m.pid)
		}
	}
	_, hist := g.record("wait:dead")
	if got, want := classes(hist), "1:abandoned:75 2:success:0"; got != want {
		t.Errorf("history %q, want %q", got, want)
	}
}

// startOnTerminal starts `idem ARGS...` as a session leader whose
// controlling terminal (stdin, stdout, stderr) is slave: the terminal's
// foreground group, as in an interactive shell. It returns the process
// and a function that returns everything written to the terminal so far.
func (g *leaseRig) startOnTerminal(master, slave *os.File, args ...string) (*process, func() string) {
	g.t.Helper()
	var mu sync.Mutex
	var screen bytes.Buffer
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			mu.Lock()
			screen.Write(buf[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	c := g.command(append([]string{"idem"}, args...)...)
	c.tty = slave
	p := start(g.t, c)
	return p, func() string {
		mu.Lock()
		defer mu.Unlock()
		return screen.String()
	}
}

// TestLeaseTerminalForeground: when stdin is a terminal, each attempt's
// group becomes the terminal's foreground group, and idem takes the
// terminal back between attempts.
func TestLeaseTerminalForeground(t *testing.T) {
	timed(t)
	g := newLeaseRig(t)
	master, slave := needPTY(t)
	counter := g.path("counter")
	p, screen := g.startOnTerminal(master, slave, "run", "--key", "tty:foreground", "--initial-delay", "1s", "--jitter", "0",
		"--", "fgcheck", counter)
	// During the backoff after attempt 1, idem's own group (it leads its
	// session) must hold the terminal again.
	took := false
	for range 400 {
		if b, _ := os.ReadFile(counter); string(b) == "1" {
			pgrp, err := unix.IoctlGetInt(int(master.Fd()), unix.TIOCGPGRP)
			if err == nil && pgrp == p.pid() {
				took = true
				break
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	p.wait()
	if p.exitStatus != (exitStatus{}) {
		t.Fatalf("idem: %v; terminal: %q", p.exitStatus, screen())
	}
	if !took {
		t.Error("idem did not take the terminal back after attempt 1")
	}
	// The terminal's reader may still be draining what the last attempt
	// wrote when idem exits.
	out := screen()
	for i := 0; i < 200 && !strings.Contains(out, "call 2 foreground"); i++ {
		time.Sleep(10 * time.Millisecond)
		out = screen()
	}
	if !strings.Contains(out, "call 1 foreground") || !strings.Contains(out, "call 2 foreground") {
		t.Errorf("the attempts did not hold the terminal: %q", out)
	}
}

// TestLeaseTerminalCtrlC: Ctrl-C on the terminal reaches the child's
// foreground group; idem records the attempt as interrupted (retryable)
// and exits 130.
func TestLeaseTerminalCtrlC(t *testing.T) {
	g := newLeaseRig(t)
	master, slave := needPTY(t)
	ready := g.path("ready")
	p, screen := g.startOnTerminal(master, slave, "run", "--key", "tty:ctrlc", "--", "sleeper", "30s", ready)
	waitForFile(t, ready)
	if _, err := master.Write([]byte{3}); err != nil { // ^C
		t.Fatal(err)
	}
	p.wait()
	if p.exitStatus != (exitStatus{code: 130}) {
		t.Fatalf("idem: %v, want exit 130; terminal: %q", p.exitStatus, screen())
	}
	rec, hist := g.record("tty:ctrlc")
	if rec.Status != ledger.StatusRetryable || classes(hist) != "1:interrupted:130" {
		t.Errorf("record %s, history %q", rec.Status, classes(hist))
	}
}
