package runner

import (
	"context"
	"errors"
	"time"

	"github.com/idemhq/idem/internal/ledger"
)

// renewal is the result of one renewLease.
type renewal struct {
	until   time.Time // the lease's new end, when err is nil
	childOK bool      // the pending group was recorded
	err     error
}

// pendingChild is a started child the ledger does not know yet.
type pendingChild struct {
	pgid  int
	start uint64
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
	rn.err = inv.plain("renew the lease", rn.err)
	return rn
}

// keepLease renews the lease while no child runs (recording the child's
// group first, if that failed before) and returns when to renew next; the
// call's deadline is renewCtx's. An I/O error is retried sooner; when the
// next retry could not come before the lease lapses it gives up with
// *LeaseLapsedError, as it does at once when idem was paused past the
// time left for the call. A fenced write that matched no row returns
// ledger.ErrLeaseLost.
func (inv *invocation) keepLease(ctx context.Context) (time.Duration, error) {
	if err := inv.paused(); err != nil {
		return 0, err
	}
	cctx, cancel := inv.renewCtx(ctx)
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
	if !retryFits(r.Clock.Now(), inv.leaseUntil, o.Lease) {
		return 0, &LeaseLapsedError{Err: rn.err}
	}
	return renewRetry(o.Lease), nil
}
