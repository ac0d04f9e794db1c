package runner

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/idemhq/idem/internal/exitcode"
)

// waitDelay bounds how long idem waits, after its child exited, for a
// background grandchild that still holds the output pipes.
const waitDelay = time.Second

// PrepareStart does now what the first child's start would otherwise do
// first: on Linux, os/exec checks once per process that pidfds work, by
// starting and reaping a throwaway process. Called while the ledger
// opens, on another goroutine, the check overlaps the open instead of
// delaying the command (0.05-0.25 ms a run here). It costs a replay,
// which starts no child, only that goroutine's time.
func PrepareStart() {
	if p, err := os.FindProcess(os.Getpid()); err == nil {
		p.Release()
	}
}

// StartError says idem itself could not start the command: nothing ran.
type StartError struct {
	Path string
	Code int // exitcode.CannotExec or exitcode.NotFound
	Err  error
}

func (e *StartError) Error() string {
	if e.Code == exitcode.NotFound {
		return "command not found: " + e.Path
	}
	why := e.Err
	var pe *fs.PathError
	if errors.As(why, &pe) {
		why = pe.Err // "permission denied", not "fork/exec PATH: permission denied"
	}
	return "command not executable: " + e.Path + ": " + why.Error()
}

func (e *StartError) Unwrap() error { return e.Err }

// child is one running attempt: a process group led by the command.
type child struct {
	cmd  *exec.Cmd
	pgid int
	// tty is the terminal whose foreground the child holds, or -1; idem
	// takes it back after.
	tty int
}

type childSpec struct {
	argv           []string
	env            []string
	stdin          io.Reader
	stdout, stderr io.Writer
	// tty, when >= 0, is idem's terminal fd whose foreground group the
	// child takes while it runs.
	tty int
	// lock, when set, is the run lock's file: the child gets it as fd 3
	// and every descendant that keeps it holds the lock.
	lock *os.File
}

func startChild(spec childSpec) (*child, error) {
	cmd := exec.Command(spec.argv[0], spec.argv[1:]...)
	if cmd.Err != nil {
		return nil, startError(spec.argv[0], cmd.Err)
	}
	cmd.Env = spec.env
	cmd.Stdin = spec.stdin
	cmd.Stdout = spec.stdout
	cmd.Stderr = spec.stderr
	cmd.WaitDelay = waitDelay
	if spec.lock != nil {
		cmd.ExtraFiles = []*os.File{spec.lock}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	setParentDeath(cmd.SysProcAttr)
	if spec.tty >= 0 {
		cmd.SysProcAttr.Foreground = true
		cmd.SysProcAttr.Ctty = spec.tty
	}
	if err := cmd.Start(); err != nil {
		return nil, startError(spec.argv[0], err)
	}
	return &child{cmd: cmd, pgid: cmd.Process.Pid, tty: spec.tty}, nil
}

func startError(path string, err error) error {
	code := exitcode.CannotExec
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		code = exitcode.NotFound
	}
	return &StartError{Path: path, Code: code, Err: err}
}

// wait returns the exit code as a shell reports it: 128+N for a death by
// signal N. A grandchild that kept the pipes open past waitDelay does not
// change the child's own code.
func (c *child) wait() int {
	c.cmd.Wait() // ErrWaitDelay and pipe errors: the exit status still stands
	if c.tty >= 0 {
		reclaimTerminal(c.tty)
	}
	st, ok := c.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok {
		return 1
	}
	if st.Signaled() {
		return exitcode.Signaled(int(st.Signal()))
	}
	return st.ExitStatus()
}

// signal sends sig to the child's whole process group.
func (c *child) signal(sig syscall.Signal) {
	syscall.Kill(-c.pgid, sig)
}

// foregroundTTY returns the terminal fd on stdin when idem's process group
// holds it in the foreground, or -1.
func foregroundTTY(stdin *os.File) int {
	if stdin == nil {
		return -1
	}
	fd := int(stdin.Fd())
	pgrp, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP)
	if err != nil || pgrp != syscall.Getpgrp() {
		return -1
	}
	return fd
}

// reclaimTerminal makes idem's own group the terminal's foreground again.
// A background group calling tcsetpgrp gets SIGTTOU unless it ignores it.
func reclaimTerminal(fd int) {
	signalIgnoreTTOU(func() {
		unix.IoctlSetPointerInt(fd, unix.TIOCSPGRP, syscall.Getpgrp())
	})
}
