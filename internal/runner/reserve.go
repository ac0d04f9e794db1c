package runner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemhq/idem/internal/backoff"
	"github.com/idemhq/idem/internal/ledger"
)

// callTimeout bounds a ledger call made while the run holds no lease and
// has no deadline of its own.
const callTimeout = 30 * time.Second

// waitPolicy paces --wait's polls (plain reads, no write lock): quick at
// first and growing slowly (most holders finish within a second), then at
// most one read a second per waiter, jittered so that many waiters spread
// out.
func waitPolicy() backoff.Policy {
	return backoff.Policy{Initial: 10 * time.Millisecond, Multiplier: 1.25, Max: time.Second, Jitter: 0.5}
}

// reserve asks the ledger for the key; with --wait it polls, with backoff
// and without writing, while a live owner holds it, and asks again once the
// holder looks done (finished, lease expired, or dead on this host). It
// returns when the last request was sent: the lease runs from then.
func (r *Runner) reserve(ctx context.Context, o Options, started, deadline time.Time) (*ledger.Reservation, time.Time, error) {
	req := ledger.ReserveRequest{
		Key: o.Key, Fingerprint: o.Fingerprint, Command: o.Argv, MaxAttempts: o.MaxAttempts,
		RerunFailed: o.RerunFailed, Lease: o.Lease,
		OwnerDead: func(o ledger.Owner) bool { return r.host().OwnerDead(o) },
		// Looked up only by a reservation that writes them: a replay
		// never does.
		Identify: func() (ledger.Owner, string, string) {
			h := r.host()
			return h.Self(), h.Cwd, h.User
		},
	}
	w := &waiter{r: r, o: o, ctx: ctx, started: started}
	if o.WaitTimeout > 0 {
		w.giveUp = started.Add(o.WaitTimeout)
	}
	if !deadline.IsZero() && (w.giveUp.IsZero() || deadline.Before(w.giveUp)) {
		w.giveUp, w.byDeadline = deadline, true
	}
	for {
		var resv *ledger.Reservation
		sent := r.Clock.Now()
		err := w.call(func(cctx context.Context) (err error) {
			resv, err = r.Ledger.Reserve(cctx, req)
			return err
		})
		if err != nil || resv.Outcome != ledger.Busy || !o.Wait {
			return resv, sent, err
		}
		w.holder = resv.Record
		if resv, at, err := w.await(); resv != nil || err != nil {
			return resv, at, err
		}
	}
}

// waiter is reserve's state while a live owner holds the key.
type waiter struct {
	r       *Runner
	o       Options
	ctx     context.Context
	started time.Time
	// giveUp is the deadline or the end of --wait-timeout, whichever is
	// first (zero: none); byDeadline says it is the deadline.
	giveUp     time.Time
	byDeadline bool
	holder     *ledger.Record // as last seen; nil before the first Busy
	poll       int            // polls so far
}

// call gives a ledger call its deadline: the time to give up, or
// callTimeout, whichever is first. A call that does not answer in time (a
// row lock held by a stuck transaction, a hung connection) ends the wait
// as the deadline or --wait-timeout would.
func (w *waiter) call(fn func(context.Context) error) error {
	r := w.r
	now := r.Clock.Now()
	bound, limited := now.Add(callTimeout), false
	if !w.giveUp.IsZero() && w.giveUp.Before(bound) {
		bound, limited = w.giveUp, true
	}
	cctx, cancel := context.WithDeadline(w.ctx, time.Now().Add(bound.Sub(now)))
	defer cancel()
	err := fn(cctx)
	if err == nil || cctx.Err() == nil || w.ctx.Err() != nil {
		return err
	}
	switch {
	case limited && w.byDeadline && w.holder == nil:
		return &DeadlineError{Key: w.o.Key}
	case limited:
		return &WaitTimeoutError{Key: w.o.Key, Record: w.holder, Waited: r.Clock.Now().Sub(w.started), Deadline: w.byDeadline}
	}
	return &ledger.StoreError{Op: "reserve", Path: r.Ledger.Describe(),
		Err:  fmt.Errorf("the ledger did not answer within %s: %w", callTimeout, err),
		Hint: unansweredHint}
}

// await polls the holder's record until it looks done (nil, nil: reserve
// asks again), the outcome waited for is to be replayed, or the wait ends
// (*WaitTimeoutError, *InterruptedError, a ledger error).
func (w *waiter) await() (*ledger.Reservation, time.Time, error) {
	r, o := w.r, w.o
	for {
		now := r.Clock.Now()
		if !w.giveUp.IsZero() && !now.Before(w.giveUp) {
			return nil, now, &WaitTimeoutError{Key: o.Key, Record: w.holder, Waited: now.Sub(w.started), Deadline: w.byDeadline}
		}
		if err := w.pause(now); err != nil {
			return nil, now, err
		}
		var rec *ledger.Record
		err := w.call(func(cctx context.Context) (err error) {
			rec, err = r.Ledger.Get(cctx, o.Key)
			return err
		})
		if errors.Is(err, ledger.ErrNotFound) {
			return nil, now, nil
		}
		if err != nil {
			return nil, now, err
		}
		// The record's times are the ledger's: judged by its clock.
		now = ledger.NowOf(r.Ledger, r.Clock.Now)
		if final(rec, o) && rec.Expired(now) {
			// The outcome waited for has expired already (a very short
			// --ttl): replay it rather than run again.
			return &ledger.Reservation{Outcome: ledger.Replay, Record: rec}, now, nil
		}
		if !rec.Live(now, r.host().OwnerDead) {
			return nil, now, nil
		}
		w.holder = rec
	}
}

// pause waits the next poll's delay, telling Progress; a signal or ctx
// ends the wait.
func (w *waiter) pause(now time.Time) error {
	r, o := w.r, w.o
	w.poll++
	d := waitPolicy().Delay(w.poll, r.Rand)
	if !w.giveUp.IsZero() {
		d = min(d, w.giveUp.Sub(now))
	}
	o.progress(Event{Kind: EventWait, Attempt: w.holder.Attempts, MaxAttempts: w.holder.MaxAttempts,
		Delay: d, Waited: now.Sub(w.started), Holder: w.holder.Owner})
	select {
	case <-r.Clock.After(d):
		return nil
	case s := <-r.Signals:
		return &InterruptedError{Key: o.Key, Signal: toSignal(s), Waiting: true}
	case <-w.ctx.Done():
		return w.ctx.Err()
	}
}

// final reports whether rec is an outcome this invocation replays: the
// same command, succeeded, or failed for good (unless --rerun-failed).
func final(rec *ledger.Record, o Options) bool {
	return rec.Fingerprint == o.Fingerprint &&
		(rec.Status == ledger.StatusSucceeded || rec.Status == ledger.StatusFailed && !o.RerunFailed)
}
