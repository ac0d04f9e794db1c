package e2e

// The outage a run rides out on PostgreSQL, by the published figure
// (runner.Tolerance, in `idem run --help`): the path to the server freezes
// (a SIGSTOPped proxy) at the worst moment, just before a renewal is due.
// For the figure's length the run rides it out; for longer, the watchdog
// stops the command, which is dead before the lease expires on the server,
// and when the path comes back right after the stop, idem renews no more
// and gives the key back as retryable.

import (
	"context"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/internal/runner"
)

// TestPostgresOutageWorstCase runs the figure at a 10s lease, in every CI
// run.
func TestPostgresOutageWorstCase(t *testing.T) {
	timed(t)
	testOutage(t, 10*time.Second, []string{"--lease", "10s"})
}

// TestPostgresOutageDefaultLease runs the figure at the default
// PostgreSQL lease: about two and a half minutes, so only when
// IDEM_TEST_DEFAULT_LEASE=1 (a CI step of its own).
func TestPostgresOutageDefaultLease(t *testing.T) {
	if os.Getenv("IDEM_TEST_DEFAULT_LEASE") != "1" {
		t.Skip("set IDEM_TEST_DEFAULT_LEASE=1 to run the default lease's outage figure (about 150s)")
	}
	if tol := runner.Tolerance(runner.SharedLease, runner.DefaultGrace(runner.SharedLease)); tol < time.Minute {
		t.Errorf("the default PostgreSQL lease rides out %s, want at least 1m", tol)
	}
	testOutage(t, runner.SharedLease, nil)
}

func testOutage(t *testing.T, lease time.Duration, flags []string) {
	tol := runner.Tolerance(lease, runner.DefaultGrace(lease))
	t.Logf("lease %s: the published figure is %s", lease, tol)
	t.Run("ridden out", func(t *testing.T) {
		t.Parallel()
		o := startOutage(t, lease, flags, "outage:ridden")
		o.freeze(tol)
		o.p.wait().expect(0)
		var status string
		if err := o.db.QueryRow(context.Background(), `SELECT status FROM idem.records WHERE key = $1`, o.key).Scan(&status); err != nil || status != "succeeded" {
			t.Errorf("record %q, %v: want succeeded", status, err)
		}
	})
	t.Run("stopped", func(t *testing.T) {
		t.Parallel()
		o := startOutage(t, lease, flags, "outage:stopped")
		// Past the watchdog by more than a renewal call and a retry: the
		// path comes back right after the stop.
		expires := o.expires
		o.freezeFor(tol+lease/10+time.Second, func() {
			dead := o.waitDead(tol + lease)
			if dead.IsZero() || !dead.Before(expires) {
				t.Errorf("the command was dead at %s; the lease expired on the server at %s",
					dead.Format(time.StampMilli), expires.Format(time.StampMilli))
			}
		})
		o.p.wait().expect(74)
		noLibraryWords(t, o.p)
		if !strings.Contains(o.p.stderr, "the command was stopped") || !strings.Contains(o.p.stderr, "given back as retryable") {
			t.Errorf("stderr does not say the command was stopped and the key given back: %v", o.p)
		}
		var status string
		var attempts int
		if err := o.db.QueryRow(context.Background(), `SELECT status, attempts FROM idem.records WHERE key = $1`, o.key).
			Scan(&status, &attempts); err != nil || status != "retryable" || attempts != 0 {
			t.Errorf("record %q, %d attempts, %v: want retryable, the stopped attempt not counted", status, attempts, err)
		}
	})
}

// outage is one run of a sleeper through a freezable proxy.
type outage struct {
	t       *testing.T
	key     string
	p       *process
	proxy   *process
	db      *pgx.Conn
	child   int
	expires time.Time // the lease's end on the server, as the last renewal before the freeze left it
	due     time.Time // when the next renewal is due
}

// startOutage starts a run of key with the lease, its command sleeping long
// enough to outlast the freeze, and waits until two renewals landed. The
// next is due a sixth of the lease after the last one landed
// (docs/internals.md), which the server stamped at its lease_expires
// minus the lease: idem sends it no sooner (its timer starts when that
// call returns), whatever the time its calls take on a loaded machine.
func startOutage(t *testing.T, lease time.Duration, flags []string, key string) *outage {
	dsn, db := pgDatabase(t)
	dir := t.TempDir()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	o := &outage{t: t, key: key, db: db, proxy: start(t, inherit(nil, "tcpproxy", addr, u.Host))}
	for range 400 {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	via := *u
	via.Host = addr
	ready := filepath.Join(dir, "ready")
	args := append(append([]string{"run", "--key", key}, flags...), "--", "sleeper", (5 * lease / 4).String(), ready)
	c := inherit([]string{"IDEM_LEDGER=" + via.String(), "NO_COLOR=1", "XDG_STATE_HOME=" + filepath.Join(dir, "state")},
		idemBin(t), args...)
	c.dir, c.timeout = dir, 3*lease
	o.p = start(t, c)
	o.child = waitPid(t, ready)
	first := o.nextRenewal(time.Time{}, lease)
	second := o.nextRenewal(first, lease)
	o.expires = second
	o.due = second.Add(-lease).Add(lease / 6)
	return o
}

// nextRenewal waits until the server's lease_expires moves past after
// (zero: the one it shows first, the claim's, is passed over).
func (o *outage) nextRenewal(after time.Time, lease time.Duration) time.Time {
	o.t.Helper()
	ctx := context.Background()
	var first time.Time
	for end := time.Now().Add(lease); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		var exp time.Time
		if err := o.db.QueryRow(ctx, `SELECT lease_expires FROM idem.records WHERE key = $1`, o.key).Scan(&exp); err != nil {
			o.t.Fatal(err)
		}
		switch {
		case after.IsZero() && first.IsZero():
			first = exp
		case after.IsZero() && exp.After(first), !after.IsZero() && exp.After(after):
			return exp
		}
	}
	o.t.Fatalf("no renewal landed within the lease (%s)", lease)
	return time.Time{}
}

// freeze freezes the path just before the next renewal is due, for d.
func (o *outage) freeze(d time.Duration) { o.freezeFor(d, nil) }

// freezeFor freezes the path just before the next renewal is due, calls
// during (when set) while it is frozen, and thaws it d after it froze.
func (o *outage) freezeFor(d time.Duration, during func()) {
	time.Sleep(time.Until(o.due.Add(-100 * time.Millisecond)))
	o.proxy.send(syscall.SIGSTOP)
	thaw := time.Now().Add(d)
	defer func() {
		time.Sleep(time.Until(thaw))
		o.proxy.send(syscall.SIGCONT)
	}()
	if during != nil {
		during()
	}
}

// waitDead waits up to within for the command to be gone and returns
// when it was seen gone (zero: it still runs).
func (o *outage) waitDead(within time.Duration) time.Time {
	for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
		if !alive(o.child) {
			return time.Now()
		}
	}
	return time.Time{}
}
