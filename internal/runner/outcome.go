package runner

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemhq/idem/internal/exitcode"
	"github.com/idemhq/idem/internal/ledger"
	"github.com/idemhq/idem/internal/probe"
)

// done records the outcome (status, from verdict) and completes the
// result.
func (inv *invocation) done(ctx context.Context, status ledger.Status, end *attemptEnd) (*Result, error) {
	if end.signal != 0 {
		inv.res.Signal = end.signal
	}
	inv.res.TimedOut = end.timedOut
	if err := inv.finish(ctx, status, end); err != nil {
		if end.held != nil {
			end.held.discard()
		}
		if end.heldErr != nil {
			end.heldErr.discard()
		}
		return nil, asLeaseLost(err, inv.o.Key, false)
	}
	probe.At("after-finish")
	// In the order a replay writes them: stdout, then stderr.
	if end.held != nil {
		end.held.emit(inv.o.Stdout)
	}
	if end.heldErr != nil {
		end.heldErr.emit(inv.o.Stderr)
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

// finish writes the outcome: status, and the attempt's code, class and
// output.
func (inv *invocation) finish(ctx context.Context, status ledger.Status, end *attemptEnd) error {
	req := ledger.FinishRequest{
		Key: inv.o.Key, Token: inv.token, AttemptID: inv.attemptID, Status: status, ExitCode: end.code,
		ExitSource: string(end.source()), Class: end.class, Duration: inv.r.Clock.Now().Sub(inv.started), TTL: inv.o.TTL,
		OutputStored: !inv.o.NoOutput,
	}
	if end.stdout != nil {
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
// lasts, each try with a deadline inside it. One that cannot land must
// not leave a wrong final state: the reservation is given back as
// retryable without counting this attempt (a smaller write, which may
// land where the outcome with its output did not), so the next run runs
// the command again: at-least-once. The error is then *OutcomeError.
// ledger.ErrLeaseLost is returned as is.
func (inv *invocation) writeOutcome(ctx context.Context, req ledger.FinishRequest) error {
	r, o := inv.r, inv.o
	// The tries end before the release after them must (releaseEnd):
	// both before another run can take the key.
	giveUp := outcomeTriesEnd(r.Clock.Now(), inv.leaseUntil, o.Lease)
	var err error
	for {
		cctx, cancel := inv.callCtx(ctx, giveUp)
		err = r.Ledger.Finish(cctx, req)
		cancel()
		if err == nil || errors.Is(err, ledger.ErrLeaseLost) || errors.Is(err, ledger.ErrFilesChanged) {
			return err
		}
		if !retryFits(r.Clock.Now(), giveUp, o.Lease) {
			break
		}
		<-r.Clock.After(renewRetry(o.Lease))
	}
	oe := &OutcomeError{Key: o.Key, Status: req.Status, ExitCode: req.ExitCode, Err: inv.plain("record the outcome", err)}
	kept := inv.retryable(inv.n-1, nil)
	cctx, cancel := inv.callCtx(ctx, releaseEnd(r.Clock.Now(), inv.leaseUntil, o.Lease))
	defer cancel()
	if rerr := r.Ledger.Release(cctx, o.Key, inv.token, inv.attemptID, kept); rerr == nil {
		oe.Released = true
	} else if errors.Is(rerr, ledger.ErrLeaseLost) {
		return rerr
	}
	return oe
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
