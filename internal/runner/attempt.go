package runner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/idemhq/idem/internal/exitcode"
	"github.com/idemhq/idem/internal/ledger"
	"github.com/idemhq/idem/internal/probe"
	"github.com/idemhq/idem/internal/runner/procs"
)

// groupPoll is how often idem looks whether a process group it stopped is
// gone (the kernel tells a parent when its child exits, not when a group
// empties).
const groupPoll = 10 * time.Millisecond

// attempt runs the command once and classifies its end. While it runs, the
// lease is renewed, signals are forwarded to the child's group, and a
// timeout or the deadline stops it (SIGTERM, then SIGKILL after the grace).
// Once idem has begun to stop the group, the attempt ends only when every
// member is gone, not just the leader.
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
	spec := childSpec{argv: o.Argv, env: inv.environ(), tty: -1, lock: inv.lock,
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

	// The group is recorded for operators with the first renewal (the
	// claim just renewed the lease; nothing depends on this write).
	st, _ := r.Host.stat(c.pgid)
	defer func() { inv.pending = nil }()

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
	// A command that runs for more than idleAfter gives its server
	// connection back, here and after every renewal: a fleet's long jobs
	// do not use up the server's connections (a short command keeps it,
	// and records its outcome without connecting again).
	var idle <-chan time.Time
	if _, ok := r.Ledger.(ledger.Idler); ok {
		idle = r.Clock.After(idleAfter)
	}
	inv.pending = &pendingChild{pgid: c.pgid, start: st.start}
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
		} else if c := now.Add(renewCall(o.Lease)); c.Before(until) {
			until = c // a hung call gives way to a retry
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
			// Forwarded, every time, never escalated (stopSignal).
			if end.signal == 0 {
				end.signal = toSignal(s)
			}
			stop(toSignal(s))
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
		case <-idle:
			idle = nil
			inv.idle()
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
			inv.idle() // past idleAfter, or about to be
		case <-watchdog:
			watchdog = nil
			// Why the renewals failed until now, even when another one is
			// under way: a lost connection says more than a timeout.
			lapsed = failed
			if lapsed == nil {
				lapsed = fmt.Errorf("the ledger (%s) did not answer in time", r.Ledger.Describe())
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

// idleAfter is how long a command runs before idem gives back its
// ledger's idle server connections (ledger.Idler).
const idleAfter = time.Second

// idle gives back the ledger's idle server connections, if it has any.
func (inv *invocation) idle() {
	if l, ok := inv.r.Ledger.(ledger.Idler); ok {
		l.Idle()
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
// failed before) and returns when to renew next; the call's deadline is renewCtx's. An I/O error is retried sooner;
// when the next retry could not come before the lease lapses it gives up
// with *LeaseLapsedError. A fenced write that matched no row returns
// ledger.ErrLeaseLost.
func (inv *invocation) keepLease(ctx context.Context) (time.Duration, error) {
	cctx, cancel := inv.renewCtx(ctx)
	defer cancel()
	return inv.applyRenewal(inv.renewLease(cctx, inv.pending))
}

// renewCtx is the context of one renewal while no child runs: it returns
// a tenth of the lease before the lease lapses, or after renewCall if
// that is sooner (a hung call gives way to a retry).
func (inv *invocation) renewCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	until := inv.leaseUntil.Add(-inv.o.Lease / 10)
	if c := inv.r.Clock.Now().Add(renewCall(inv.o.Lease)); c.Before(until) {
		until = c
	}
	return inv.callCtx(ctx, until)
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

// stopSignal is the one signal policy for stopping processes, idem's own
// run's and an earlier run's alike: SIGTERM until the kill grace since the
// first signal has passed, SIGKILL after it. Signals to idem meanwhile are
// passed on as they are, again and again, and never shorten the grace:
// whoever wants the processes dead at once sends SIGKILL.
func stopSignal(first, now time.Time, grace time.Duration) syscall.Signal {
	if now.Sub(first) >= grace {
		return syscall.SIGKILL
	}
	return syscall.SIGTERM
}

// stopRun stops, on this host, every process of a run of the key that is
// before (procs.Run.Before: an earlier invocation, or this one's earlier
// attempt) and the abandoned owner's idem (ab, when it ran in this PID
// namespace), and returns once none is left, with how many it found: each
// gets SIGTERM (and SIGCONT, so that a stopped one can act on it) when
// first seen and SIGKILL once it has had the kill grace (stopSignal); the
// scan is repeated until it finds nothing. inv, when the caller owns the
// key, keeps its lease meanwhile, and a signal to idem is kept in
// inv.signalled (the next attempt does not start). Nothing is written to
// the ledger: a taker that dies here forgets nothing, the next scans again.
func (r *Runner) stopRun(ctx context.Context, before procs.Run, ab *ledger.Owner, grace time.Duration, inv *invocation) (int, error) {
	finder := r.Procs
	if finder == nil {
		finder = pidOnly{r.Host}
	}
	var idem *procs.Process
	if ab != nil && r.Host.BootID != "" && ab.BootID == r.Host.BootID {
		// The abandoned idem, in this PID namespace or one below it.
		if p, ok := finder.Owner(ab.PIDNS, ab.PID, ab.StartTime); ok {
			idem = &p
		}
	}
	if r.Procs == nil && idem == nil {
		return 0, nil
	}
	seen := map[procs.Process]time.Time{}
	var renew <-chan time.Time
	if inv != nil {
		renew = r.Clock.After(renewEvery(inv.o.Lease))
	}
	var interrupted syscall.Signal
	for empty := 0; ; {
		found, _ := finder.Find(before)
		if idem != nil && finder.Alive(*idem) {
			found = append(found, *idem)
		}
		// A scan reads the process list first: a process forked meanwhile
		// by one that then exited is in neither. Only a second empty scan,
		// a poll later, says that none is left.
		if len(found) == 0 {
			if empty++; empty == 2 || len(seen) == 0 {
				break
			}
		} else {
			empty = 0
		}
		now := r.Clock.Now()
		for _, p := range found {
			p.Run = procs.Run{}
			first, ok := seen[p]
			if !ok {
				seen[p], first = now, now
			}
			finder.Signal(p, stopSignal(first, now, grace))
			finder.Signal(p, syscall.SIGCONT)
		}
		select {
		case <-r.Clock.After(groupPoll):
		case s := <-r.Signals:
			if interrupted == 0 {
				interrupted = toSignal(s)
			}
		case <-renew:
			next, err := inv.keepLease(ctx)
			if err != nil {
				return len(seen), leaseLost(inv.o.Key, false, err)
			}
			renew = r.Clock.After(next)
		}
	}
	if interrupted != 0 {
		if inv == nil {
			return len(seen), &InterruptedError{Key: before.Key, Signal: interrupted}
		}
		if inv.signalled == 0 {
			inv.signalled = interrupted
		}
	}
	return len(seen), nil
}

// pidOnly is the Finder without Procs: it finds nothing by identity, and
// checks and signals a pid by its start time.
type pidOnly struct{ h Host }

func (pidOnly) Find(procs.Run) ([]procs.Process, error) { return nil, nil }
func (f pidOnly) Alive(p procs.Process) bool {
	st, err := f.h.stat(p.PID)
	return err == nil && !st.gone() && st.start == p.Start
}
func (f pidOnly) Owner(pidns uint64, pid int, start uint64) (procs.Process, bool) {
	p := procs.Process{PID: pid, Start: start}
	return p, pidns == f.h.PIDNS && f.Alive(p)
}
func (f pidOnly) Signal(p procs.Process, sig syscall.Signal) bool {
	return f.Alive(p) && syscall.Kill(p.PID, sig) == nil
}

// HeldError is returned when the key's run lock is held by processes that
// idem cannot see or stop (another PID namespace, such as a container
// sharing the ledger): nothing ran and the reservation was released.
type HeldError struct {
	Key      string
	LockPath string
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("key %q is held by processes of an earlier run that idem cannot see", e.Key)
}

// lockTries bounds how often takeLock stops what it finds and tries again.
const lockTries = 20

// takeLock takes the key's run lock before the first attempt, without
// waiting. Held: the earlier run's processes that the scan finds are
// stopped and the lock tried again; held while the scan finds nothing
// (processes in another PID namespace, or that cleared their
// environment): *HeldError.
func (inv *invocation) takeLock(ctx context.Context) error {
	r := inv.r
	if r.LockPath == "" {
		return nil
	}
	for try := 0; ; try++ {
		f, held, err := procs.Lock(r.LockPath, inv.o.Key)
		if err != nil {
			return &ledger.StoreError{Op: "take the run lock", Path: r.LockPath, Err: err,
				Hint: "check the permissions of the directory beside the ledger"}
		}
		if !held {
			inv.lock = f
			return nil
		}
		n, err := r.stopRun(ctx, inv.id(inv.n), nil, inv.o.KillGrace, inv)
		if err != nil {
			return err
		}
		if inv.signalled != 0 {
			return &InterruptedError{Key: inv.o.Key, Signal: inv.signalled}
		}
		if try >= lockTries || n == 0 && try > 0 {
			return &HeldError{Key: inv.o.Key, LockPath: r.LockPath}
		}
		if n == 0 {
			// The last holder may be exiting: look once more.
			<-r.Clock.After(groupPoll)
		}
	}
}

// claim is the fenced write just before the first child starts (the next
// attempts' claim is StartAttempt): a run that was paused after Reserve
// and was taken over meanwhile starts nothing (ledger.ErrLeaseLost). An
// I/O error is retried like a renewal's, while the lease lasts; then
// *LeaseLapsedError.
func (inv *invocation) claim(ctx context.Context) error {
	r, o := inv.r, inv.o
	for {
		before := r.Clock.Now()
		cctx, cancel := inv.renewCtx(ctx)
		err := r.Ledger.Renew(cctx, o.Key, inv.token, o.Lease)
		cancel()
		switch {
		case err == nil:
			inv.leaseUntil = before.Add(o.Lease)
			return nil
		case errors.Is(err, ledger.ErrLeaseLost):
			return err
		}
		retry := renewRetry(o.Lease)
		if !r.Clock.Now().Add(retry).Before(inv.leaseUntil) {
			return &LeaseLapsedError{Err: err}
		}
		<-r.Clock.After(retry)
	}
}
