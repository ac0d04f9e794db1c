package runner

import (
	"testing"
	"time"
)

// The defaults ride out a ledger outage of at least a minute on PostgreSQL
// (a restart, a pooler reload, a failover), and every lease the command
// line accepts stops the child before its lease can expire.
func TestLeaseArithmetic(t *testing.T) {
	if got := Tolerance(SharedLease, DefaultGrace(SharedLease)); got < time.Minute {
		t.Errorf("the default PostgreSQL lease %s rides out an outage of %s, want at least 1m", SharedLease, got)
	}
	if got := Tolerance(LocalLease, DefaultGrace(LocalLease)); got <= 0 {
		t.Errorf("the default file lease %s rides out an outage of %s, want a positive one", LocalLease, got)
	}
	for _, c := range []struct {
		lease, grace time.Duration
		ok           bool
	}{
		{SharedLease, DefaultGrace(SharedLease), true},
		{LocalLease, DefaultGrace(LocalLease), true},
		{6 * time.Second, DefaultGrace(6 * time.Second), true},
		{time.Second, DefaultGrace(time.Second), true},
		{10 * time.Second, 4900 * time.Millisecond, true},
		{10 * time.Second, 5 * time.Second, false},
		{10 * time.Second, 20 * time.Second, false},
		{999 * time.Millisecond, 0, false},
	} {
		err := CheckLease(c.lease, c.grace)
		if (err == nil) != c.ok {
			t.Errorf("CheckLease(%s, %s) = %v, want ok=%v", c.lease, c.grace, err, c.ok)
		}
		if err != nil {
			continue
		}
		// What CheckLease accepts leaves room: the watchdog acts after
		// the first renewal is due, and the child is dead (after the
		// grace) a tenth of the lease before the lease expires.
		watchdog := c.lease - c.grace - c.lease/10
		if watchdog <= renewEvery(c.lease) || Tolerance(c.lease, c.grace) <= 0 {
			t.Errorf("lease %s, grace %s: watchdog at %s, renewals every %s, tolerance %s",
				c.lease, c.grace, watchdog, renewEvery(c.lease), Tolerance(c.lease, c.grace))
		}
	}
}
