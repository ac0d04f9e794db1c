package cmd

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/idemhq/idem/internal/exitcode"
	"github.com/idemhq/idem/internal/ledger"
	"github.com/idemhq/idem/internal/runner"
)

// runError turns the runner's errors into idem's messages and exit codes;
// now is on the ledger's clock, which stamped the records.
func runError(err error, o runner.Options, now time.Time) error {
	var (
		mismatch   *ledger.MismatchError
		busy       *runner.BusyError
		held       *runner.HeldError
		start      *runner.StartError
		lapsed     *runner.LeaseLapsedError
		waited     *runner.WaitTimeoutError
		late       *runner.DeadlineError
		intr       *runner.InterruptedError
		lost       *runner.LeaseLostError
		unrecorded *runner.OutcomeError
	)
	switch {
	case errors.As(err, &mismatch):
		return mismatchError(mismatch.Record, o.Argv, now)
	case errors.As(err, &busy):
		rec := busy.Record
		return &exitError{code: exitcode.TempFail, reason: "busy",
			msg: fmt.Sprintf("key %q is in progress on %s (pid %d, started %s ago, attempt %d/%d)",
				rec.Key, rec.Owner.Host, rec.Owner.PID, age(now.Sub(rec.Started)), rec.Attempts, rec.MaxAttempts),
			hint: "retry later, or wait for it with --wait"}
	case errors.As(err, &held):
		return &exitError{code: exitcode.TempFail,
			msg: fmt.Sprintf("key %q is held by processes of an earlier run that idem cannot see (another PID namespace, such as a container sharing the ledger, or processes that cleared their environment); nothing ran",
				held.Key),
			hint: "retry once they have ended; 'fuser -v " + held.LockPath + "' lists the processes on this host that hold the lock file"}
	case errors.As(err, &start):
		return startError(start)
	case errors.As(err, &waited):
		rec := waited.Record
		why, reason := "--wait-timeout "+o.WaitTimeout.String(), "wait_timeout"
		if waited.Deadline {
			why, reason = "--deadline "+o.Deadline.String(), "deadline"
		}
		if rec == nil {
			return &exitError{code: exitcode.TempFail, reason: reason,
				msg:  fmt.Sprintf("%s reached while the ledger had not answered for key %q; nothing ran", why, waited.Key),
				hint: "check that the ledger is reachable, and look for a long transaction holding its rows"}
		}
		return &exitError{code: exitcode.TempFail, reason: reason,
			msg: fmt.Sprintf("%s reached while waiting for key %q, still in progress on %s (pid %d, attempt %d/%d); nothing ran",
				why, rec.Key, rec.Owner.Host, rec.Owner.PID, rec.Attempts, rec.MaxAttempts),
			hint: "retry later, or wait longer"}
	case errors.As(err, &late):
		return &exitError{code: exitcode.TempFail, reason: "deadline",
			msg:  fmt.Sprintf("--deadline %s passed before key %q could run; nothing ran", o.Deadline, late.Key),
			hint: "retry later, or allow a longer --deadline"}
	case errors.As(err, &intr):
		msg := fmt.Sprintf("interrupted by %s before key %q ran; nothing ran", signalName(intr.Signal), intr.Key)
		if intr.Waiting {
			msg = fmt.Sprintf("interrupted by %s while waiting for key %q; nothing ran and the record was not touched",
				signalName(intr.Signal), intr.Key)
		}
		return &exitError{code: exitcode.Signaled(int(intr.Signal)), msg: msg, reason: "interrupted"}
	case errors.Is(err, ledger.ErrLeaseLost):
		what := "its result was not recorded"
		if errors.As(err, &lost) && lost.Stopped {
			what = "the command was stopped and nothing was recorded"
		}
		return &exitError{code: exitcode.TempFail, reason: "lease_lost",
			msg:  fmt.Sprintf("lost the lease on key %q: another run took it over, or it was purged with --force; %s", o.Key, what),
			hint: "see 'idem inspect " + o.Key + "'; raise --lease if this host pauses for long (it was " + o.Lease.String() + ")"}
	case errors.As(err, &unrecorded):
		what := "the key stays in progress: the next run takes it over and runs the command again"
		if unrecorded.Released {
			what = "the key was left retryable, this attempt not counted: its next run runs the command again"
		}
		return &exitError{code: exitcode.IOErr,
			msg: fmt.Sprintf("key %q: the command ended (%s, exit %d) but its outcome could not be recorded: %v; %s",
				o.Key, unrecorded.Status, unrecorded.ExitCode, unrecorded.Err, what), hint: storeHint(unrecorded.Err)}
	case errors.As(err, &lapsed):
		return lapsedError(lapsed, o)
	}
	return err
}

// lapsedError explains a lease lost without another run taking the key:
// 75 when idem itself was paused past it (the ledger is fine), 74 when
// the ledger failed or did not answer.
func lapsedError(e *runner.LeaseLapsedError, o runner.Options) error {
	what := "no command was running"
	switch {
	case e.Stopped:
		what = "the command was stopped"
	case e.Unstarted:
		what = "the command did not start"
	}
	kept := "the key stays in progress until its lease expires"
	switch {
	case e.Released && e.Unstarted:
		kept = "the key was given back as it was, this attempt not counted"
	case e.Released:
		kept = "the key was given back as retryable"
	}
	msg := fmt.Sprintf("key %q: %v; %s; %s", o.Key, e, what, kept)
	if e.Paused {
		return &exitError{code: exitcode.TempFail, reason: "lease_lost", msg: msg,
			hint: "a paused idem cannot keep its lease: resume it within --lease (it was " + o.Lease.String() + "), or raise --lease"}
	}
	return &exitError{code: exitcode.IOErr, msg: msg, hint: storeHint(e.Err)}
}

// storeHint is the backend's hint for err (it knows what its failures
// mean), else one that holds for every ledger.
func storeHint(err error) string {
	if se := (*ledger.StoreError)(nil); errors.As(err, &se) && se.Hint != "" {
		return se.Hint
	}
	return "check that the ledger is reachable and writable, and look for a long transaction holding its rows"
}

// startError explains why idem could not start the command: what a shell
// would say, a directory or a missing #! interpreter included.
func startError(e *runner.StartError) error {
	const none = "; nothing ran and nothing was recorded"
	msg, hint := e.Error(), "check the command's name and PATH, or give its full path"
	if e.Code == exitcode.CannotExec {
		hint = "make it executable (chmod +x), or run it through its interpreter (sh SCRIPT)"
	}
	fi, statErr := os.Stat(e.Path)
	switch {
	case statErr == nil && fi.IsDir():
		msg, hint = "command is a directory: "+e.Path, "name the program to run, not its directory"
	case e.Code == exitcode.NotFound && strings.ContainsAny(e.Path, " |&;<>()$`*?"):
		// A whole shell line given as one argument: no program has that name.
		hint = "idem runs a program, not a shell line: give the line to a shell (-- sh -c '...')"
	case e.Code == exitcode.NotFound && errors.Is(statErr, fs.ErrNotExist) && strings.Contains(e.Path, "/"):
		// A path, not a name: PATH played no part.
		hint = "check the path: no file is there (PATH plays no part in a name with a /)"
	case statErr == nil && e.Code == exitcode.NotFound:
		// The file is there: what is missing is the interpreter its #!
		// line names (the kernel reports ENOENT for both).
		if interp, ok := shebang(e.Path); ok {
			msg = fmt.Sprintf("cannot run %s: its interpreter %s (from its #! line) was not found", e.Path, interp)
			hint = "install that interpreter, or fix the script's first line"
		}
	}
	return &exitError{code: e.Code, msg: msg + none, hint: hint}
}

// shebang returns the interpreter a script's #! line names.
func shebang(path string) (string, bool) {
	f, err := os.Open(path)
	if err != nil {
		return "", false
	}
	defer f.Close()
	b := make([]byte, 256)
	n, _ := io.ReadFull(f, b)
	line, _, _ := strings.Cut(string(b[:n]), "\n")
	rest, ok := strings.CutPrefix(line, "#!")
	if !ok {
		return "", false
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return "", false
	}
	return fields[0], true
}

// mismatchError says what differs between a record and a run of its key
// with another fingerprint. Only the command is stored as it was; the
// payload, stdin and --fingerprint-env values are stored as one hash, so
// when the command is the same, one of those differs.
func mismatchError(rec *ledger.Record, argv []string, now time.Time) error {
	when := fmt.Sprintf("%s, %s ago", rec.Status, age(now.Sub(rec.OutcomeTime())))
	msg := fmt.Sprintf("key %q was recorded for a different payload, stdin or environment (--fingerprint-env) with the same command %s (%s); nothing ran",
		rec.Key, quoteArgv(rec.Command), when)
	if !slices.Equal(rec.Command, argv) {
		msg = fmt.Sprintf("key %q was recorded for a different command: %s (%s), not %s; nothing ran",
			rec.Key, quoteArgv(rec.Command), when, quoteArgv(argv))
	}
	hint := fmt.Sprintf("use another key, or reset this one with: idem purge %s", rec.Key)
	if rec.Status == ledger.StatusSucceeded {
		hint = fmt.Sprintf("use another key: it succeeded, and 'idem purge %s' would let it run, and its side effect happen, a second time", rec.Key)
	}
	return &exitError{code: exitcode.DataErr, msg: msg, hint: hint}
}
