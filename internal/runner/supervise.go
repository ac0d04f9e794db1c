package runner

import (
	"bytes"
	"context"
	"errors"
	"syscall"
	"time"

	"github.com/idemhq/idem/internal/ledger"
	"github.com/idemhq/idem/internal/probe"
)

// groupPoll is how often idem looks whether a process group it stopped is
// gone (the kernel tells a parent when its child exits, not when a group
// empties).
const groupPoll = 10 * time.Millisecond

// idleAfter is how long a command runs before idem gives back its
// ledger's idle server connections (ledger.Idler).
const idleAfter = time.Second

// attempt runs the command once and returns how it ended (unclassified:
// verdict judges it). While it runs, the lease is renewed, signals are
// forwarded to the child's group, and a timeout or the deadline stops it
// (SIGTERM, then SIGKILL after the grace). Once idem has begun to stop the
// group, the attempt ends only when every member is gone, not just the
// leader.
func (inv *invocation) attempt(ctx context.Context) (*attemptEnd, error) {
	r, o := inv.r, inv.o
	end := &attemptEnd{}
	if !o.NoOutput {
		end.stdout, end.stderr = newCapture(o.MaxOutput), newTailCapture(o.MaxOutput)
	}
	live := o.Stdout
	if o.StdoutMode == StdoutFinal {
		end.held = &spool{}
		live = end.held
	}
	liveErr := o.Stderr
	if o.StderrFinal {
		end.heldErr = &spool{}
		liveErr = end.heldErr
	}
	spec := childSpec{argv: o.Argv, env: inv.environ(), tty: -1, lock: inv.lock,
		stdout: &tee{live: live, capture: end.stdout}, stderr: &tee{live: liveErr, capture: end.stderr}}
	if o.SpooledStdin != nil {
		spec.stdin = bytes.NewReader(o.SpooledStdin)
	} else if o.Stdin != nil {
		spec.stdin = o.Stdin
		spec.tty = foregroundTTY(o.Stdin)
	}
	c, err := startChild(spec)
	if err != nil {
		return nil, err
	}
	probe.At("after-child-start")
	inv.tellStart()
	end.tty = c.tty >= 0
	exited := make(chan int, 1)
	go func() { exited <- c.wait() }()

	// The group is recorded for operators with the first renewal (the
	// claim just renewed the lease; nothing depends on this write).
	st, _ := r.host().stat(c.pgid)
	defer func() { inv.pending = nil }()
	s := &supervisor{inv: inv, ctx: ctx, c: c, end: end, exited: exited, cancelled: ctx.Done()}
	s.arm()
	inv.pending = &pendingChild{pgid: c.pgid, start: st.start}
	s.renewed = make(chan renewal, 1)
	s.watchdog = r.Clock.After(inv.watchdogAt().Sub(r.Clock.Now()))
	return s.supervise()
}

// supervisor is one running attempt as idem watches it: the child, the
// timers armed for it (nil: not armed, or fired) and where the renewals
// and the stopping stand. Its loop takes one event at a time and hands it
// to the method named after it; only the loop's goroutine touches it.
//
// The lease watchdog: renewals run off this loop, so that a ledger call
// that does not return (a held lock, a hung network) cannot keep it from
// stopping the child in time. Unless a renewal moved the lease on, the
// child is stopped at watchdogAt, and dead after the grace, before the
// lease can expire.
type supervisor struct {
	inv *invocation
	ctx context.Context
	c   *child
	end *attemptEnd
	// exited delivers the leader's exit code; nil once it was reaped.
	exited    <-chan int
	cancelled <-chan struct{}

	stopAt   <-chan time.Time // timeout or deadline
	killAt   <-chan time.Time // end of the grace
	poll     <-chan time.Time // the leader is gone; is the group?
	renew    <-chan time.Time // the next renewal is due
	idle     <-chan time.Time // the command has run for idleAfter
	watchdog <-chan time.Time // the lease must be renewed by now

	byDeadline bool // stopAt is the deadline, not --timeout
	stopping   bool // idem has signalled the group to stop

	renewed  chan renewal // the renewal (or check) under way lands here
	renewing bool
	lapsed   *LeaseLapsedError // the lease is lost: the attempt's end
	failed   error             // the last renewal's error, if it failed
}

// arm sets the attempt's first timers: its stop at --timeout or the
// deadline, whichever comes first, its first renewal and, for a ledger
// with server connections, the moment to give them back. A command that
// runs for more than idleAfter gives its server connection back, here and
// after every renewal: a fleet's long jobs do not use up the server's
// connections (a short command keeps it, and records its outcome without
// connecting again).
func (s *supervisor) arm() {
	r, o := s.inv.r, s.inv.o
	limit := o.Timeout
	if !s.inv.deadline.IsZero() {
		if left := s.inv.deadline.Sub(r.Clock.Now()); limit == 0 || left < limit {
			limit, s.byDeadline = max(left, 0), true
		}
	}
	if limit > 0 || s.byDeadline {
		s.stopAt = r.Clock.After(limit)
	}
	s.renew = r.Clock.After(renewEvery(o.Lease))
	if _, ok := r.Ledger.(ledger.Idler); ok {
		s.idle = r.Clock.After(idleAfter)
	}
}

// supervise is the attempt's loop: it returns when the attempt is over.
func (s *supervisor) supervise() (*attemptEnd, error) {
	signals := s.inv.r.Signals
	for {
		select {
		case code := <-s.exited:
			if s.childExited(code) {
				return s.ended()
			}
		case <-s.poll:
			if s.groupPolled() {
				return s.ended()
			}
		case sig := <-signals:
			s.signalled(toSignal(sig))
		case <-s.cancelled:
			s.cancel()
		case <-s.stopAt:
			s.timedOut()
		case <-s.killAt:
			s.graceOver()
		case <-s.idle:
			s.idleDue()
		case <-s.renew:
			s.renewDue()
		case rn := <-s.renewed:
			if err := s.renewalLanded(rn); err != nil {
				return nil, err
			}
		case <-s.watchdog:
			s.watchdogFired()
		}
	}
}

// childExited: the leader exited with code. The attempt is over unless
// idem is stopping the group and a member is left: then it polls.
func (s *supervisor) childExited(code int) bool {
	s.exited = nil
	s.end.code = code
	if !s.stopping || !s.inv.r.host().groupLive(s.c.pgid) {
		return true
	}
	s.poll = s.inv.r.Clock.After(groupPoll)
	return false
}

// groupPolled: the attempt is over once the stopped group is gone.
func (s *supervisor) groupPolled() bool {
	if !s.inv.r.host().groupLive(s.c.pgid) {
		return true
	}
	s.poll = s.inv.r.Clock.After(groupPoll)
	return false
}

// signalled: a signal to idem is forwarded, every time, never escalated
// (stopSignal); the first one is the attempt's.
func (s *supervisor) signalled(sig syscall.Signal) {
	if s.end.signal == 0 {
		s.end.signal = sig
	}
	s.stop(sig)
}

// cancel: ctx was cancelled; it stops the child as a SIGTERM would,
// unless a signal already does.
func (s *supervisor) cancel() {
	s.cancelled = nil
	if s.end.signal == 0 {
		s.end.signal = syscall.SIGTERM
		s.stop(syscall.SIGTERM)
	}
}

// timedOut: --timeout or the deadline came.
func (s *supervisor) timedOut() {
	s.stopAt = nil
	s.end.timedOut, s.end.byDeadline = true, s.byDeadline
	s.stop(syscall.SIGTERM)
}

// graceOver: the kill grace since the first stop signal has passed.
func (s *supervisor) graceOver() {
	s.killAt = nil
	s.c.signal(syscall.SIGKILL)
}

// idleDue: the command has run for idleAfter.
func (s *supervisor) idleDue() {
	s.idle = nil
	s.inv.idle()
}

// renewDue: a renewal is due, unless the lease is lost already. Past the
// watchdog's time (idem was paused), the watchdog acts instead.
func (s *supervisor) renewDue() {
	s.renew = nil
	switch {
	case s.lapsed != nil:
	case !s.inv.r.Clock.Now().Before(s.inv.watchdogAt()):
		s.watchdogFired()
	default:
		s.startRenewal(s.inv.watchdogAt())
	}
}

// renewalLanded takes a renewal's result. Lost: another run took the key
// over (idem was paused past its lease) and may start the command any
// moment, so the group is killed at once and *LeaseLostError returned.
// Failed for good: the child is stopped as the watchdog would.
func (s *supervisor) renewalLanded(rn renewal) error {
	s.renewing, s.failed = false, rn.err
	if s.lapsed != nil && !errors.Is(rn.err, ledger.ErrLeaseLost) {
		// Too late: the child is being stopped, and a renewal that
		// landed since is undone when the key is given back.
		return nil
	}
	r := s.inv.r
	next, err := s.inv.applyRenewal(rn)
	if errors.Is(err, ledger.ErrLeaseLost) {
		return asLeaseLost(err, s.inv.o.Key, s.kill())
	}
	if err != nil {
		s.lose(&LeaseLapsedError{Err: rn.err})
		return nil
	}
	s.renew = r.Clock.After(next)
	s.watchdog = r.Clock.After(s.inv.watchdogAt().Sub(r.Clock.Now()))
	s.inv.idle() // past idleAfter, or about to be
	return nil
}

// watchdogFired: no renewal moved the lease on in time; the child is
// stopped.
func (s *supervisor) watchdogFired() {
	s.watchdog = nil
	if s.lapsed != nil {
		return
	}
	// Why the renewals failed until now, even when another one is under
	// way: a lost connection says more than a timeout. None failed and
	// none is under way: idem did not run when they were due (paused).
	inv := s.inv
	e := &LeaseLapsedError{Err: s.failed,
		Paused: s.failed == nil && !s.renewing && renewalDue(inv.leaseUntil, inv.o.Lease, inv.o.KillGrace)}
	if e.Err == nil && !e.Paused {
		e.Err = inv.plain("renew the lease", context.DeadlineExceeded)
	}
	if s.lose(e) && !s.renewing {
		// After a pause of idem itself, the ledger may answer now: a
		// read tells whether another run took the key meanwhile (then
		// the child is killed at once).
		s.startCheck()
	}
}

// lose ends the lease (e) and reports it lost: no renewal and no
// watchdog from here on, and the child is stopped. A command that has
// ended on its own, its whole group gone, is not lost: the attempt ends
// as any other, and its outcome is written while the ledger allows (a
// fenced write).
func (s *supervisor) lose(e *LeaseLapsedError) bool {
	select {
	case code := <-s.exited:
		s.exited, s.end.code = nil, code
		if !s.inv.r.host().groupLive(s.c.pgid) {
			s.poll = s.inv.r.Clock.After(0)
			return false
		}
	default:
	}
	s.lapsed, s.watchdog, s.renew = e, nil, nil
	e.Stopped = true
	s.stop(syscall.SIGTERM)
	if s.exited == nil {
		s.poll = s.inv.r.Clock.After(groupPoll)
	}
	return true
}

// kill kills the child's group at once (abort) and reports whether
// anything of it still ran: a command that had ended on its own was not
// stopped.
func (s *supervisor) kill() bool {
	select {
	case code := <-s.exited:
		s.exited, s.end.code = nil, code
	default:
	}
	ran := s.exited != nil || s.inv.r.host().groupLive(s.c.pgid)
	s.inv.abort(s.c, s.exited)
	return ran
}

// startCheck reads, off the loop and without renewing, whether another
// run holds the key now (a lost lease lands on s.renewed), bounded by
// the kill grace.
func (s *supervisor) startCheck() {
	inv := s.inv
	s.renewing = true
	renewed := s.renewed
	rctx, cancel := inv.callCtx(s.ctx, inv.r.Clock.Now().Add(inv.o.KillGrace))
	go func() {
		defer cancel()
		rec, err := inv.r.Ledger.Get(rctx, inv.o.Key)
		if errors.Is(err, ledger.ErrNotFound) || err == nil && rec.Token != inv.token {
			err = ledger.ErrLeaseLost
		}
		renewed <- renewal{err: err}
	}()
}

// stop signals the group; the first stop starts the kill grace.
func (s *supervisor) stop(sig syscall.Signal) {
	s.c.signal(sig)
	if !s.stopping {
		s.stopping = true
		s.killAt = s.inv.r.Clock.After(s.inv.o.KillGrace)
	}
}

// startRenewal renews the lease off the loop, the call bounded by until
// (watchedRenewalEnd); its result lands on s.renewed.
func (s *supervisor) startRenewal(until time.Time) {
	inv := s.inv
	until = watchedRenewalEnd(inv.r.Clock.Now(), until, inv.o.Lease, inv.o.KillGrace)
	s.renewing = true
	p, renewed := inv.pending, s.renewed
	rctx, cancel := inv.callCtx(s.ctx, until)
	go func() {
		defer cancel()
		renewed <- inv.renewLease(rctx, p)
	}()
}

// ended is the attempt's end once the group is gone: *LeaseLapsedError
// when the watchdog stopped it (*LeaseLostError when the renewal under way
// then says another run took the key), else how it ended, after the
// renewal under way, if any, landed (the outcome comes next).
func (s *supervisor) ended() (*attemptEnd, error) {
	inv := s.inv
	if s.lapsed == nil {
		if s.renewing {
			inv.applyRenewal(<-s.renewed)
		}
		return s.end, nil
	}
	if s.renewing {
		// The check after the watchdog acted: did another run take the
		// key meanwhile?
		select {
		case rn := <-s.renewed:
			if errors.Is(rn.err, ledger.ErrLeaseLost) {
				return nil, asLeaseLost(rn.err, inv.o.Key, s.lapsed.Stopped)
			}
		case <-inv.r.Clock.After(inv.o.KillGrace):
		}
	}
	return nil, s.lapsed
}

// idle gives back the ledger's idle server connections, if it has any.
func (inv *invocation) idle() {
	if l, ok := inv.r.Ledger.(ledger.Idler); ok {
		l.Idle()
	}
}

// abort kills the child's group at once and waits until it is gone, after
// idem lost the right to record its result: another run may be about to
// start the command. exited is nil when the leader was already reaped.
func (inv *invocation) abort(c *child, exited <-chan int) {
	c.signal(syscall.SIGKILL)
	if exited != nil {
		<-exited
	}
	giveUp := inv.r.Clock.After(inv.o.KillGrace)
	for inv.r.host().groupLive(c.pgid) {
		select {
		case <-giveUp:
			return // unkillable (uninterruptible sleep): nothing more to do
		case <-inv.r.Clock.After(groupPoll):
			c.signal(syscall.SIGKILL)
		}
	}
}
