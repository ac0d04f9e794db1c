package runner

import (
	"context"
	"database/sql"
	"errors"

	"github.com/idemhq/idem/internal/ledger"
)

// The stop-and-release path: a lease lost without another run taking the
// key (its renewals failed, or idem was paused past it) ends the
// invocation with *LeaseLapsedError, after the command was stopped, no
// renewal follows, and the key is given back as retryable by a fenced
// write when the ledger answers in time. Another run's token on the key
// ends it with *LeaseLostError instead.

// unansweredHint is what to do about a ledger that did not answer in
// time: true of a file (a transaction holding its lock) and of a server.
const unansweredHint = "check that the ledger is reachable, and look for a long transaction holding its rows"

// plain is err as a user reads it: a call that ran out of time (the
// context's error, or database/sql's about the transaction that the
// deadline rolled back) says that the ledger did not answer in time, in a
// *ledger.StoreError for op, never in the library's words.
func (inv *invocation) plain(op string, err error) error {
	if !unanswered(err) {
		return err
	}
	hint := unansweredHint
	var se *ledger.StoreError
	if errors.As(err, &se) && se.Hint != "" {
		// The backend knows better what holds it up (a PostgreSQL row
		// lock): keep its hint, in the same plain words.
		hint = se.Hint
	}
	return &ledger.StoreError{Op: op, Path: inv.r.Ledger.Describe(), Err: errNoAnswer, Hint: hint}
}

var errNoAnswer = errors.New("did not answer in time")

// tidy is an invocation's error as a user reads it (plain), whatever
// path it came by.
func (inv *invocation) tidy(err error) error {
	var e *LeaseLapsedError
	if errors.As(err, &e) {
		if e.Err != nil {
			e.Err = inv.plain("renew the lease", e.Err)
		}
		return err
	}
	return inv.plain("run", err)
}

// unanswered reports whether err is a call's deadline, in any words.
func unanswered(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || errors.Is(err, sql.ErrTxDone)
}

// retryable is the key's state when it is given back open: attempts
// counted, the last attempt's exit code kept when there is one (nil: none
// to keep).
func (inv *invocation) retryable(attempts int, last *attemptEnd) *ledger.Snapshot {
	now := inv.r.Clock.Now()
	kept := &ledger.Snapshot{Status: ledger.StatusRetryable, Attempts: attempts, MaxAttempts: inv.o.MaxAttempts, Finished: now}
	if last != nil {
		kept.ExitCode, kept.HasExit = last.code, true
		if inv.o.TTL > 0 {
			kept.Expires = now.Add(inv.o.TTL)
		}
	}
	return kept
}

// lapse ends an invocation that err ended: a *LeaseLapsedError gives the
// key back as retryable (attempts counted, last's code kept) and is
// returned with Released set, or *LeaseLostError when the fenced write
// found the key another run's. Any other err is returned as it is.
func (inv *invocation) lapse(ctx context.Context, err error, attempts int, last *attemptEnd) error {
	var e *LeaseLapsedError
	if !errors.As(err, &e) {
		return err
	}
	ok, err := inv.giveBack(ctx, inv.retryable(attempts, last))
	if err != nil {
		return asLeaseLost(err, inv.o.Key, e.Stopped)
	}
	e.Released = ok
	return e
}

// giveBack writes kept, fenced, tried until giveBackEnd; it reports
// whether the write landed, or returns ledger.ErrLeaseLost.
func (inv *invocation) giveBack(ctx context.Context, kept *ledger.Snapshot) (bool, error) {
	r, o := inv.r, inv.o
	end := giveBackEnd(r.Clock.Now(), inv.leaseUntil, o.Lease)
	for {
		cctx, cancel := inv.callCtx(ctx, end)
		err := r.Ledger.Release(cctx, o.Key, inv.token, inv.attemptID, kept)
		cancel()
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, ledger.ErrLeaseLost):
			return false, err
		case !retryFits(r.Clock.Now(), end, o.Lease):
			return false, nil
		}
		<-r.Clock.After(renewRetry(o.Lease))
	}
}

// paused is the lapse of a lease that idem itself let pass (pausedPast),
// nil while the lease still leaves time for a call.
func (inv *invocation) paused() error {
	if pausedPast(inv.r.Clock.Now(), inv.leaseUntil, inv.o.Lease) {
		return &LeaseLapsedError{Paused: true}
	}
	return nil
}
