package e2e

// The one process runner of the Go-level tests: every test that starts a
// process (idem, a helper program, strace, git, go) describes it with a
// command, starts it with start (or run, to wait for it), and reads how it
// ended from the same exitStatus that the scripts' exitcode command uses.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// nobody is the unprivileged user permission tests drop to: the tests run
// as root, and root ignores file permissions.
const nobody = 65534

// command says what to start and how.
type command struct {
	argv  []string
	dir   string    // working directory ("": the test's)
	env   []string  // the whole environment (nil: the test's own)
	stdin io.Reader // nil: /dev/null
	// tty, when set, is the process's stdin, stdout and stderr and its
	// controlling terminal: it leads a new session, as in an interactive
	// shell. Its output is then on the terminal, not in stdout/stderr.
	tty    *os.File
	umask  string   // e.g. "077": the process starts under this umask
	nobody bool     // run as the unprivileged user nobody
	wrap   []string // put before argv, e.g. strace and its arguments
	// timeout bounds wait: a process still running then is killed and the
	// test fails (a hang is a failure too). 0 means a minute.
	timeout time.Duration
}

// inherit is prog args... with the test's environment plus env
// (NAME=VALUE).
func inherit(env []string, prog string, args ...string) command {
	return command{argv: append([]string{prog}, args...), env: append(os.Environ(), env...)}
}

// clean is prog args... with a small clean environment (PATH, HOME in the
// temporary directory, LC_ALL=C) plus env (NAME=VALUE).
func clean(env []string, prog string, args ...string) command {
	base := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir(), "LC_ALL=C"}
	if bin := os.Getenv("IDEM_TEST_BINARY"); bin != "" {
		base = append(base, "IDEM_TEST_BINARY="+bin) // the build under test (idemProgram)
	}
	return command{argv: append([]string{prog}, args...), env: append(base, env...)}
}

// exitStatus is how a process ended, decoded one way for every test: code
// is its exit status, or 128+N when signal N killed it, as shells report
// it; signal is N (0 when the process exited by itself).
type exitStatus struct {
	code   int
	signal syscall.Signal
}

func (s exitStatus) String() string {
	if s.signal != 0 {
		return fmt.Sprintf("killed by %s (%d)", unix.SignalName(s.signal), s.code)
	}
	return fmt.Sprintf("exit %d", s.code)
}

// exitStatusOf decodes the error of exec.Cmd's Wait or Run (nil: exit 0).
// ok is false when err says nothing about how the process ended (it did
// not start, or waiting failed).
func exitStatusOf(err error) (s exitStatus, ok bool) {
	if err == nil {
		return exitStatus{}, true
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return exitStatus{}, false
	}
	ws, isWait := ee.Sys().(syscall.WaitStatus)
	switch {
	case !isWait:
		return exitStatus{code: ee.ExitCode()}, true
	case ws.Signaled():
		return exitStatus{code: 128 + int(ws.Signal()), signal: ws.Signal()}, true
	default:
		return exitStatus{code: ws.ExitStatus()}, true
	}
}

// process is one process a test started. Its exit status and output are
// set once wait returns.
type process struct {
	t    testing.TB
	c    command
	argv []string // as started, wrap included
	cmd  *exec.Cmd
	done chan struct{}
	err  error // Wait's

	outBuf, errBuf bytes.Buffer

	ended bool
	exitStatus
	stdout, stderr string
}

// start starts c. The test fails if it cannot; a process still running
// when the test ends is killed (after a SIGCONT, in case it was stopped).
func start(t testing.TB, c command) *process {
	t.Helper()
	argv := c.argv
	if c.umask != "" {
		argv = append([]string{"/bin/sh", "-c", `umask ` + c.umask + ` && exec "$0" "$@"`}, argv...)
	}
	argv = append(append([]string{}, c.wrap...), argv...)
	p := &process{t: t, c: c, argv: argv, done: make(chan struct{})}
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Dir, p.cmd.Env, p.cmd.Stdin = c.dir, c.env, c.stdin
	p.cmd.Stdout, p.cmd.Stderr = &p.outBuf, &p.errBuf
	attr := &syscall.SysProcAttr{}
	if c.nobody {
		attr.Credential = &syscall.Credential{Uid: nobody, Gid: nobody}
	}
	if c.tty != nil {
		p.cmd.Stdin, p.cmd.Stdout, p.cmd.Stderr = c.tty, c.tty, c.tty
		attr.Setsid, attr.Setctty, attr.Ctty = true, true, 0
	}
	p.cmd.SysProcAttr = attr
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %q: %v", argv, err)
	}
	go func() {
		defer close(p.done)
		p.err = p.cmd.Wait()
	}()
	t.Cleanup(func() {
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

// run starts c and waits for it.
func run(t testing.TB, c command) *process {
	t.Helper()
	return start(t, c).wait()
}

// output runs c, fails the test unless it exits 0, and returns its stdout.
func output(t testing.TB, c command) string {
	t.Helper()
	p := run(t, c)
	if p.exitStatus != (exitStatus{}) {
		t.Fatalf("%v", p)
	}
	return p.stdout
}

// wait waits for the process to end (at most its timeout) and decodes how.
func (p *process) wait() *process {
	p.t.Helper()
	timeout := p.c.timeout
	if timeout == 0 {
		timeout = time.Minute
	}
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.cmd.Process.Signal(syscall.SIGCONT)
		p.cmd.Process.Kill()
		<-p.done
		p.collect()
		p.t.Fatalf("%q hung (killed after %v)\n%v", p.argv, timeout, p)
	}
	p.collect()
	if _, ok := exitStatusOf(p.err); !ok {
		p.t.Fatalf("%q: %v", p.argv, p.err)
	}
	return p
}

func (p *process) collect() {
	p.ended = true
	p.exitStatus, _ = exitStatusOf(p.err)
	p.stdout, p.stderr = p.outBuf.String(), p.errBuf.String()
}

// expect fails the test unless the process exited by itself with code,
// and without showing a raw driver error.
func (p *process) expect(code int) *process {
	p.t.Helper()
	if p.exitStatus != (exitStatus{code: code}) {
		p.t.Fatalf("want exit %d, got %v", code, p)
	}
	if rawStoreError(p.stderr) {
		p.t.Fatalf("raw SQLite error on stderr: %v", p)
	}
	return p
}

// send sends sig to the process.
func (p *process) send(sig syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signal %v: %v", sig, err)
	}
}

func (p *process) pid() int { return p.cmd.Process.Pid }

// String is how tests show a process in a failure message: its argv, how
// it ended, and what it printed.
func (p *process) String() string {
	if !p.ended {
		return fmt.Sprintf("%q: still running", p.argv)
	}
	return fmt.Sprintf("%q: %v\nstdout: %q\nstderr: %q", p.argv, p.exitStatus, p.stdout, p.stderr)
}

// rawStoreError reports whether s shows a driver's busy error or a Go
// stack trace to the user.
func rawStoreError(s string) bool {
	l := strings.ToLower(s)
	return strings.Contains(l, "database is locked") || strings.Contains(l, "sqlite_busy") || strings.Contains(l, "goroutine ")
}
