package runner

import (
	"context"
	"errors"

	"github.com/idemhq/idem/internal/ledger"
)

// claim is the fenced write just before the first child starts (the next
// attempts' claim is claimNext): a run that was paused after Reserve and
// was taken over meanwhile starts nothing (ledger.ErrLeaseLost). An I/O
// error is retried like a renewal's, while the lease lasts; then
// *LeaseLapsedError.
func (inv *invocation) claim(ctx context.Context) error {
	r, o := inv.r, inv.o
	if err := inv.paused(); err != nil {
		// Paused since the reservation, past the time left for a call:
		// the claim could not land in time, and the ledger is not why.
		return err
	}
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
		if !retryFits(r.Clock.Now(), inv.leaseUntil, o.Lease) {
			return &LeaseLapsedError{Err: err}
		}
		<-r.Clock.After(renewRetry(o.Lease))
	}
}

// claimNext is the claim of every attempt after the first: StartAttempt,
// a fenced write just before the child starts, which counts the attempt
// and renews the lease.
func (inv *invocation) claimNext(ctx context.Context) error {
	r, o := inv.r, inv.o
	before := r.Clock.Now()
	cctx, cancel := inv.leaseCtx(ctx)
	n, id, err := r.Ledger.StartAttempt(cctx, o.Key, inv.token, o.Lease)
	cancel()
	if err != nil {
		return asLeaseLost(err, o.Key, false)
	}
	inv.n, inv.attemptID = n, id
	inv.leaseUntil = before.Add(o.Lease)
	return nil
}
