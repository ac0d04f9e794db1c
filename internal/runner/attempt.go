package runner

import (
	"bytes"
	"context"
	"errors"
	"syscall"
	"time"

	"github.com/idemhq/idem/internal/exitcode"
	"github.com/idemhq/idem/internal/ledger"
	"github.com/idemhq/idem/internal/probe"
)

// groupPoll is how often idem looks whether a process group it stopped is
// gone (the kernel tells a parent when its child exits, not when a group
// empties).
const groupPoll = 10 * time.Millisecond

// renewEvery is the renewal period of a healthy lease; renewRetry the pace
// of retries after a renewal failed with an I/O error. With the kill grace
// under half the lease, the watchdog (watchdogAt) acts at 0.4 of the
// lease at the earliest: a renewal at a quarter leaves room for retries.
func renewEvery(lease time.Duration) time.Duration { return lease / 4 }
func renewRetry(lease time.Duration) time.Duration { return min(lease/20, 2*time.Second) }

// attempt runs the command once and classifies its end. While it runs, the
// lease is renewed, signals are forwarded to the child's group, and a
// timeout or the deadline stops it (SIGTERM, then SIGKILL after the grace).
// Once idem has begun to stop the group, the attempt ends only when every
// member is gone, not just the leader.
func (inv *invocation) attempt(ctx context.Context) (*attemptEnd, error) {
	r, o := inv.r, inv.o
	end := &attemptEnd{}
	if !o.NoOutput {
		end.stdout, end.stderr = newCapture(o.MaxOutput), newCapture(o.MaxOutput)
	}
	live := o.Stdout
	if o.StdoutMode == StdoutFinal {
		end.held = &spool{}
		live = end.held
	}
	spec := childSpec{argv: o.Argv, env: inv.environ(), tty: -1,
		stdout: &tee{live: live, capture: end.stdout}, stderr: &tee{live: o.Stderr, capture: end.stderr}}
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
	exited := make(chan int, 1)
	go func() { exited <- c.wait() }()

	st, _ := r.Host.stat(c.pgid)
	sctx, cancel := inv.callCtx(ctx, inv.watchdogAt())
	err = r.Ledger.SetChild(sctx, o.Key, inv.token, c.pgid, st.start)
	cancel()
	if err != nil {
		if errors.Is(err, ledger.ErrLeaseLost) {
			inv.abort(c, exited)
			return nil, leaseLost(o.Key, true, err)
		}
		// An I/O error: retried with the renewals, under the same rule.
		inv.pending = &pendingChild{pgid: c.pgid, start: st.start}
	}
	defer func() { inv.pending = nil }()
	probe.At("after-set-child")

	var (
		stopAt   <-chan time.Time // timeout or deadline
		killAt   <-chan time.Time // end of the grace
		poll     <-chan time.Time // the leader is gone; is the group?
		stopping bool
	)
	limit, byDeadline := o.Timeout, false
	if !inv.deadline.IsZero() {
		if left := inv.deadline.Sub(r.Clock.Now()); limit == 0 || left < limit {
			limit, byDeadline = max(left, 0), true
		}
	}
	if limit > 0 || byDeadline {
		stopAt = r.Clock.After(limit)
	}
	renew := r.Clock.After(renewEvery(o.Lease))
	if inv.pending != nil {
		renew = r.Clock.After(renewRetry(o.Lease))
	}
	// The lease watchdog: renewals run off this loop, so that a ledger
	// call that does not return (a held lock, a hung network) cannot keep
	// it from stopping the child in time. Unless a renewal moved the
	// lease on, the child is stopped at watchdogAt, and dead after the
	// grace, before the lease can expire.
	var (
		renewed  = make(chan renewal, 1)
		renewing bool
		lapsed   error // the watchdog acted: why
		failed   error // the last renewal's error, if it failed
	)
	watchdog := r.Clock.After(inv.watchdogAt().Sub(r.Clock.Now()))
	startRenewal := func(until time.Time) {
		if now := r.Clock.Now(); until.Before(now.Add(o.KillGrace)) {
			// Past the watchdog's time (idem itself was paused): the
			// renewal still gets the grace to say whether the lease is
			// lost, while the child is being stopped.
			until = now.Add(o.KillGrace)
		}
		renewing = true
		p := inv.pending
		rctx, cancel := inv.callCtx(ctx, until)
		go func() {
			defer cancel()
			renewed <- inv.renewLease(rctx, p)
		}()
	}
	ended := func() (*attemptEnd, error) {
		if lapsed != nil {
			if renewing {
				// The check after the watchdog acted: did another run
				// take the key meanwhile?
				select {
				case rn := <-renewed:
					if errors.Is(rn.err, ledger.ErrLeaseLost) {
						return nil, leaseLost(o.Key, true, rn.err)
					}
				case <-r.Clock.After(o.KillGrace):
				}
			}
			return nil, &LeaseLapsedError{Err: lapsed}
		}
		if renewing { // let the renewal land: the outcome comes next
			inv.applyRenewal(<-renewed)
		}
		inv.classify(end, c)
		return end, nil
	}
	cancelled := ctx.Done()
	stop := func(sig syscall.Signal) {
		c.signal(sig)
		if !stopping {
			stopping = true
			killAt = r.Clock.After(o.KillGrace)
		}
	}
	for {
		select {
		case code := <-exited:
			exited = nil
			end.code = code
			if !stopping || !r.Host.groupLive(c.pgid) {
				return ended()
			}
			poll = r.Clock.After(groupPoll)
		case <-poll:
			if !r.Host.groupLive(c.pgid) {
				return ended()
			}
			poll = r.Clock.After(groupPoll)
		case s := <-r.Signals:
			if end.signal != 0 {
				c.signal(syscall.SIGKILL) // a second signal: at once
				continue
			}
			end.signal = toSignal(s)
			stop(end.signal)
		case <-cancelled:
			cancelled = nil
			if end.signal == 0 {
				end.signal = syscall.SIGTERM
				stop(syscall.SIGTERM)
			}
		case <-stopAt:
			stopAt = nil
			end.timedOut, end.byDeadline = true, byDeadline
			stop(syscall.SIGTERM)
		case <-killAt:
			killAt = nil
			c.signal(syscall.SIGKILL)
		case <-renew:
			renew = nil
			startRenewal(inv.watchdogAt())
		case rn := <-renewed:
			renewing, failed = false, rn.err
			if lapsed != nil && !errors.Is(rn.err, ledger.ErrLeaseLost) {
				continue // too late: the child is being stopped
			}
			next, err := inv.applyRenewal(rn)
			if errors.Is(err, ledger.ErrLeaseLost) {
				// Another run took the key over (idem was paused past
				// its lease): it may start the command any moment.
				inv.abort(c, exited)
				return nil, leaseLost(o.Key, true, err)
			}
			if err != nil {
				lapsed = rn.err
				watchdog = nil
				stop(syscall.SIGTERM)
				continue
			}
			renew = r.Clock.After(next)
			watchdog = r.Clock.After(inv.watchdogAt().Sub(r.Clock.Now()))
		case <-watchdog:
			watchdog = nil
			lapsed = failed // renewals failed until now
			if renewing || lapsed == nil {
				lapsed = errors.New("the ledger did not answer in time")
			}
			stop(syscall.SIGTERM)
			if !renewing {
				// After a pause of idem itself, the ledger may answer
				// now: a fenced renewal tells whether another run took
				// the key meanwhile (then the child is killed at once).
				startRenewal(r.Clock.Now())
			}
		}
	}
}

// watchdogAt is when the running child must be stopped unless the lease
// is renewed first: early enough that the child is dead (after the kill
// grace, with a tenth of the lease to spare) before the lease can expire.
// Every ledger call while the child runs has it as its deadline.
func (inv *invocation) watchdogAt() time.Time {
	return inv.leaseUntil.Add(-inv.o.KillGrace - inv.o.Lease/10)
}

// callCtx is the context of one ledger call that must return by until (on
// the runner's clock): it outlives ctx's cancellation (a stopping idem
// still holds its lease and records its outcome), not the deadline.
func (inv *invocation) callCtx(ctx context.Context, until time.Time) (context.Context, context.CancelFunc) {
	return context.WithDeadline(context.WithoutCancel(ctx), time.Now().Add(until.Sub(inv.r.Clock.Now())))
}

// renewal is the result of one renewLease.
type renewal struct {
	until   time.Time // the lease's new end, when err is nil
	childOK bool      // the pending group was recorded
	err     error
}

// renewLease renews the lease once (recording the pending child's group
// first, if that failed before). It changes nothing in inv: it runs off
// the attempt's loop, which applies its result (applyRenewal).
func (inv *invocation) renewLease(ctx context.Context, p *pendingChild) renewal {
	r, o := inv.r, inv.o
	before := r.Clock.Now()
	var rn renewal
	if p != nil {
		if rn.err = r.Ledger.SetChild(ctx, o.Key, inv.token, p.pgid, p.start); rn.err == nil {
			rn.childOK = true
		}
	}
	if rn.err == nil {
		rn.err = r.Ledger.Renew(ctx, o.Key, inv.token, o.Lease)
	}
	if rn.err == nil {
		rn.until = before.Add(o.Lease)
	}
	return rn
}

// pendingChild is a started child the ledger does not know yet.
type pendingChild struct {
	pgid  int
	start uint64
}

// classify sets the attempt's class from its code and how it was stopped.
func (inv *invocation) classify(end *attemptEnd, c *child) {
	o := inv.o
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
	case c.tty >= 0 && (end.code == exitcode.Signaled(int(syscall.SIGINT)) || end.code == exitcode.Signaled(int(syscall.SIGQUIT))):
		// Ctrl-C on the terminal reached only the child's foreground group.
		end.signal, end.class = syscall.Signal(end.code-exitcode.Signal), ledger.ClassInterrupted
	case o.Transient.Contains(end.code):
		end.class = ledger.ClassTransient
	default:
		end.class = ledger.ClassPermanent
	}
}

// keepLease renews the lease (recording the child's group first, if that
// failed before) and returns when to renew next; the call's deadline is a
// tenth of the lease before it lapses. An I/O error is retried sooner;
// when the next retry could not come before the lease lapses it gives up
// with *LeaseLapsedError. A fenced write that matched no row returns
// ledger.ErrLeaseLost.
func (inv *invocation) keepLease(ctx context.Context) (time.Duration, error) {
	cctx, cancel := inv.callCtx(ctx, inv.leaseUntil.Add(-inv.o.Lease/10))
	defer cancel()
	return inv.applyRenewal(inv.renewLease(cctx, inv.pending))
}

// applyRenewal takes a renewal's result into inv and returns when to renew
// next, or why not (see keepLease).
func (inv *invocation) applyRenewal(rn renewal) (time.Duration, error) {
	r, o := inv.r, inv.o
	if rn.childOK {
		inv.pending = nil
	}
	switch {
	case rn.err == nil:
		inv.leaseUntil = rn.until
		return renewEvery(o.Lease), nil
	case errors.Is(rn.err, ledger.ErrLeaseLost):
		return 0, rn.err
	}
	retry := renewRetry(o.Lease)
	if !r.Clock.Now().Add(retry).Before(inv.leaseUntil) {
		return 0, &LeaseLapsedError{Err: rn.err}
	}
	return retry, nil
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
	for inv.r.Host.groupLive(c.pgid) {
		select {
		case <-giveUp:
			return // unkillable (uninterruptible sleep): nothing more to do
		case <-inv.r.Clock.After(groupPoll):
			c.signal(syscall.SIGKILL)
		}
	}
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
				return 0, leaseLost(inv.o.Key, false, err)
			}
			renew = r.Clock.After(next)
		}
	}
}

// stopGroup stops an abandoned owner's child group on this host and waits
// until it is gone, so that two executions never overlap: SIGTERM (and
// SIGCONT, so that a stopped member can act on it), SIGKILL after the grace.
// inv, when the caller now owns the key, keeps its lease meanwhile. A first
// signal to idem escalates to SIGKILL at once; a second one gives up: the
// group is then recorded as idem's own child, so that whoever takes the key
// over next stops it, and *InterruptedError is returned.
func (r *Runner) stopGroup(ctx context.Context, key string, o ledger.Owner, grace time.Duration, inv *invocation) error {
	if !r.Host.groupAlive(o) {
		return nil
	}
	pgid := o.ChildPGID
	syscall.Kill(-pgid, syscall.SIGTERM)
	syscall.Kill(-pgid, syscall.SIGCONT)
	kill := r.Clock.After(grace)
	var renew <-chan time.Time
	if inv != nil {
		renew = r.Clock.After(renewEvery(inv.o.Lease))
	}
	var interrupted syscall.Signal
	for r.Host.groupLive(pgid) {
		select {
		case <-kill:
			syscall.Kill(-pgid, syscall.SIGKILL)
			kill = r.Clock.After(grace)
		case s := <-r.Signals:
			if interrupted == 0 {
				interrupted = toSignal(s)
				syscall.Kill(-pgid, syscall.SIGKILL)
				continue
			}
			if inv == nil {
				return &InterruptedError{Key: key, Signal: interrupted}
			}
			wctx := context.WithoutCancel(ctx)
			if err := r.Ledger.SetChild(wctx, key, inv.token, pgid, o.ChildStart); err != nil {
				return leaseLost(key, false, err)
			}
			return &InterruptedError{Key: key, Signal: interrupted}
		case <-r.Clock.After(groupPoll):
		case <-renew:
			next, err := inv.keepLease(ctx)
			if err != nil {
				return leaseLost(inv.o.Key, false, err)
			}
			renew = r.Clock.After(next)
		}
	}
	if interrupted != 0 && inv != nil {
		inv.signalled = interrupted // the first attempt does not start
	}
	return nil
}
