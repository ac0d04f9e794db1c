// Package runner is idem's run algorithm over a ledger: reserve the key,
// run attempts of the command in its own process group, classify each exit,
// back off between transient failures while renewing the lease, and record
// the outcome. It returns values and prints nothing of its own.
package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/idemhq/idem/internal/backoff"
	"github.com/idemhq/idem/internal/exitcode"
	"github.com/idemhq/idem/internal/flagval"
	"github.com/idemhq/idem/internal/ledger"
	"github.com/idemhq/idem/internal/probe"
	"github.com/idemhq/idem/internal/runner/procs"
)

// Clock is the runner's time source; tests inject a fake.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

// SystemClock is the real clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// After returns time.After(d).
func (SystemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// StdoutMode says how the child's stdout reaches idem's.
type StdoutMode int

// Stdout modes.
const (
	StdoutLive  StdoutMode = iota // every attempt streams as it comes
	StdoutFinal                   // only the recorded attempt's, after it ended
)

// Options is one invocation of `idem run`.
type Options struct {
	Key         string
	Argv        []string
	Fingerprint string
	MaxAttempts int
	RerunFailed bool
	Success     flagval.CodeSet
	Transient   flagval.CodeSet
	Backoff     backoff.Policy
	Lease       time.Duration
	KillGrace   time.Duration
	Timeout     time.Duration // per attempt; 0: none
	Deadline    time.Duration // whole invocation, waiting included; 0: none
	TTL         time.Duration
	MaxOutput   int64
	NoOutput    bool
	StdoutMode  StdoutMode
	// StderrFinal holds each attempt's stderr back and writes only the
	// recorded attempt's, after it ended, so that the first run's output
	// is a replay's byte for byte; a failed attempt's stderr (and, with
	// StdoutFinal, its stdout) is then not written at all: its tail is in
	// the attempt history.
	StderrFinal bool
	// Wait makes a run that finds a live owner wait for it (polling with
	// backoff) instead of returning *BusyError; WaitTimeout bounds the wait
	// (0: none).
	Wait        bool
	WaitTimeout time.Duration
	// Progress, when set, is told when a backoff starts, at every poll of
	// --wait, and when either is over (EventResume), so that the command
	// line can show a status line. The runner itself prints nothing.
	Progress func(Event)
	// Attempted, when set, is told when an attempt's command has started
	// and when the attempt's end is recorded (a monitor's pings); never
	// for a command idem could not start, nor for an end it could not
	// record. It is called on the run's path, while the command runs: it
	// must not block, nor keep the report's output past its return.
	Attempted func(AttemptReport)
	// Stdin is given to the child as is (--stdin pass); SpooledStdin, when
	// non-nil, is given whole to every attempt instead (--stdin spool).
	Stdin        *os.File
	SpooledStdin []byte
	Stdout       io.Writer
	Stderr       io.Writer
}

// EventKind says what an Event reports.
type EventKind int

const (
	// EventBackoff: attempt Attempt exited ExitCode (transient); the next
	// starts after Delay.
	EventBackoff EventKind = iota + 1
	// EventWait: the key is held by Holder (attempt Attempt of
	// MaxAttempts); the next look is after Delay, Waited so far.
	EventWait
	// EventResume: the backoff or the wait is over; what follows is
	// output of the command or idem's own lines.
	EventResume
	// EventTakeover: the key's owner Holder is gone (or its lease
	// expired); this run stops what is left of its command and takes
	// the key, as attempt Attempt of MaxAttempts.
	EventTakeover
)

// Event is progress while a person may be waiting (Options.Progress).
type Event struct {
	Kind        EventKind
	Key         string
	Attempt     int
	MaxAttempts int
	ExitCode    int
	Delay       time.Duration
	Waited      time.Duration
	Holder      ledger.Owner
}

// AttemptReport is what Options.Attempted is told of an attempt.
type AttemptReport struct {
	Key         string
	Token       int64 // the fencing token of the invocation that ran it
	Attempt     int
	MaxAttempts int
	// Ended: the attempt is over and its end recorded; else its command
	// has just started, and the rest is unset.
	Ended    bool
	ExitCode int
	Class    string        // ledger.Class*
	Status   ledger.Status // the key's, as recorded at the end
	// Delay is the backoff before the next attempt, which this
	// invocation starts unless a signal or the deadline stops it; 0:
	// none follows here.
	Delay    time.Duration
	Signal   syscall.Signal // idem was interrupted
	TimedOut bool           // idem stopped it at --timeout or the deadline
	// Stdout is the attempt's stdout as captured (its first --max-output
	// bytes; StdoutCut: there was more), Stderr the end of its stderr;
	// both nil with NoOutput.
	Stdout, Stderr []byte
	StdoutCut      bool
}

// Final reports whether the end is the key's outcome: succeeded, or
// failed for good.
func (r AttemptReport) Final() bool {
	return r.Ended && r.Status != ledger.StatusRetryable
}

func (o Options) progress(e Event) {
	if o.Progress != nil {
		e.Key = o.Key
		o.Progress(e)
	}
}

// Runner runs invocations against one ledger.
type Runner struct {
	Ledger ledger.Ledger
	// Host is the machine the run is on; LookupHost, when set, finds it
	// instead, the first time a step needs it (see host). The lookup
	// reads /proc, and a replay needs nothing of it.
	Host       Host
	LookupHost func() Host
	Clock      Clock
	Rand       backoff.Rand
	// Signals delivers SIGINT, SIGTERM and SIGHUP sent to idem; they are
	// forwarded to the child's group. Nil: none.
	Signals <-chan os.Signal
	// Environ is the environment the child inherits.
	Environ []string
	// Procs finds and signals the processes of a key's earlier runs on
	// this host (takeovers, retryable records, next attempts). Nil: none
	// are found, only the abandoned owner's idem is stopped.
	Procs procs.Finder
	// LockPath is the run lock file (procs.Lock), beside the ledger or,
	// for a shared ledger, in this host's state directory. "": no lock.
	LockPath string
	// TrustedUIDs are the uids besides idem's own whose lock file idem
	// uses (the ledger's owner, when idem runs as another user): see
	// procs.Lock. The Finder is given them as well (procs.New).
	TrustedUIDs []int

	hostOnce sync.Once // LookupHost's call (see host)
}

// host is the machine the run is on: Host, or LookupHost's answer,
// looked up once.
func (r *Runner) host() *Host {
	if r.LookupHost != nil {
		r.hostOnce.Do(func() { r.Host = r.LookupHost() })
	}
	return &r.Host
}

// Result is what an invocation did.
type Result struct {
	Key      string
	Status   ledger.Status
	Replayed bool
	// Record is the replayed record (with its output) when Replayed.
	Record   *ledger.Record
	Attempts int // attempts on the record, across invocations
	Ran      int // attempts this invocation started
	// ExitCode is the recorded (or replayed) attempt's code; Exit says
	// what idem exits with.
	ExitCode int
	// Source says whose code Exit is: the command's, or one idem chose (it
	// timed the last attempt out, or was interrupted).
	Source   exitcode.Source
	Started  time.Time
	Finished time.Time
	// Signal is set when idem was interrupted; idem exits 128+N.
	Signal   syscall.Signal
	TimedOut bool // the last attempt was stopped at --timeout or --deadline
	TookOver bool
	// Waited is how long the invocation waited for another owner (--wait).
	Waited          time.Duration
	StdoutTruncated bool
	StderrTruncated bool
	// Warnings are for the user (bad IDEM_RETRY_AFTER content); the runner
	// prints nothing itself.
	Warnings []string
}

// Exit is the code idem exits with: 128+N when it was interrupted by
// signal N, else the recorded attempt's code.
func (r *Result) Exit() int {
	if r.Signal != 0 {
		return exitcode.Signaled(int(r.Signal))
	}
	return r.ExitCode
}

// BusyError is returned when a live owner holds the key.
type BusyError struct {
	Record *ledger.Record
}

func (e *BusyError) Error() string {
	return fmt.Sprintf("key %q is in progress", e.Record.Key)
}

// WaitTimeoutError is returned when --wait gave up: --wait-timeout, or the
// deadline (Deadline), came while a live owner still held the key. Nothing
// ran and the record was not touched.
type WaitTimeoutError struct {
	Key string
	// Record is the holder, as last seen; nil when the ledger did not
	// answer in time (a held row lock, a hung connection).
	Record   *ledger.Record
	Waited   time.Duration
	Deadline bool
}

func (e *WaitTimeoutError) Error() string {
	return fmt.Sprintf("gave up waiting for key %q after %s", e.Key, e.Waited.Round(time.Millisecond))
}

// DeadlineError is returned when the deadline passed before the first
// attempt of this invocation could start: nothing ran, the reservation was
// released.
type DeadlineError struct{ Key string }

func (e *DeadlineError) Error() string {
	return fmt.Sprintf("the deadline passed before key %q could run", e.Key)
}

// InterruptedError is returned when idem was signalled before any attempt
// of this invocation started (while waiting, or right after reserving):
// nothing ran, and the record is as it was.
type InterruptedError struct {
	Key     string
	Signal  syscall.Signal
	Waiting bool
}

func (e *InterruptedError) Error() string {
	return fmt.Sprintf("interrupted by %s before key %q ran", e.Signal, e.Key)
}

// LeaseLostError is returned when a fenced write matched no row: another run
// took the key over. Nothing was written; when Stopped, idem stopped its
// running child. It wraps ledger.ErrLeaseLost.
type LeaseLostError struct {
	Key     string
	Stopped bool
}

func (e *LeaseLostError) Error() string { return ledger.ErrLeaseLost.Error() }
func (e *LeaseLostError) Unwrap() error { return ledger.ErrLeaseLost }

// asLeaseLost is err as a *LeaseLostError of key when it is
// ledger.ErrLeaseLost (stopped: idem stopped its child), else err as it
// is.
func asLeaseLost(err error, key string, stopped bool) error {
	if errors.Is(err, ledger.ErrLeaseLost) {
		return &LeaseLostError{Key: key, Stopped: stopped}
	}
	return err
}

// LeaseLapsedError is returned when idem lost its lease without another
// run taking the key: its renewals failed (Err, an I/O error or a ledger
// that did not answer in time) or, when Paused, idem itself did not run
// (stopped by SIGSTOP, its host suspended) for longer than the lease
// allows. A running command was stopped (Stopped; else none was
// running: a backoff); idem renews no more, and the key was given back as
// retryable (Released) when the ledger answered a fenced write in time;
// else it stays in progress until its lease expires.
type LeaseLapsedError struct {
	Err      error // why; nil when Paused
	Paused   bool
	Stopped  bool
	Released bool
	// Unstarted: the lease lapsed before the first attempt started, and
	// the key, when Released, was given back as it was.
	Unstarted bool
}

func (e *LeaseLapsedError) Error() string {
	if e.Paused {
		return "the lease lapsed while idem was paused (stopped or suspended) for longer than it allows"
	}
	return "could not renew the lease: " + e.Err.Error()
}
func (e *LeaseLapsedError) Unwrap() error { return e.Err }

// Run executes one invocation. Errors: *ledger.MismatchError, *BusyError,
// *WaitTimeoutError, *DeadlineError, *InterruptedError and *StartError
// (nothing ran, nothing kept), *LeaseLostError (nothing written; the child
// was stopped if it ran), *LeaseLapsedError (the child was stopped),
// *OutcomeError (the command ran; its outcome could not be recorded),
// *ledger.StoreError.
func (r *Runner) Run(ctx context.Context, o Options) (*Result, error) {
	started := r.Clock.Now()
	var deadline time.Time
	if o.Deadline > 0 {
		deadline = started.Add(o.Deadline)
	}
	probe.At("before-reserve")
	resv, reservedAt, err := r.reserve(ctx, o, started, deadline)
	if o.Wait {
		o.progress(Event{Kind: EventResume})
	}
	if err != nil {
		return nil, err
	}
	probe.At("after-reserve")
	waited := r.Clock.Now().Sub(started)
	switch resv.Outcome {
	case ledger.Replay:
		return r.replay(ctx, o, resv, started, waited)
	case ledger.Busy:
		return nil, &BusyError{Record: resv.Record}
	}
	inv := &invocation{r: r, o: o, started: started, deadline: deadline, token: resv.Token, n: resv.Attempt,
		attemptID: resv.AttemptID, leaseUntil: reservedAt.Add(o.Lease),
		res:      &Result{Key: o.Key, Started: started, TookOver: resv.Abandoned != nil, Waited: waited},
		ledgerID: ledger.Identity(r.Ledger)}
	keepInherited()
	if inv.guard, err = runGuard(ctx, r.Ledger); err != nil {
		return nil, inv.unreserve(ctx, resv.Prev, err)
	}
	if resv.Abandoned != nil {
		o.progress(Event{Kind: EventTakeover, Attempt: resv.Attempt, MaxAttempts: o.MaxAttempts, Holder: *resv.Abandoned})
	}
	if resv.Abandoned != nil || resv.Prev != nil || resv.Expired {
		// A takeover, a key that ran before, or one whose record expired:
		// before anything runs, every process of an earlier run must be
		// gone, so that two executions never overlap. (A new key skips
		// the scan; the run lock still tells if something runs, and purge
		// refuses a key while processes of its runs live.)
		if _, err := r.stopRun(ctx, scan{before: inv.id(inv.n), secret: inv.guard.Secret, ab: resv.Abandoned}, o.KillGrace, inv); err != nil {
			return nil, err
		}
	}
	res, err := inv.run(ctx, resv.Prev)
	return res, inv.tidy(err)
}

// replay is the result of a reservation that found the key's outcome.
func (r *Runner) replay(ctx context.Context, o Options, resv *ledger.Reservation, started time.Time, waited time.Duration) (*Result, error) {
	if resv.Abandoned != nil {
		// The lost attempt was the last of the budget; its processes must
		// still go.
		guard, err := runGuard(ctx, r.Ledger)
		if err != nil {
			return nil, err
		}
		before := procs.Run{Ledger: ledger.Identity(r.Ledger), Key: o.Key, Token: resv.Record.Token + 1}
		if _, err := r.stopRun(ctx, scan{before: before, secret: guard.Secret, ab: resv.Abandoned}, o.KillGrace, nil); err != nil {
			return nil, err
		}
	}
	rec := resv.Record
	src := exitcode.Source(rec.ExitSource)
	if src == "" {
		src = exitcode.SourceChild
	}
	return &Result{Key: o.Key, Status: rec.Status, Replayed: true, Record: rec, Attempts: rec.Attempts,
		ExitCode: rec.ExitCode, Source: src, Started: started, Finished: r.Clock.Now(),
		TookOver: resv.Abandoned != nil, Waited: waited,
		StdoutTruncated: rec.StdoutTruncated, StderrTruncated: rec.StderrTruncated}, nil
}

// runGuard is the ledger's run guard, zero for a ledger that keeps none.
func runGuard(ctx context.Context, l ledger.Ledger) (ledger.RunGuard, error) {
	if g, ok := l.(ledger.RunGuarder); ok {
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		defer cancel()
		return g.RunGuard(cctx)
	}
	return ledger.RunGuard{}, nil
}

func toSignal(s os.Signal) syscall.Signal {
	if sig, ok := s.(syscall.Signal); ok {
		return sig
	}
	return syscall.SIGTERM
}
