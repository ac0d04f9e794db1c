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
	"math"
	"os"
	"strconv"
	"strings"
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
	// Wait makes a run that finds a live owner wait for it (polling with
	// backoff) instead of returning *BusyError; WaitTimeout bounds the wait
	// (0: none).
	Wait        bool
	WaitTimeout time.Duration
	// Progress, when set, is told when a backoff starts, at every poll of
	// --wait, and when either is over (EventResume), so that the command
	// line can show a status line. The runner itself prints nothing.
	Progress func(Event)
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

func (o Options) progress(e Event) {
	if o.Progress != nil {
		e.Key = o.Key
		o.Progress(e)
	}
}

// Runner runs invocations against one ledger.
type Runner struct {
	Ledger ledger.Ledger
	Host   Host
	Clock  Clock
	Rand   backoff.Rand
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
func leaseLost(key string, stopped bool, err error) error {
	if errors.Is(err, ledger.ErrLeaseLost) {
		return &LeaseLostError{Key: key, Stopped: stopped}
	}
	return err
}

// LeaseLapsedError is returned when idem could not renew its lease before
// it lapsed; the child was stopped.
type LeaseLapsedError struct{ Err error }

func (e *LeaseLapsedError) Error() string { return "could not renew the lease: " + e.Err.Error() }
func (e *LeaseLapsedError) Unwrap() error { return e.Err }

// waitPolicy paces --wait's polls (plain reads, no write lock): quick at
// first and growing slowly (most holders finish within a second), then at
// most one read a second per waiter, jittered so that many waiters spread
// out.
func waitPolicy() backoff.Policy {
	return backoff.Policy{Initial: 10 * time.Millisecond, Multiplier: 1.25, Max: time.Second, Jitter: 0.5}
}

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
		if resv.Abandoned != nil {
			// The lost attempt was the last of the budget; its processes
			// must still go.
			before := procs.Run{Ledger: ledger.Identity(r.Ledger), Key: o.Key, Token: resv.Record.Token + 1}
			if _, err := r.stopRun(ctx, before, resv.Abandoned, o.KillGrace, nil); err != nil {
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
	case ledger.Busy:
		return nil, &BusyError{Record: resv.Record}
	}
	inv := &invocation{r: r, o: o, started: started, deadline: deadline, token: resv.Token, n: resv.Attempt,
		attemptID: resv.AttemptID, leaseUntil: reservedAt.Add(o.Lease),
		res:      &Result{Key: o.Key, Started: started, TookOver: resv.Abandoned != nil, Waited: waited},
		ledgerID: ledger.Identity(r.Ledger)}
	if resv.Abandoned != nil {
		o.progress(Event{Kind: EventTakeover, Attempt: resv.Attempt, MaxAttempts: o.MaxAttempts, Holder: *resv.Abandoned})
	}
	if resv.Abandoned != nil || resv.Prev != nil {
		// A takeover, or a key that ran before: before anything runs, every
		// process of an earlier run must be gone, so that two executions
		// never overlap. (A new key skips the scan; the run lock still
		// tells if something runs.)
		if _, err := r.stopRun(ctx, inv.id(inv.n), resv.Abandoned, o.KillGrace, inv); err != nil {
			return nil, err
		}
	}
	return inv.run(ctx, resv.Prev)
}

// reserve asks the ledger for the key; with --wait it polls, with backoff
// and without writing, while a live owner holds it, and asks again once the
// holder looks done (finished, lease expired, or dead on this host). It
// returns when the last request was sent: the lease runs from then.
func (r *Runner) reserve(ctx context.Context, o Options, started, deadline time.Time) (*ledger.Reservation, time.Time, error) {
	req := ledger.ReserveRequest{
		Key: o.Key, Fingerprint: o.Fingerprint, Command: o.Argv, MaxAttempts: o.MaxAttempts,
		RerunFailed: o.RerunFailed, Owner: r.Host.Self(), Lease: o.Lease, OwnerDead: r.Host.OwnerDead,
		Cwd: r.Host.Cwd, User: r.Host.User,
	}
	var giveUp time.Time
	byDeadline := false
	if o.WaitTimeout > 0 {
		giveUp = started.Add(o.WaitTimeout)
	}
	if !deadline.IsZero() && (giveUp.IsZero() || deadline.Before(giveUp)) {
		giveUp, byDeadline = deadline, true
	}
	var holder *ledger.Record
	// call gives a ledger call its deadline: the time to give up, or
	// callTimeout, whichever is first. A call that does not answer in
	// time (a row lock held by a stuck transaction, a hung connection)
	// ends the wait as the deadline or --wait-timeout would.
	call := func(fn func(context.Context) error) error {
		now := r.Clock.Now()
		bound, limited := now.Add(callTimeout), false
		if !giveUp.IsZero() && giveUp.Before(bound) {
			bound, limited = giveUp, true
		}
		cctx, cancel := context.WithDeadline(ctx, time.Now().Add(bound.Sub(now)))
		defer cancel()
		err := fn(cctx)
		if err == nil || cctx.Err() == nil || ctx.Err() != nil {
			return err
		}
		switch {
		case limited && byDeadline && holder == nil:
			return &DeadlineError{Key: o.Key}
		case limited:
			return &WaitTimeoutError{Key: o.Key, Record: holder, Waited: r.Clock.Now().Sub(started), Deadline: byDeadline}
		}
		return &ledger.StoreError{Op: "reserve", Path: r.Ledger.Describe(),
			Err:  fmt.Errorf("the ledger did not answer within %s: %w", callTimeout, err),
			Hint: "check that the ledger is reachable, and look for a long transaction holding its rows"}
	}
	poll := 0
	for {
		var resv *ledger.Reservation
		sent := r.Clock.Now()
		err := call(func(cctx context.Context) (err error) {
			resv, err = r.Ledger.Reserve(cctx, req)
			return err
		})
		if err != nil || resv.Outcome != ledger.Busy || !o.Wait {
			return resv, sent, err
		}
		holder = resv.Record
		for {
			now := r.Clock.Now()
			if !giveUp.IsZero() && !now.Before(giveUp) {
				return nil, now, &WaitTimeoutError{Key: o.Key, Record: holder, Waited: now.Sub(started), Deadline: byDeadline}
			}
			poll++
			d := waitPolicy().Delay(poll, r.Rand)
			if !giveUp.IsZero() {
				d = min(d, giveUp.Sub(now))
			}
			o.progress(Event{Kind: EventWait, Attempt: holder.Attempts, MaxAttempts: holder.MaxAttempts,
				Delay: d, Waited: now.Sub(started), Holder: holder.Owner})
			select {
			case <-r.Clock.After(d):
			case s := <-r.Signals:
				return nil, now, &InterruptedError{Key: o.Key, Signal: toSignal(s), Waiting: true}
			case <-ctx.Done():
				return nil, now, ctx.Err()
			}
			var rec *ledger.Record
			err := call(func(cctx context.Context) (err error) {
				rec, err = r.Ledger.Get(cctx, o.Key)
				return err
			})
			if errors.Is(err, ledger.ErrNotFound) {
				break
			}
			if err != nil {
				return nil, now, err
			}
			// The record's times are the ledger's: judged by its clock.
			now = ledger.NowOf(r.Ledger, r.Clock.Now)
			if final(rec, o) && rec.Expired(now) {
				// The outcome waited for has expired already (a very
				// short --ttl): replay it rather than run again.
				return &ledger.Reservation{Outcome: ledger.Replay, Record: rec}, now, nil
			}
			if !rec.Live(now, r.Host.OwnerDead) {
				break
			}
			holder = rec
		}
	}
}

// callTimeout bounds a ledger call made while the run holds no lease and
// has no deadline of its own.
const callTimeout = 30 * time.Second

// final reports whether rec is an outcome this invocation replays: the
// same command, succeeded, or failed for good (unless --rerun-failed).
func final(rec *ledger.Record, o Options) bool {
	return rec.Fingerprint == o.Fingerprint &&
		(rec.Status == ledger.StatusSucceeded || rec.Status == ledger.StatusFailed && !o.RerunFailed)
}

func toSignal(s os.Signal) syscall.Signal {
	if sig, ok := s.(syscall.Signal); ok {
		return sig
	}
	return syscall.SIGTERM
}

// invocation is the state of one Run that owns its key.
type invocation struct {
	r         *Runner
	o         Options
	started   time.Time
	deadline  time.Time
	token     int64
	n         int
	attemptID int64
	res       *Result
	// leaseUntil is when our lease lapses unless renewed.
	leaseUntil time.Time
	// pending is the running attempt's group while the ledger does not know
	// it (SetChild failed with an I/O error: retried with the renewals).
	pending *pendingChild
	// signalled is a signal idem took while stopping an earlier run.
	signalled  syscall.Signal
	retryAfter string // IDEM_RETRY_AFTER file
	// ledgerID is the ledger's identity, part of the run's (procs.Run).
	ledgerID string
	// lock holds the key's run lock (nil: none); every child inherits it.
	lock *os.File
}

// id is the identity of this invocation's attempt n.
func (inv *invocation) id(n int) procs.Run {
	return procs.Run{Ledger: inv.ledgerID, Key: inv.o.Key, Token: inv.token, Attempt: n}
}

// attemptEnd is how one attempt ended.
type attemptEnd struct {
	code       int
	class      string
	signal     syscall.Signal // idem was interrupted
	timedOut   bool           // idem stopped it at --timeout or the deadline
	byDeadline bool           // ... and it was the deadline
	stdout     *capture
	stderr     *capture
	held       *spool // --stdout final
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

func (inv *invocation) run(ctx context.Context, prev *ledger.Snapshot) (*Result, error) {
	r, o := inv.r, inv.o
	if name, err := newRetryAfterFile(); err == nil {
		inv.retryAfter = name
		defer os.Remove(inv.retryAfter)
	}
	defer func() {
		if inv.lock != nil {
			inv.lock.Close() // the run's processes keep holding it
		}
	}()
	var last *attemptEnd // the previous attempt of this invocation
	for {
		if last == nil {
			// Nothing ran yet: an interruption, a passed deadline or a run
			// lock held by processes idem cannot stop gives the key back
			// as it was.
			err := inv.mayStart(ctx)
			if err == nil {
				err = inv.takeLock(ctx)
			}
			if err == nil {
				err = inv.claim(ctx)
			}
			if err == nil {
				probe.At("after-claim")
			}
			var lapsed *LeaseLapsedError
			if errors.Is(err, ledger.ErrLeaseLost) || errors.As(err, &lapsed) {
				return nil, leaseLost(o.Key, false, err)
			}
			if err != nil {
				cctx, cancel := inv.releaseCtx(ctx)
				rerr := r.Ledger.Release(cctx, o.Key, inv.token, inv.attemptID, prev)
				cancel()
				if rerr != nil {
					return nil, leaseLost(o.Key, false, rerr)
				}
				return nil, err
			}
		}
		end, err := inv.attempt(ctx)
		var se *StartError
		if errors.As(err, &se) {
			cctx, cancel := inv.releaseCtx(ctx)
			if last == nil {
				err = r.Ledger.Release(cctx, o.Key, inv.token, inv.attemptID, prev)
			} else {
				// An earlier attempt of this invocation ran: keep it,
				// retryable; the one that never started does not count.
				now := r.Clock.Now()
				kept := &ledger.Snapshot{Status: ledger.StatusRetryable, Attempts: inv.n - 1, MaxAttempts: o.MaxAttempts,
					ExitCode: last.code, HasExit: true, Finished: now}
				if o.TTL > 0 {
					kept.Expires = now.Add(o.TTL)
				}
				err = r.Ledger.Release(cctx, o.Key, inv.token, inv.attemptID, kept)
			}
			cancel()
			if err != nil {
				return nil, leaseLost(o.Key, false, err)
			}
			return nil, se
		}
		if err != nil {
			return nil, err
		}
		last = end
		probe.At("after-child-exit")
		inv.res.Ran++
		inv.res.ExitCode = end.code
		budgetLeft := inv.n < o.MaxAttempts
		switch {
		case end.class == ledger.ClassSuccess:
			return inv.done(ctx, ledger.StatusSucceeded, end)
		case end.class == ledger.ClassPermanent, !budgetLeft:
			return inv.done(ctx, ledger.StatusFailed, end)
		case end.signal != 0, end.byDeadline:
			return inv.done(ctx, ledger.StatusRetryable, end)
		}
		delay := inv.nextDelay()
		if !inv.deadline.IsZero() && r.Clock.Now().Add(delay).After(inv.deadline) {
			// A backoff that would pass the deadline is not started.
			return inv.done(ctx, ledger.StatusRetryable, end)
		}
		cctx, cancel := inv.leaseCtx(ctx)
		err = r.Ledger.EndAttempt(cctx, ledger.AttemptEnd{Key: o.Key, Token: inv.token, AttemptID: inv.attemptID, ExitCode: end.code, Class: end.class, Delay: delay,
			StderrTail: end.stderr.Tail()})
		cancel()
		if err != nil {
			return nil, leaseLost(o.Key, false, err)
		}
		probe.At("after-end-attempt")
		if end.held != nil {
			end.held.emit(o.Stderr) // a failed attempt's stdout goes to stderr
			end.held = nil
		}
		o.progress(Event{Kind: EventBackoff, Attempt: inv.n, MaxAttempts: o.MaxAttempts, ExitCode: end.code, Delay: delay})
		sig, err := inv.sleep(ctx, delay)
		o.progress(Event{Kind: EventResume})
		if err != nil {
			return nil, err
		}
		if sig != 0 {
			inv.res.Signal = sig
			return inv.done(ctx, ledger.StatusRetryable, end)
		}
		if inv.pastDeadline() {
			return inv.done(ctx, ledger.StatusRetryable, end)
		}
		// The attempt that ended may have left processes (a background
		// job, one that left the group): they go before the next starts.
		if _, err := r.stopRun(ctx, inv.id(inv.n+1), nil, o.KillGrace, inv); err != nil {
			return nil, err
		}
		if inv.signalled != 0 {
			inv.res.Signal = inv.signalled
			return inv.done(ctx, ledger.StatusRetryable, end)
		}
		// StartAttempt is the claim: a fenced write just before the child
		// starts.
		before := r.Clock.Now()
		cctx, cancel = inv.leaseCtx(ctx)
		n, id, err := r.Ledger.StartAttempt(cctx, o.Key, inv.token, o.Lease)
		cancel()
		if err != nil {
			return nil, leaseLost(o.Key, false, err)
		}
		inv.n, inv.attemptID = n, id
		inv.leaseUntil = before.Add(o.Lease)
	}
}

// mayStart says why the first attempt must not start: idem was signalled
// (while reserving, or stopping an abandoned group), or the deadline passed.
func (inv *invocation) mayStart(ctx context.Context) error {
	if inv.signalled != 0 {
		return &InterruptedError{Key: inv.o.Key, Signal: inv.signalled}
	}
	select {
	case s := <-inv.r.Signals:
		return &InterruptedError{Key: inv.o.Key, Signal: toSignal(s)}
	default:
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if inv.pastDeadline() {
		return &DeadlineError{Key: inv.o.Key}
	}
	return nil
}

func (inv *invocation) pastDeadline() bool {
	return !inv.deadline.IsZero() && !inv.r.Clock.Now().Before(inv.deadline)
}

// retryAfterMax bounds what idem reads from the IDEM_RETRY_AFTER file.
const retryAfterMax = 256

// nextDelay is the backoff after attempt n, or what the child asked for in
// IDEM_RETRY_AFTER, capped by --max-delay. Unreadable content is ignored
// with a warning.
func (inv *invocation) nextDelay() time.Duration {
	d := inv.o.Backoff.Delay(inv.n, inv.r.Rand)
	if inv.retryAfter == "" {
		return d
	}
	f, err := os.Open(inv.retryAfter)
	if err != nil {
		return d
	}
	b, _ := io.ReadAll(io.LimitReader(f, retryAfterMax+1))
	f.Close()
	if len(b) == 0 {
		return d
	}
	os.Truncate(inv.retryAfter, 0) // one request, one delay
	asked, err := parseRetryAfter(string(b))
	if err != nil || len(b) > retryAfterMax {
		shown := string(b)
		if len(shown) > 40 {
			shown = shown[:40] + "..."
		}
		inv.res.Warnings = append(inv.res.Warnings, fmt.Sprintf(
			"attempt %d wrote %q to IDEM_RETRY_AFTER: not a duration (want e.g. 30s, 1m or a number of seconds); ignored", inv.n, shown))
		return d
	}
	return min(asked, inv.o.Backoff.Max)
}

// parseRetryAfter accepts a duration ("30s", "1m", "1d") or plain,
// possibly fractional, seconds ("30", "1.5").
func parseRetryAfter(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if plainSeconds(s) {
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || f >= math.MaxInt64/float64(time.Second) {
			return 0, fmt.Errorf("%q: out of range", s)
		}
		return time.Duration(f * float64(time.Second)), nil
	}
	return flagval.ParseDuration(s)
}

// plainSeconds reports whether s is digits with at most one '.'.
func plainSeconds(s string) bool {
	digits, dots := 0, 0
	for i := 0; i < len(s); i++ {
		switch {
		case '0' <= s[i] && s[i] <= '9':
			digits++
		case s[i] == '.':
			dots++
		default:
			return false
		}
	}
	return digits > 0 && dots <= 1
}

// done records the outcome and completes the result.
func (inv *invocation) done(ctx context.Context, status ledger.Status, end *attemptEnd) (*Result, error) {
	if end.signal != 0 {
		inv.res.Signal = end.signal
	}
	if status == ledger.StatusRetryable && inv.n >= inv.o.MaxAttempts {
		status = ledger.StatusFailed // the budget wins
	}
	inv.res.TimedOut = end.timedOut
	if err := inv.finish(ctx, status, end.code, end.class, end); err != nil {
		if end.held != nil {
			end.held.discard()
		}
		return nil, leaseLost(inv.o.Key, false, err)
	}
	probe.At("after-finish")
	if end.held != nil {
		end.held.emit(inv.o.Stdout)
	}
	inv.res.Status = status
	inv.res.Source = end.source()
	if inv.res.Signal != 0 {
		inv.res.Source = exitcode.SourceIdem // idem exits 128+N
	}
	inv.res.Attempts = inv.n
	inv.res.Finished = inv.r.Clock.Now()
	return inv.res, nil
}

func (inv *invocation) finish(ctx context.Context, status ledger.Status, code int, class string, end *attemptEnd) error {
	req := ledger.FinishRequest{
		Key: inv.o.Key, Token: inv.token, AttemptID: inv.attemptID, Status: status, ExitCode: code,
		ExitSource: string(end.source()), Class: class, Duration: inv.r.Clock.Now().Sub(inv.started), TTL: inv.o.TTL,
		OutputStored: !inv.o.NoOutput,
	}
	if end != nil && end.stdout != nil {
		req.Stdout, req.StdoutTruncated = end.stdout.buf, end.stdout.truncated
		req.Stderr, req.StderrTruncated = end.stderr.buf, end.stderr.truncated
		req.StderrTail = end.stderr.Tail()
		inv.res.StdoutTruncated, inv.res.StderrTruncated = req.StdoutTruncated, req.StderrTruncated
	}
	// The outcome must be written even when idem is being stopped.
	probe.At("before-finish")
	return inv.writeOutcome(ctx, req)
}

// writeOutcome is the outcome-write policy, the same for every backend: a
// write that fails with a store error (disk full, an I/O error, a lost
// connection, which the next call reconnects) is retried while the lease
// lasts, each try with a deadline inside it. One that cannot land must not leave a wrong final state: the
// reservation is given back as retryable without counting this attempt
// (a smaller write, which may land where the outcome with its output did
// not), so the next run runs the command again: at-least-once. The
// error is then *OutcomeError. ledger.ErrLeaseLost is returned as is.
func (inv *invocation) writeOutcome(ctx context.Context, req ledger.FinishRequest) error {
	r, o := inv.r, inv.o
	// The tries end a tenth of the lease before it lapses, the release
	// after them a tenth later: both before another run can take the key.
	margin := o.Lease / 10
	giveUp := inv.leaseUntil.Add(-2 * margin)
	var err error
	for {
		cctx, cancel := inv.callCtx(ctx, giveUp)
		err = r.Ledger.Finish(cctx, req)
		cancel()
		if err == nil || errors.Is(err, ledger.ErrLeaseLost) || errors.Is(err, ledger.ErrFilesChanged) {
			return err
		}
		retry := renewRetry(o.Lease)
		if !r.Clock.Now().Add(retry).Before(giveUp) {
			break
		}
		<-r.Clock.After(retry)
	}
	oe := &OutcomeError{Key: o.Key, Status: req.Status, ExitCode: req.ExitCode, Err: err}
	now := r.Clock.Now()
	kept := &ledger.Snapshot{Status: ledger.StatusRetryable, Attempts: inv.n - 1, MaxAttempts: o.MaxAttempts, Finished: now}
	cctx, cancel := inv.callCtx(ctx, now.Add(max(inv.leaseUntil.Sub(now)-margin, margin)))
	defer cancel()
	if rerr := r.Ledger.Release(cctx, o.Key, inv.token, inv.attemptID, kept); rerr == nil {
		oe.Released = true
	} else if errors.Is(rerr, ledger.ErrLeaseLost) {
		return rerr
	}
	return oe
}

// releaseCtx is the context of a Release: it returns a tenth of the lease
// before the lease lapses, and has at least that tenth to do so.
func (inv *invocation) releaseCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	now, margin := inv.r.Clock.Now(), inv.o.Lease/10
	return inv.callCtx(ctx, now.Add(max(inv.leaseUntil.Sub(now)-margin, margin)))
}

// leaseCtx is the context of a ledger call while no child runs: it must
// return a tenth of the lease before the lease lapses.
func (inv *invocation) leaseCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return inv.callCtx(ctx, inv.leaseUntil.Add(-inv.o.Lease/10))
}

// OutcomeError is returned when the command ran to its end but its
// outcome could not be recorded within the lease. Released: the key was
// given back as retryable, this attempt not counted; else it stays in
// progress until another run takes it over (the attempt then counts as
// abandoned). Either way the next run executes the command again.
type OutcomeError struct {
	Key      string
	Status   ledger.Status // what was to be recorded
	ExitCode int
	Released bool
	Err      error
}

func (e *OutcomeError) Error() string {
	return fmt.Sprintf("could not record the outcome of key %q (%s, exit %d): %v", e.Key, e.Status, e.ExitCode, e.Err)
}
func (e *OutcomeError) Unwrap() error { return e.Err }

// environ is the child's environment for the current attempt: the run's
// identity (procs.Env, added to the runs the environment already names)
// goes to every process of the run, so that a later run finds them.
func (inv *invocation) environ() []string {
	env := make([]string, 0, len(inv.r.Environ)+6)
	inherited := ""
	for _, kv := range inv.r.Environ {
		switch envName(kv) {
		case "IDEM_KEY", "IDEM_TOKEN", "IDEM_ATTEMPT", "IDEM_MAX_ATTEMPTS", "IDEM_RETRY_AFTER":
			continue
		case procs.Env:
			inherited = kv[len(procs.Env)+1:]
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "IDEM_KEY="+inv.o.Key, "IDEM_TOKEN="+strconv.FormatInt(inv.token, 10),
		"IDEM_ATTEMPT="+strconv.Itoa(inv.n), "IDEM_MAX_ATTEMPTS="+strconv.Itoa(inv.o.MaxAttempts),
		procs.Env+"="+procs.EnvValue(inherited, inv.id(inv.n)))
	if inv.retryAfter != "" {
		env = append(env, "IDEM_RETRY_AFTER="+inv.retryAfter)
	}
	return env
}

func envName(kv string) string {
	for i := 0; i < len(kv); i++ {
		if kv[i] == '=' {
			return kv[:i]
		}
	}
	return kv
}
