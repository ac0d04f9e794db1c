package runner

import (
	"context"
	"fmt"
	"time"
)

// The lease arithmetic. A run renews its lease every renewEvery; a renewal
// that fails is retried every renewRetry, each call abandoned after
// renewCall (a hung connection is dropped and the next try connects
// afresh). Unless a renewal lands, the watchdog stops the child at
// watchdogAt: the lease's end less the kill grace and the margin, so that
// the child is dead before the lease can expire on the server. Every
// ledger call made under the lease has its deadline from here.

// Default leases: a ledger on this host's disk knows no network outage,
// and a shorter lease frees the key of a frozen owner sooner; a shared
// ledger must ride out a server restart, a pooler reload or a failover.
const (
	LocalLease       = 30 * time.Second
	SharedLease      = 120 * time.Second
	DefaultKillGrace = 10 * time.Second
)

// DefaultGrace is the kill grace when --kill-grace is not given: at most a
// quarter of the lease, so that it fits any lease.
func DefaultGrace(lease time.Duration) time.Duration { return min(DefaultKillGrace, lease/4) }

// renewEvery is the renewal period of a healthy lease. The worst outage
// begins just before a renewal is due, a whole period after the last one
// landed, so the period comes off the outage a run rides out (Tolerance):
// a sixth of the lease keeps a PostgreSQL ledger's load at one renewal
// per running job every 20s with the default lease.
func renewEvery(lease time.Duration) time.Duration { return lease / 6 }

// renewRetry is the pace of retries after a renewal failed.
func renewRetry(lease time.Duration) time.Duration { return min(lease/20, 2*time.Second) }

// renewCall bounds one renewal call, so that a call stuck on a dead
// connection gives way to a retry on a new one.
func renewCall(lease time.Duration) time.Duration { return min(lease/10, 5*time.Second) }

// margin is the end of the lease kept free: the child is dead, and every
// ledger call made under the lease has returned, a margin before the
// lease can expire, so that no other run can take the key meanwhile.
func margin(lease time.Duration) time.Duration { return lease / 10 }

// watchdogAt is when a running child must be stopped unless the lease,
// which lapses at until, is renewed first: early enough that the child is
// dead after the kill grace, with the margin to spare.
func watchdogAt(until time.Time, lease, grace time.Duration) time.Time {
	return until.Add(-grace - margin(lease))
}

// callsEnd is when a ledger call made while no child runs must have
// returned, the lease lapsing at until.
func callsEnd(until time.Time, lease time.Duration) time.Time { return until.Add(-margin(lease)) }

// renewalEnd is when a renewal that starts at now must have returned: by
// callsEnd, or after renewCall if that is sooner (a hung call gives way
// to a retry).
func renewalEnd(now, until time.Time, lease time.Duration) time.Time {
	return earlier(callsEnd(until, lease), now.Add(renewCall(lease)))
}

// watchedRenewalEnd is when a renewal that starts at now while a child
// runs must have returned: by watchdog (watchdogAt), or after renewCall if
// that is sooner. Past the watchdog's time (idem itself was paused) the
// renewal still gets the kill grace to say whether the lease is lost,
// while the child is being stopped.
func watchedRenewalEnd(now, watchdog time.Time, lease, grace time.Duration) time.Time {
	if watchdog.Before(now.Add(grace)) {
		return now.Add(grace)
	}
	return earlier(watchdog, now.Add(renewCall(lease)))
}

// releaseEnd is when a Release that starts at now must have returned: the
// margin before the lease lapses at until, and at least the margin from
// now.
func releaseEnd(now, until time.Time, lease time.Duration) time.Time {
	return now.Add(max(until.Sub(now)-margin(lease), margin(lease)))
}

// outcomeTriesEnd is when the tries to write an outcome that start at now
// end: a margin before callsEnd, so that the release after them
// (releaseEnd) still comes before another run can take the key; and at
// least renewCall from now, when idem was paused past that (the write is
// fenced: it lands only if no other run took the key meanwhile).
func outcomeTriesEnd(now, until time.Time, lease time.Duration) time.Time {
	return later(until.Add(-2*margin(lease)), now.Add(renewCall(lease)))
}

// giveBackEnd is when the tries to give the key back, starting at now
// after the lease was lost to an outage or a pause, end: at callsEnd, and
// at least renewCall from now. The write is fenced, so it may come after
// the lease lapsed too: it lands only if no other run took the key.
func giveBackEnd(now, until time.Time, lease time.Duration) time.Time {
	return later(callsEnd(until, lease), now.Add(renewCall(lease)))
}

// renewalDue reports whether, of a lease lapsing at until, a renewal was
// due before the watchdog's time: when none was, a watchdog that finds no
// renewal failed does not tell that idem was paused (a kill grace near
// the lease's length).
func renewalDue(until time.Time, lease, grace time.Duration) bool {
	return watchdogAt(until, lease, grace).After(until.Add(renewEvery(lease) - lease))
}

// pausedPast reports whether at now the lease, lapsing at until, has no
// time left for a ledger call although no renewal failed: the renewals
// are paced to land well before that, so idem itself did not run (it was
// stopped, or its host suspended) for longer than the lease allows.
func pausedPast(now, until time.Time, lease time.Duration) bool {
	return !now.Before(callsEnd(until, lease))
}

// retryFits reports whether a retry after a failed renewal (renewRetry),
// waited from now, still comes before by.
func retryFits(now, by time.Time, lease time.Duration) bool {
	return now.Add(renewRetry(lease)).Before(by)
}

func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// Tolerance is the longest ledger outage a run with this lease and kill
// grace rides out without its command being stopped, however the outage
// falls. The watchdog acts at the last landed renewal + lease - margin -
// grace; the worst outage begins just before the next renewal is due
// (renewEvery later), and must end in time for a retry, after a call that
// hung until renewCall and the pause of renewRetry, to land before the
// watchdog acts.
func Tolerance(lease, grace time.Duration) time.Duration {
	return lease - margin(lease) - grace - renewEvery(lease) - renewCall(lease) - renewRetry(lease)
}

// CheckLease refuses a lease and kill grace that leave no margin: the
// command, stopped when the lease cannot be renewed, must be dead (after
// the grace) before the lease expires, with time left for renewals.
func CheckLease(lease, grace time.Duration) error {
	if lease < time.Second {
		return fmt.Errorf("--lease must be at least 1s (got %s)", lease)
	}
	if 2*grace >= lease || Tolerance(lease, grace) <= 0 {
		return fmt.Errorf("--kill-grace %s leaves no margin in --lease %s: a command that must be stopped (its lease cannot be renewed) has to be dead before the lease expires", grace, lease)
	}
	return nil
}

// watchdogAt is when the running child must be stopped unless the lease
// is renewed first (watchdogAt above). Every ledger call while the child
// runs has it as its deadline.
func (inv *invocation) watchdogAt() time.Time {
	return watchdogAt(inv.leaseUntil, inv.o.Lease, inv.o.KillGrace)
}

// callCtx is the context of one ledger call that must return by until (on
// the runner's clock): it outlives ctx's cancellation (a stopping idem
// still holds its lease and records its outcome), not the deadline.
func (inv *invocation) callCtx(ctx context.Context, until time.Time) (context.Context, context.CancelFunc) {
	return context.WithDeadline(context.WithoutCancel(ctx), time.Now().Add(until.Sub(inv.r.Clock.Now())))
}

// leaseCtx is the context of a ledger call while no child runs (callsEnd).
func (inv *invocation) leaseCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return inv.callCtx(ctx, callsEnd(inv.leaseUntil, inv.o.Lease))
}

// renewCtx is the context of one renewal while no child runs (renewalEnd).
func (inv *invocation) renewCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return inv.callCtx(ctx, renewalEnd(inv.r.Clock.Now(), inv.leaseUntil, inv.o.Lease))
}

// releaseCtx is the context of a Release (releaseEnd).
func (inv *invocation) releaseCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return inv.callCtx(ctx, releaseEnd(inv.r.Clock.Now(), inv.leaseUntil, inv.o.Lease))
}
