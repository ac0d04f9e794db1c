package runner

import (
	"fmt"
	"time"
)

// The lease arithmetic. A run renews its lease every renewEvery; a renewal
// that fails is retried every renewRetry, each call abandoned after
// renewCall (a hung connection is dropped and the next try connects
// afresh). Unless a renewal lands, the watchdog stops the child at
// watchdogAt: the lease's end less the kill grace and a tenth of the lease,
// so that the child is dead before the lease can expire on the server.

// Default leases: a ledger on this host's disk knows no network outage,
// and a shorter lease frees the key of a frozen owner sooner; a shared
// ledger must ride out a server restart, a pooler reload or a failover.
const (
	LocalLease       = 30 * time.Second
	SharedLease      = 90 * time.Second
	DefaultKillGrace = 10 * time.Second
)

// DefaultGrace is the kill grace when --kill-grace is not given: at most a
// quarter of the lease, so that it fits any lease.
func DefaultGrace(lease time.Duration) time.Duration { return min(DefaultKillGrace, lease/4) }

// renewEvery is the renewal period of a healthy lease. The outage a run
// rides out does not depend on it (the worst outage begins just after a
// renewal); it leaves the first renewal and its retries well before the
// watchdog acts.
func renewEvery(lease time.Duration) time.Duration { return lease / 4 }

// renewRetry is the pace of retries after a renewal failed.
func renewRetry(lease time.Duration) time.Duration { return min(lease/20, 2*time.Second) }

// renewCall bounds one renewal call, so that a call stuck on a dead
// connection gives way to a retry on a new one.
func renewCall(lease time.Duration) time.Duration { return min(lease/10, 5*time.Second) }

// Tolerance is the longest ledger outage a run with this lease and kill
// grace rides out without its command being stopped, however the outage
// falls: one that begins just after a renewal and ends in time for a
// retry (after a call that hung until renewCall) to land before the
// watchdog acts.
func Tolerance(lease, grace time.Duration) time.Duration {
	return lease - lease/10 - grace - renewRetry(lease) - renewCall(lease)
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
