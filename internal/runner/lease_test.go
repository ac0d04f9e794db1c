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

// TestLeaseDeadlines: every deadline of a call made under the lease, for a
// 60s lease (margin 6s, renewCall 5s, renewRetry 2s) and a 10s grace,
// lapsing at 60s.
func TestLeaseDeadlines(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 3, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	const lease, grace = time.Minute, 10 * time.Second
	until := at(lease)
	for _, c := range []struct {
		name      string
		got, want time.Time
	}{
		{"the watchdog: the end less the grace and the margin", watchdogAt(until, lease, grace), at(44 * time.Second)},
		{"a call while no child runs", callsEnd(until, lease), at(54 * time.Second)},
		{"a renewal, bounded by renewCall", renewalEnd(at(0), until, lease), at(5 * time.Second)},
		{"a late renewal, bounded by callsEnd", renewalEnd(at(52*time.Second), until, lease), at(54 * time.Second)},
		{"a renewal under the watchdog, bounded by renewCall", watchedRenewalEnd(at(0), at(44*time.Second), lease, grace), at(5 * time.Second)},
		{"a renewal under the watchdog, bounded by it (a 1s grace)", watchedRenewalEnd(at(41*time.Second), at(44*time.Second), lease, time.Second), at(44 * time.Second)},
		{"a renewal past the watchdog gets the grace", watchedRenewalEnd(at(40*time.Second), at(44*time.Second), lease, grace), at(50 * time.Second)},
		{"a release, the margin before the end", releaseEnd(at(10*time.Second), until, lease), at(54 * time.Second)},
		{"a late release still has the margin", releaseEnd(at(58*time.Second), until, lease), at(64 * time.Second)},
		{"the outcome's tries end a margin before the release's", outcomeTriesEnd(at(10*time.Second), until, lease), at(48 * time.Second)},
		{"the outcome's tries after a pause past the lease still get renewCall", outcomeTriesEnd(at(70*time.Second), until, lease), at(75 * time.Second)},
		{"giving the key back, by the end of the calls", giveBackEnd(at(40*time.Second), until, lease), at(54 * time.Second)},
		{"giving the key back after a pause past the lease still gets renewCall", giveBackEnd(at(70*time.Second), until, lease), at(75 * time.Second)},
	} {
		if !c.got.Equal(c.want) {
			t.Errorf("%s: %s, want %s", c.name, c.got.Sub(t0), c.want.Sub(t0))
		}
	}
	if !retryFits(at(51*time.Second), at(54*time.Second), lease) || retryFits(at(52*time.Second), at(54*time.Second), lease) {
		t.Errorf("retryFits: a retry 2s later fits before a deadline 3s away, not before one 2s away")
	}
}
