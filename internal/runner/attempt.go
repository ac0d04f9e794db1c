package runner

import (
	"bytes"
	"context"
	"errors"
	"io"
	"syscall"
	"time"

	"github.com/idemhq/idem/internal/ledger"
)

// attempt runs the command once and classifies its end. While it runs, the
// lease is renewed, signals are forwarded to the child's group, and a
// timeout or the deadline stops it (SIGTERM, then SIGKILL after the grace).
func (inv *invocation) attempt(ctx context.Context) (*attemptEnd, error) {
	r, o := inv.r, inv.o
	end := &attemptEnd{}
	var stdout, stderr io.Writer
	if !o.NoOutput {
		end.stdout, end.stderr = newCapture(o.MaxOutput), newCapture(o.MaxOutput)
	}
	live := o.Stdout
	if o.StdoutMode == StdoutFinal {
		end.held = &spool{}
		live = end.held
	}
	stdout = &tee{live: live, capture: end.stdout}
	stderr = &tee{live: o.Stderr, capture: end.stderr}
	spec := childSpec{argv: o.Argv, env: inv.environ(), stdout: stdout, stderr: stderr, tty: -1}
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
	testOnlyCrash("after-child-start")
	exited := make(chan int, 1)
	go func() { exited <- c.wait() }()

	start, _, _ := r.Host.procStat(c.pgid)
	if err := r.Ledger.SetChild(ctx, o.Key, inv.token, c.pgid, start); err != nil {
		return nil, inv.abort(c, exited, err)
	}
	testOnlyCrash("after-set-child")

	var (
		stopAt   <-chan time.Time // timeout or deadline
		killAt   <-chan time.Time // end of the grace
		stopping bool
	)
	limit := o.Timeout
	if !inv.deadline.IsZero() {
		if left := inv.deadline.Sub(r.Clock.Now()); limit == 0 || left < limit {
			limit = max(left, 0)
		}
	}
	if limit > 0 || !inv.deadline.IsZero() {
		stopAt = r.Clock.After(limit)
	}
	renew := r.Clock.After(o.Lease / 3)
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
			end.code = code
			inv.classify(end, c)
			return end, nil
		case s := <-r.Signals:
			sig, _ := s.(syscall.Signal)
			if end.signal != 0 {
				c.signal(syscall.SIGKILL) // a second signal: at once
				continue
			}
			end.signal = sig
			stop(sig)
		case <-cancelled:
			cancelled = nil
			if end.signal == 0 {
				end.signal = syscall.SIGTERM
				stop(syscall.SIGTERM)
			}
		case <-stopAt:
			stopAt = nil
			end.timedOut = true
			stop(syscall.SIGTERM)
		case <-killAt:
			killAt = nil
			c.signal(syscall.SIGKILL)
		case <-renew:
			renew = r.Clock.After(o.Lease / 3)
			if err := inv.renew(ctx); err != nil {
				return nil, inv.abort(c, exited, err)
			}
		}
	}
}

// classify sets the attempt's class from its code and how it was stopped.
func (inv *invocation) classify(end *attemptEnd, c *child) {
	o := inv.o
	switch {
	case o.Success.Contains(end.code):
		// A success during the grace still happened: record it.
		end.class, end.signal, end.timedOut = ledger.ClassSuccess, 0, false
	case end.signal != 0:
		end.class = ledger.ClassInterrupted
		end.timedOut = false
	case end.timedOut:
		end.code, end.class = 124, ledger.ClassTimeout
	case c.tty >= 0 && (end.code == 128+int(syscall.SIGINT) || end.code == 128+int(syscall.SIGQUIT)):
		// Ctrl-C on the terminal reached only the child's foreground group.
		end.signal, end.class = syscall.Signal(end.code-128), ledger.ClassInterrupted
	case o.Transient.Contains(end.code):
		end.class = ledger.ClassTransient
	default:
		end.class = ledger.ClassPermanent
	}
}

// renew extends the lease. An I/O error is tolerated until the lease would
// lapse; a lost lease is final.
func (inv *invocation) renew(ctx context.Context) error {
	err := inv.r.Ledger.Renew(ctx, inv.o.Key, inv.token, inv.o.Lease)
	now := inv.r.Clock.Now()
	switch {
	case err == nil:
		inv.leaseUntil = now.Add(inv.o.Lease)
		return nil
	case errors.Is(err, ledger.ErrLeaseLost):
		return err
	case !now.Add(inv.o.Lease / 3).Before(inv.leaseUntil):
		return &LeaseLapsedError{Err: err}
	}
	return nil
}

// abort stops the child's group at once and waits for it, after idem lost
// the right to record its result.
func (inv *invocation) abort(c *child, exited <-chan int, err error) error {
	c.signal(syscall.SIGKILL)
	<-exited
	return err
}

// sleep waits d between attempts, renewing the lease. It returns the signal
// that cut it short, if any.
func (inv *invocation) sleep(ctx context.Context, d time.Duration) (syscall.Signal, error) {
	r := inv.r
	wake := r.Clock.After(d)
	for {
		renew := r.Clock.After(inv.o.Lease / 3)
		select {
		case <-wake:
			return 0, nil
		case s := <-r.Signals:
			sig, _ := s.(syscall.Signal)
			return sig, nil
		case <-ctx.Done():
			return syscall.SIGTERM, nil
		case <-renew:
			if err := inv.renew(ctx); err != nil {
				return 0, err
			}
		}
	}
}

// stopGroup stops an abandoned owner's child group on this host and waits
// until it is gone, so that two executions never overlap.
func (r *Runner) stopGroup(ctx context.Context, o ledger.Owner, grace time.Duration) {
	if !r.Host.groupAlive(o) {
		return
	}
	syscall.Kill(-o.ChildPGID, syscall.SIGTERM)
	kill := r.Clock.After(grace)
	for syscall.Kill(-o.ChildPGID, 0) == nil {
		select {
		case <-kill:
			syscall.Kill(-o.ChildPGID, syscall.SIGKILL)
		case <-r.Clock.After(5 * time.Millisecond):
		case <-ctx.Done():
			syscall.Kill(-o.ChildPGID, syscall.SIGKILL)
		}
	}
}
