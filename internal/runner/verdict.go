package runner

import (
	"syscall"

	"github.com/idemhq/idem/internal/exitcode"
	"github.com/idemhq/idem/internal/flagval"
	"github.com/idemhq/idem/internal/ledger"
)

// DefaultSuccessCodes is --success-codes when it is not given.
func DefaultSuccessCodes() flagval.CodeSet { return flagval.CodesOf(0) }

// DefaultTransientCodes is --transient-codes when it is not given: a
// command that exits EX_TEMPFAIL asks to be tried again.
func DefaultTransientCodes() flagval.CodeSet { return flagval.CodesOf(exitcode.TempFail) }

// attemptEnd is how one attempt ended.
type attemptEnd struct {
	code       int
	class      string
	signal     syscall.Signal // idem was interrupted
	timedOut   bool           // idem stopped it at --timeout or the deadline
	byDeadline bool           // ... and it was the deadline
	tty        bool           // the child held idem's terminal
	stdout     *capture
	stderr     *capture
	held       *spool // --stdout final
	heldErr    *spool // --stderr final
	told       bool   // Options.Attempted was told of the end
}

// source says whose code the attempt's is: idem's when it stopped the
// attempt at --timeout or the deadline (the code is then 124), else the
// command's.
func (e *attemptEnd) source() exitcode.Source {
	if e.timedOut {
		return exitcode.SourceIdem
	}
	return exitcode.SourceChild
}

// verdict is the one place where an exit becomes a status: it classifies
// how attempt n of o.MaxAttempts ended (setting end's class, and its code,
// signal and timeout as they count) and returns the status the key is
// left in. final false: a next attempt may follow, after a backoff; the
// status is then StatusRetryable, what is recorded when it cannot start (a
// signal, or the deadline, during the backoff).
func verdict(end *attemptEnd, o Options, n int) (status ledger.Status, final bool) {
	switch {
	case o.Success.Contains(end.code):
		// A success during the grace still happened: record it.
		end.class, end.signal, end.timedOut, end.byDeadline = ledger.ClassSuccess, 0, false, false
	case end.signal != 0:
		end.class, end.timedOut, end.byDeadline = ledger.ClassInterrupted, false, false
	case end.timedOut:
		// Transient whatever --transient-codes says; a child's own 124 is
		// not here: it was not stopped by idem.
		end.code, end.class = exitcode.Timeout, ledger.ClassTimeout
	case end.tty && (end.code == exitcode.Signaled(int(syscall.SIGINT)) || end.code == exitcode.Signaled(int(syscall.SIGQUIT))):
		// Ctrl-C on the terminal reached only the child's foreground group.
		end.signal, end.class = syscall.Signal(end.code-exitcode.Signal), ledger.ClassInterrupted
	case o.Transient.Contains(end.code):
		end.class = ledger.ClassTransient
	default:
		end.class = ledger.ClassPermanent
	}
	switch {
	case end.class == ledger.ClassSuccess:
		return ledger.StatusSucceeded, true
	case end.class == ledger.ClassPermanent, n >= o.MaxAttempts:
		return ledger.StatusFailed, true // the budget wins
	case end.signal != 0, end.byDeadline:
		// Interrupted, or stopped at the deadline: the key stays open to
		// the next invocation.
		return ledger.StatusRetryable, true
	}
	return ledger.StatusRetryable, false
}
