package e2e

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestLeaseWatchdogHeldLock: while a run's command runs, another process
// holds the ledger's write lock (BEGIN IMMEDIATE) from before the first
// renewal is due until idem exits, so no renewal can land. idem stops its
// command (a child and a grandchild that ignores SIGTERM) and has both dead
// before the lease expires, as recorded in the ledger, then exits 74 with
// an idem: line. Lease 10s and kill grace 2s put the stop at 7s and the
// SIGKILL at 9s: a second before the expiry by design.
func TestLeaseWatchdogHeldLock(t *testing.T) {
	timed(t)
	g := newLeaseRig(t)
	marks := g.path("marks")
	p := g.start("run", "--key", "watchdog:held-lock", "--lease", "10s", "--kill-grace", "2s", "--", "crashjob", marks)
	procs := g.waitMarks(marks, 2)

	db := openDB(t, g.ledger)
	defer db.Close()
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// The run recorded its child's group: from here on it only renews.
	for i := 0; ; i++ {
		var pgid int
		if err := conn.QueryRowContext(ctx, `SELECT child_pgid FROM records WHERE key = 'watchdog:held-lock'`).Scan(&pgid); err == nil && pgid != 0 {
			break
		}
		if i == 500 {
			t.Fatal("the run never recorded its child")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		t.Fatal(err)
	}
	held := true
	release := func() {
		if held {
			conn.ExecContext(ctx, `ROLLBACK`)
			held = false
		}
	}
	defer release()

	// Watch the command's processes until both are gone, or until well
	// past the lease (10s from the reservation).
	var dead time.Time
	for limit := time.Now().Add(15 * time.Second); time.Now().Before(limit); time.Sleep(10 * time.Millisecond) {
		if !procs[0].running() && !procs[1].running() {
			dead = time.Now()
			break
		}
	}
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
	}
	release()
	var expiresMS int64
	if err := conn.QueryRowContext(ctx, `SELECT lease_expires_ms FROM records WHERE key = 'watchdog:held-lock'`).Scan(&expiresMS); err != nil {
		t.Fatal(err)
	}
	expiry := time.UnixMilli(expiresMS)
	if dead.IsZero() {
		t.Fatalf("the command still ran 15s after the lock was taken; the lease expired at %s", expiry.Format(time.StampMilli))
	}
	if !dead.Before(expiry) {
		t.Fatalf("the command was dead at %s, after its lease expired at %s", dead.Format(time.StampMilli), expiry.Format(time.StampMilli))
	}
	t.Logf("command dead %s before the lease's expiry", expiry.Sub(dead).Round(time.Millisecond))
	p.wait().expect(74)
	if !strings.Contains(p.stderr, "idem: error: ") {
		t.Errorf("no idem: error line: %v", p)
	}
	var status string
	if err := conn.QueryRowContext(ctx, `SELECT status FROM records WHERE key = 'watchdog:held-lock'`).Scan(&status); err != nil || status != "in_progress" {
		t.Errorf("record %q, %v: want the reservation left in progress (nothing recorded)", status, err)
	}
}
