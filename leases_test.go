package main

// Crash-safety tests of issue 3: real idem processes (this test binary, as
// testscript.Main registers it), real children, real signals. Each test
// checks what happened afterwards in /proc and in the ledger; none asserts
// on time.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
	"golang.org/x/sys/unix"

	"github.com/idemhq/idem/internal/ledger"
	"github.com/idemhq/idem/internal/ledger/sqlite"
)

// leaseRig runs idem processes against one ledger in a temporary directory.
type leaseRig struct {
	t      *testing.T
	dir    string
	ledger string
	env    []string
}

func newLeaseRig(t *testing.T) *leaseRig {
	t.Helper()
	dir := t.TempDir()
	l := filepath.Join(dir, "state", "ledger.db")
	env := append(os.Environ(), "IDEM_LEDGER="+l, "NO_COLOR=1")
	return &leaseRig{t: t, dir: dir, ledger: l, env: env}
}

func (g *leaseRig) path(name string) string { return filepath.Join(g.dir, name) }

// leaseProc is one idem process started by a test.
type leaseProc struct {
	t              *testing.T
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer
	done           chan struct{}
	code           int            // exit status, -1 if killed by a signal
	signal         syscall.Signal // the signal that killed it
}

// start starts `idem ARGS...` (or, with gate set, `gate FIFO idem ARGS...`).
func (g *leaseRig) start(args ...string) *leaseProc {
	g.t.Helper()
	return g.startCmd(append([]string{"idem"}, args...))
}

func (g *leaseRig) startCmd(argv []string) *leaseProc {
	g.t.Helper()
	p := &leaseProc{t: g.t, done: make(chan struct{})}
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Env = g.env
	p.cmd.Dir = g.dir
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		g.t.Fatalf("start %q: %v", argv, err)
	}
	go func() {
		defer close(p.done)
		err := p.cmd.Wait()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			ws := ee.Sys().(syscall.WaitStatus)
			p.code = ws.ExitStatus()
			if ws.Signaled() {
				p.signal = ws.Signal()
			}
		} else if err != nil {
			p.code = -2
		}
	}()
	g.t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.cmd.Process.Signal(syscall.SIGCONT)
			p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// wait waits for the process (at most a minute: a hang is a failure).
func (p *leaseProc) wait() *leaseProc {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(time.Minute):
		p.cmd.Process.Kill()
		p.t.Fatalf("%q hung\nstderr: %s", p.cmd.Args, p.stderr.String())
	}
	return p
}

func (p *leaseProc) String() string {
	return fmt.Sprintf("%q: exit %d signal %v\nstdout: %q\nstderr: %q", p.cmd.Args, p.code, p.signal, p.stdout.String(), p.stderr.String())
}

func (p *leaseProc) send(sig syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signal %v: %v", sig, err)
	}
}

// run runs `idem ARGS...` to its end.
func (g *leaseRig) run(args ...string) *leaseProc {
	g.t.Helper()
	return g.start(args...).wait()
}

// expect fails unless p exited with code.
func (p *leaseProc) expect(code int) *leaseProc {
	p.t.Helper()
	if p.code != code || p.signal != 0 {
		p.t.Fatalf("want exit %d, got %v", code, p)
	}
	if rawStoreError(p.stderr.String()) {
		p.t.Fatalf("raw SQLite error on stderr: %v", p)
	}
	return p
}

// rawStoreError reports whether s shows a driver's busy error to the user.
func rawStoreError(s string) bool {
	l := strings.ToLower(s)
	return strings.Contains(l, "database is locked") || strings.Contains(l, "sqlite_busy") || strings.Contains(l, "goroutine ")
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

// procMark is a process crashjob recorded: its pid and start time.
type procMark struct {
	pid   int
	start uint64
}

func readMarks(path string) []procMark {
	b, _ := os.ReadFile(path)
	var out []procMark
	for _, line := range strings.Split(string(b), "\n") {
		var m procMark
		if _, err := fmt.Sscanf(line, "run %d %d", &m.pid, &m.start); err == nil {
			out = append(out, m)
		}
	}
	return out
}

// running reports whether the marked process still runs: it exists, is
// not a zombie (PID 1 here does not reap orphans), and is the same process.
func (m procMark) running() bool {
	start, state, err := statOf(m.pid)
	return err == nil && state != 'Z' && state != 'X' && start == m.start
}

// statOf reads the state (field 3) and start time (field 22) of pid.
func statOf(pid int) (start uint64, state byte, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	if i < 0 || len(f) < 20 {
		return 0, 0, fmt.Errorf("malformed stat of %d", pid)
	}
	start, err = strconv.ParseUint(f[19], 10, 64)
	return start, f[0][0], err
}

func markSelf(path string) {
	start, _, err := statOf(os.Getpid())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fmt.Fprintf(f, "run %d %d\n", os.Getpid(), start)
	f.Close()
}

// crashjob MARKS: the first call (MARKS empty) records itself in MARKS,
// starts a grandchild in its process group that ignores SIGTERM and records
// itself too, prints "hanging PID" and hangs. A later call first checks that
// no process recorded in MARKS still runs (else it prints "overlap PID" and
// exits 3: two executions overlapped), then records itself and prints
// "done PID".
func crashjob() {
	if len(os.Args) == 3 && os.Args[1] == "-grandchild" {
		signal.Ignore(syscall.SIGTERM)
		markSelf(os.Args[2])
		time.Sleep(time.Minute)
		return
	}
	marks := os.Args[1]
	prev := readMarks(marks)
	if len(prev) == 0 {
		markSelf(marks)
		g := exec.Command("crashjob", "-grandchild", marks)
		g.Stdout, g.Stderr = os.Stdout, os.Stderr
		if err := g.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		for i := 0; i < 1000 && len(readMarks(marks)) < 2; i++ {
			time.Sleep(5 * time.Millisecond)
		}
		fmt.Println("hanging", os.Getpid())
		time.Sleep(time.Minute)
		return
	}
	for _, m := range prev {
		if m.running() {
			fmt.Println("overlap", m.pid)
			os.Exit(3)
		}
	}
	markSelf(marks)
	fmt.Println("done", os.Getpid())
}

// bgholder PIDFILE starts a grandchild that keeps stdout open for 30s and
// writes its pid to PIDFILE, then prints "parent done" and exits 0.
func bgholder() {
	if len(os.Args) == 3 && os.Args[1] == "-grandchild" {
		tmp := os.Args[2] + ".tmp"
		os.WriteFile(tmp, []byte(strconv.Itoa(os.Getpid())), 0o644)
		os.Rename(tmp, os.Args[2])
		time.Sleep(30 * time.Second)
		return
	}
	g := exec.Command("bgholder", "-grandchild", os.Args[1])
	g.Stdout = os.Stdout
	if err := g.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	for i := 0; i < 1000; i++ {
		if _, err := os.Stat(os.Args[1]); err == nil {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	fmt.Println("parent done")
}

// bump increments the counter in path and returns the new value.
func bump(path string) int {
	b, _ := os.ReadFile(path)
	n := atoi(strings.TrimSpace(string(b))) + 1
	if err := os.WriteFile(path, []byte(strconv.Itoa(n)), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	return n
}

// retryafter COUNTER CONTENT: the first call writes CONTENT to the file
// named by IDEM_RETRY_AFTER and exits 75; later calls succeed. Each prints
// "call N".
func retryafter() {
	n := bump(os.Args[1])
	fmt.Println("call", n)
	if n == 1 {
		if err := os.WriteFile(os.Getenv("IDEM_RETRY_AFTER"), []byte(os.Args[2]), 0o600); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		os.Exit(75)
	}
}

// slowflaky COUNTER FAILS CODE DUR [READY]: like flaky, but writes READY
// (if given) and sleeps DUR first.
func slowflaky() {
	n := bump(os.Args[1])
	if len(os.Args) > 5 {
		os.WriteFile(os.Args[5], []byte(strconv.Itoa(os.Getpid())), 0o644)
	}
	d, _ := time.ParseDuration(os.Args[4])
	time.Sleep(d)
	fmt.Printf("call %d\n", n)
	if n <= atoi(os.Args[2]) {
		os.Exit(atoi(os.Args[3]))
	}
}

// trapexit CODE READY: catches SIGTERM and SIGINT, writes READY, and on the
// first signal prints "caught SIGNAL" and exits CODE.
func trapexit() {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	os.WriteFile(os.Args[2], []byte(strconv.Itoa(os.Getpid())), 0o644)
	select {
	case s := <-sigs:
		fmt.Println("caught", s)
		os.Exit(atoi(os.Args[1]))
	case <-time.After(time.Minute):
		os.Exit(2)
	}
}

// slowappend FILE LINE DUR: sleeps DUR, then appends LINE to FILE and
// prints it.
func slowappend() {
	d, _ := time.ParseDuration(os.Args[3])
	time.Sleep(d)
	appendto()
}

// gate FIFO PROG ARG...: blocks until the FIFO is opened for writing, then
// execs PROG. A test starts many gated processes and opens the FIFO once,
// so that they all go in the same instant.
func gate() {
	f, err := os.OpenFile(os.Args[1], os.O_RDONLY, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	f.Close()
	prog, err := exec.LookPath(os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	err = syscall.Exec(prog, os.Args[2:], os.Environ())
	fmt.Fprintln(os.Stderr, err)
	os.Exit(2)
}

// waitfile PATH waits (at most 10s) until PATH exists.
func cmdWaitfile(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: waitfile PATH")
	}
	path := ts.MkAbs(args[0])
	for range 2000 {
		if _, err := os.Stat(path); err == nil {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	ts.Fatalf("%s did not appear within 10s", args[0])
}

// TestLeaseConcurrentRuns starts 32 `idem run` of one key in the same
// instant (on a ledger none of them has created yet): exactly one executes.
// Without --wait the others exit 75; with --wait they all exit 0 and print
// the output. No process may show a raw SQLITE_BUSY.
func TestLeaseConcurrentRuns(t *testing.T) {
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
			procs := make([]*leaseProc, n)
			for i := range procs {
				procs[i] = g.startCmd(args)
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
				if rawStoreError(p.stderr.String()) {
					t.Errorf("raw SQLite error: %v", p)
				}
				switch {
				case p.code == 0 && p.stdout.String() == "ran\n":
					if strings.Contains(p.stderr.String(), "idem: replayed concurrent:32: succeeded") {
						replayed++
					} else {
						ran++
					}
				case p.code == 75 && !tc.wait && strings.HasPrefix(p.stderr.String(), `idem: error: key "concurrent:32" is in progress on `):
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
	if !strings.HasPrefix(b.stdout.String(), "done ") {
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
// the key over and succeeds. When the first resumes, its write is fenced
// off: it exits 75 and the recorded result stays the second's.
func TestLeaseFencedAfterSIGSTOP(t *testing.T) {
	g := newLeaseRig(t)
	marks := g.path("marks")
	args := []string{"run", "--key", "crash:sigstop", "--lease", "1s", "--kill-grace", "300ms", "--", "crashjob", marks}
	a := g.start(args...)
	g.waitMarks(marks, 2)
	a.send(syscall.SIGSTOP)
	time.Sleep(1500 * time.Millisecond) // past the 1s lease

	b := g.run(args...).expect(0)
	if !strings.HasPrefix(b.stdout.String(), "done ") {
		t.Fatalf("the second run did not execute cleanly: %v", b)
	}
	a.send(syscall.SIGCONT)
	a.wait().expect(75)
	if !strings.HasPrefix(a.stderr.String(), `idem: error: lost the lease on key "crash:sigstop": another run took it over, or it was purged with --force; `) {
		t.Errorf("the first run does not say it lost its lease: %v", a)
	}

	c := g.run(args...).expect(0)
	if c.stdout.String() != b.stdout.String() || !strings.Contains(c.stderr.String(), "idem: replayed crash:sigstop: succeeded") {
		t.Errorf("replay %v, want the second run's output %q", c, b.stdout.String())
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
	if !strings.Contains(a.stderr.String(), "idem: crash:sigterm: interrupted by SIGTERM; recorded as retryable after attempt 1") {
		t.Errorf("stderr does not report the interruption: %v", a)
	}
	rec, _ := g.record("crash:sigterm")
	if rec.Status != ledger.StatusRetryable {
		t.Fatalf("record is %s, want retryable", rec.Status)
	}

	b := g.run(args...).expect(0)
	if !strings.HasPrefix(b.stdout.String(), "done ") {
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
	if a.stdout.String() != "caught terminated\n" {
		t.Errorf("stdout %q", a.stdout.String())
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
	if a.stdout.String() != "parent done\n" {
		t.Errorf("stdout %q", a.stdout.String())
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
			if p.stdout.String() != "call 1\ncall 2\n" {
				t.Errorf("stdout %q", p.stdout.String())
			}
			warned := strings.Contains(p.stderr.String(), "idem: warning: attempt 1 wrote ") &&
				strings.Contains(p.stderr.String(), " to IDEM_RETRY_AFTER: not a duration")
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
	g := newLeaseRig(t)
	marks := g.path("marks")
	args := []string{"run", "--key", "wait:intr", "--kill-grace", "300ms", "--", "crashjob", marks}
	holder := g.start(args...)
	held := g.waitMarks(marks, 2)
	before, _ := g.record("wait:intr")

	w := g.start(append([]string{"run", "--wait"}, args[1:]...)...)
	waitCaught(t, w.cmd.Process.Pid, syscall.SIGINT)
	time.Sleep(300 * time.Millisecond) // let it poll a few times
	w.send(syscall.SIGINT)
	w.wait().expect(130)
	if w.stdout.Len() != 0 || w.stderr.String() !=
		"idem: error: interrupted by SIGINT while waiting for key \"wait:intr\"; nothing ran and the record was not touched\n" {
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
	if !strings.HasPrefix(w.stdout.String(), "done ") {
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

// fgcheck COUNTER: prints "call N foreground" when its process group holds
// the terminal on stdin ("background" otherwise); the first call exits 75.
func fgcheck() {
	n := bump(os.Args[1])
	where := "background"
	if pgrp, err := unix.IoctlGetInt(0, unix.TIOCGPGRP); err == nil && pgrp == syscall.Getpgrp() {
		where = "foreground"
	}
	fmt.Printf("call %d %s\n", n, where)
	if n == 1 {
		os.Exit(75)
	}
}

// openPTY returns a pseudo-terminal's master and slave.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return m, s
}

// startOnTerminal starts `idem ARGS...` as a session leader whose
// controlling terminal (stdin, stdout, stderr) is slave: the terminal's
// foreground group, as in an interactive shell. It returns the process
// and a function that returns everything written to the terminal so far.
func (g *leaseRig) startOnTerminal(master, slave *os.File, args ...string) (*leaseProc, func() string) {
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
	p := &leaseProc{t: g.t, done: make(chan struct{})}
	p.cmd = exec.Command("idem", args...)
	p.cmd.Env, p.cmd.Dir = g.env, g.dir
	p.cmd.Stdin, p.cmd.Stdout, p.cmd.Stderr = slave, slave, slave
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := p.cmd.Start(); err != nil {
		g.t.Fatal(err)
	}
	go func() {
		defer close(p.done)
		if err := p.cmd.Wait(); err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				p.code = ee.ExitCode()
			}
		}
	}()
	g.t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
	})
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
	g := newLeaseRig(t)
	master, slave := openPTY(t)
	counter := g.path("counter")
	p, screen := g.startOnTerminal(master, slave, "run", "--key", "tty:foreground", "--initial-delay", "1s", "--jitter", "0",
		"--", "fgcheck", counter)
	// During the backoff after attempt 1, idem's own group (it leads its
	// session) must hold the terminal again.
	took := false
	for range 400 {
		if b, _ := os.ReadFile(counter); string(b) == "1" {
			pgrp, err := unix.IoctlGetInt(int(master.Fd()), unix.TIOCGPGRP)
			if err == nil && pgrp == p.cmd.Process.Pid {
				took = true
				break
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	p.wait()
	if p.code != 0 {
		t.Fatalf("idem exited %d; terminal: %q", p.code, screen())
	}
	if !took {
		t.Error("idem did not take the terminal back after attempt 1")
	}
	out := screen()
	if !strings.Contains(out, "call 1 foreground") || !strings.Contains(out, "call 2 foreground") {
		t.Errorf("the attempts did not hold the terminal: %q", out)
	}
}

// TestLeaseTerminalCtrlC: Ctrl-C on the terminal reaches the child's
// foreground group; idem records the attempt as interrupted (retryable)
// and exits 130.
func TestLeaseTerminalCtrlC(t *testing.T) {
	g := newLeaseRig(t)
	master, slave := openPTY(t)
	ready := g.path("ready")
	p, screen := g.startOnTerminal(master, slave, "run", "--key", "tty:ctrlc", "--", "sleeper", "30s", ready)
	waitForFile(t, ready)
	if _, err := master.Write([]byte{3}); err != nil { // ^C
		t.Fatal(err)
	}
	p.wait()
	if p.code != 130 {
		t.Fatalf("idem exited %d, want 130; terminal: %q", p.code, screen())
	}
	rec, hist := g.record("tty:ctrlc")
	if rec.Status != ledger.StatusRetryable || classes(hist) != "1:interrupted:130" {
		t.Errorf("record %s, history %q", rec.Status, classes(hist))
	}
}
