package runner

import (
	"context"
	"errors"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/idemhq/idem/internal/ledger"
	"github.com/idemhq/idem/internal/probe"
	"github.com/idemhq/idem/internal/runner/procs"
)

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
	retryAfter string // IDEM_RETRY_AFTER file (created by the command, if at all)
	// retryDir is the user's private directory that holds it ("": the
	// file has a directory of its own, made for this run), and retryAsked
	// says the command wrote the file.
	retryDir   string
	retryAsked bool
	// ledgerID is the ledger's identity, part of the run's (procs.Run).
	ledgerID string
	// lock holds the key's run lock (nil: none); every child inherits it.
	lock *os.File
	// lockFile is the run lock file, every attempt's lock is on (nil:
	// none).
	lockFile *procs.LockFile
	// guard is the ledger's run guard (zero: the ledger keeps none).
	guard ledger.RunGuard
}

// id is the identity of this invocation's attempt n.
func (inv *invocation) id(n int) procs.Run {
	return procs.Run{Ledger: inv.ledgerID, Key: inv.o.Key, Token: inv.token, Attempt: n}
}

// run runs the attempts of an invocation that owns its key, from the
// first one's claim to the recorded outcome. prev is the record as it was
// before this run reserved the key (nil: a new key), restored when
// nothing runs.
func (inv *invocation) run(ctx context.Context, prev *ledger.Snapshot) (*Result, error) {
	if name, dir, err := retryAfterPath(inv.r.host().PIDNS); err == nil {
		inv.retryAfter, inv.retryDir = name, dir
		defer inv.removeRetryAfter()
	}
	defer func() {
		if inv.lock != nil {
			inv.lock.Close() // the run's processes keep holding it
		}
		if inv.lockFile != nil {
			inv.lockFile.Close()
		}
	}()
	if err := inv.begin(ctx, prev); err != nil {
		return nil, err
	}
	var last *attemptEnd // the previous attempt of this invocation
	for {
		end, err := inv.attempt(ctx)
		var se *StartError
		if errors.As(err, &se) {
			return nil, inv.notStarted(ctx, se, last, prev)
		}
		if err != nil {
			// Stopped by the watchdog: this attempt does not count.
			return nil, inv.lapse(ctx, err, inv.n-1, last)
		}
		status, final := verdict(end, inv.o, inv.n)
		last = end
		probe.At("after-child-exit")
		inv.res.Ran++
		inv.res.ExitCode = end.code
		if final {
			res, err := inv.done(ctx, status, end)
			return res, inv.ended(end, res, err)
		}
		ok, err := inv.next(ctx, end)
		if err != nil {
			return nil, inv.lapse(ctx, err, inv.n, end)
		}
		if !ok {
			res, err := inv.done(ctx, status, end)
			return res, inv.ended(end, res, err)
		}
	}
}

// begin readies the first attempt: nothing ran yet, so an interruption,
// a passed deadline or a run lock held by processes idem cannot stop gives
// the key back as it was (prev).
func (inv *invocation) begin(ctx context.Context, prev *ledger.Snapshot) error {
	err := inv.mayStart(ctx)
	if err == nil {
		err = inv.takeLock(ctx)
	}
	if err == nil && !inv.claimFolded() {
		err = inv.claim(ctx)
	}
	if err == nil {
		probe.At("after-claim")
		return nil
	}
	return inv.unreserve(ctx, prev, err)
}

// claimFolded reports whether the first attempt's claim is folded into
// the reservation: while less than a renewal period has passed since idem
// asked for it, the reservation's own lease still holds on idem's clock,
// so no other run can have taken the record (a takeover needs the lease
// expired, or idem dead), and the claim's fenced write would only renew a
// lease that is nearly whole. (internal/model checks this fold, and the
// wrong one that trusts the record's lease instead: a taker's is fresh.)
func (inv *invocation) claimFolded() bool {
	reserved := inv.leaseUntil.Add(-inv.o.Lease)
	return inv.r.Clock.Now().Before(reserved.Add(renewEvery(inv.o.Lease)))
}

// unreserve gives the key back as it was (prev) when err keeps the first
// attempt from starting, and returns err (or why the key could not be
// given back).
func (inv *invocation) unreserve(ctx context.Context, prev *ledger.Snapshot, err error) error {
	if errors.Is(err, ledger.ErrLeaseLost) {
		return asLeaseLost(err, inv.o.Key, false)
	}
	var lapsed *LeaseLapsedError
	if errors.As(err, &lapsed) {
		// The lease lapsed before the command started (idem was paused,
		// or the claim could not land): the fenced write still gives the
		// key back as it was, the attempt that never started not
		// counted, unless another run took it meanwhile. Left in
		// progress instead, the key would be taken over later and this
		// attempt counted as abandoned: a key with one attempt would end
		// failed without its command ever running.
		ok, gerr := inv.giveBack(ctx, prev)
		if gerr != nil {
			return asLeaseLost(gerr, inv.o.Key, false)
		}
		lapsed.Released, lapsed.Unstarted = ok, true
		return err
	}
	cctx, cancel := inv.releaseCtx(ctx)
	rerr := inv.r.Ledger.Release(cctx, inv.o.Key, inv.token, inv.attemptID, prev)
	cancel()
	if rerr != nil {
		return asLeaseLost(rerr, inv.o.Key, false)
	}
	return err
}

// notStarted gives the key back when idem could not start the command
// (se): as it was (prev) when nothing ran in this invocation, else
// retryable, keeping the attempt that ran last; the one that never
// started does not count.
func (inv *invocation) notStarted(ctx context.Context, se *StartError, last *attemptEnd, prev *ledger.Snapshot) error {
	r, o := inv.r, inv.o
	cctx, cancel := inv.releaseCtx(ctx)
	defer cancel()
	kept := prev
	if last != nil {
		kept = inv.retryable(inv.n-1, last)
	}
	if err := r.Ledger.Release(cctx, o.Key, inv.token, inv.attemptID, kept); err != nil {
		return asLeaseLost(err, o.Key, false)
	}
	return se
}

// next readies the attempt after end, a transient failure: it records the
// end, backs off, stops what the attempt left and claims the next. False:
// no next attempt starts (a signal, the deadline); the key is to be left
// retryable.
func (inv *invocation) next(ctx context.Context, end *attemptEnd) (bool, error) {
	r, o := inv.r, inv.o
	delay := inv.nextDelay()
	if !inv.deadline.IsZero() && r.Clock.Now().Add(delay).After(inv.deadline) {
		return false, nil // a backoff that would pass the deadline is not started
	}
	if err := inv.paused(); err != nil {
		return false, err
	}
	cctx, cancel := inv.leaseCtx(ctx)
	err := r.Ledger.EndAttempt(cctx, ledger.AttemptEnd{Key: o.Key, Token: inv.token, AttemptID: inv.attemptID,
		ExitCode: end.code, Class: end.class, Delay: delay, StderrTail: end.stderr.Tail()})
	cancel()
	if err != nil {
		return false, asLeaseLost(inv.plain("record the attempt", err), o.Key, false)
	}
	probe.At("after-end-attempt")
	inv.tellEnd(end, ledger.StatusRetryable, delay)
	if end.held != nil {
		if o.StderrFinal {
			end.held.discard()
		} else {
			end.held.emit(o.Stderr) // a failed attempt's stdout goes to stderr
		}
		end.held = nil
	}
	if end.heldErr != nil {
		// Its tail is in the attempt's history (EndAttempt): idem inspect.
		end.heldErr.discard()
		end.heldErr = nil
	}
	o.progress(Event{Kind: EventBackoff, Attempt: inv.n, MaxAttempts: o.MaxAttempts, ExitCode: end.code, Delay: delay})
	sig, err := inv.sleep(ctx, delay)
	o.progress(Event{Kind: EventResume})
	if err != nil {
		return false, err
	}
	if sig != 0 {
		inv.res.Signal = sig
		return false, nil
	}
	if inv.pastDeadline() {
		return false, nil
	}
	// The attempt that ended may have left processes (a background job,
	// one that left the group): they go before the next starts.
	if _, err := r.stopRun(ctx, scan{before: inv.id(inv.n + 1), secret: inv.guard.Secret}, o.KillGrace, inv); err != nil {
		return false, err
	}
	ok, err := inv.relock(ctx)
	if inv.signalled != 0 {
		inv.res.Signal = inv.signalled
		return false, nil
	}
	if err != nil || !ok {
		return false, err
	}
	if err := inv.paused(); err != nil {
		return false, err
	}
	return true, inv.plain("start the attempt", inv.claimNext(ctx))
}

// tellStart tells Options.Attempted that the current attempt's command
// has started.
func (inv *invocation) tellStart() {
	if inv.o.Attempted != nil {
		inv.o.Attempted(AttemptReport{Key: inv.o.Key, Token: inv.token, Attempt: inv.n, MaxAttempts: inv.o.MaxAttempts})
	}
}

// tellEnd tells Options.Attempted that the current attempt ended as end,
// recorded with the key left status; delay is the backoff before the
// next attempt (0: none).
func (inv *invocation) tellEnd(end *attemptEnd, status ledger.Status, delay time.Duration) {
	if inv.o.Attempted == nil || end.told {
		return
	}
	end.told = true
	r := AttemptReport{Key: inv.o.Key, Token: inv.token, Attempt: inv.n, MaxAttempts: inv.o.MaxAttempts, Ended: true,
		ExitCode: end.code, Class: end.class, Status: status, Delay: delay, Signal: end.signal, TimedOut: end.timedOut}
	if end.stdout != nil {
		r.Stdout, r.StdoutCut = end.stdout.buf, end.stdout.truncated
		r.Stderr = end.stderr.buf
		if end.stderr.truncated {
			r.Stderr = end.stderr.Tail()
		}
	}
	inv.o.Attempted(r)
}

// ended tells Options.Attempted of end, which done recorded (res, err),
// unless it failed, and returns err.
func (inv *invocation) ended(end *attemptEnd, res *Result, err error) error {
	if err == nil {
		inv.tellEnd(end, res.Status, 0)
	}
	return err
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

// sleep waits d between attempts, renewing the lease. It returns the signal
// that cut it short, if any.
func (inv *invocation) sleep(ctx context.Context, d time.Duration) (syscall.Signal, error) {
	r := inv.r
	wake := r.Clock.After(d)
	renew := r.Clock.After(renewEvery(inv.o.Lease))
	for {
		select {
		case <-wake:
			select { // a signal at the same moment wins: no new attempt
			case s := <-r.Signals:
				return toSignal(s), nil
			default:
				return 0, nil
			}
		case s := <-r.Signals:
			return toSignal(s), nil
		case <-ctx.Done():
			return syscall.SIGTERM, nil
		case <-renew:
			next, err := inv.keepLease(ctx)
			if err != nil {
				return 0, asLeaseLost(err, inv.o.Key, false)
			}
			renew = r.Clock.After(next)
		}
	}
}

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
		procs.Env+"="+procs.EnvValue(inherited, inv.id(inv.n).Sign(inv.guard.Secret)))
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
