package runner

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/backoff"
	"github.com/idemhq/idem/internal/flagval"
	"github.com/idemhq/idem/internal/ledger"
	"github.com/idemhq/idem/internal/ledger/sqlite"
)

// openLedger opens a real SQLite ledger in a temporary directory.
func openLedger(t *testing.T) *sqlite.Ledger {
	t.Helper()
	l, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// faultyLedger is a real ledger whose renewals fail with an I/O error
// while failRenew is set; it remembers the child group it was told about.
type faultyLedger struct {
	ledger.Ledger
	mu        sync.Mutex
	failRenew int // renewals still to fail; < 0: all
	renewals  int // renewals attempted
	okFirst   int // renewals that pass before failRenew applies
	pgid      int
}

var errDisk = &ledger.StoreError{Op: "renew lease", Err: errors.New("I/O error on the ledger's files")}

func (f *faultyLedger) Renew(ctx context.Context, key string, token int64, lease time.Duration) error {
	f.mu.Lock()
	f.renewals++
	fail := f.failRenew != 0 && f.renewals > f.okFirst
	if fail && f.failRenew > 0 {
		f.failRenew--
	}
	f.mu.Unlock()
	if fail {
		return errDisk
	}
	return f.Ledger.Renew(ctx, key, token, lease)
}

func (f *faultyLedger) SetChild(ctx context.Context, key string, token int64, pgid int, start uint64) error {
	f.mu.Lock()
	f.pgid = pgid
	f.mu.Unlock()
	return f.Ledger.SetChild(ctx, key, token, pgid, start)
}

func (f *faultyLedger) childGroup() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pgid
}

func newRunner(l ledger.Ledger, sigs <-chan os.Signal) *Runner {
	return &Runner{Ledger: l, Host: LocalHost(), Clock: SystemClock{}, Rand: rand.New(rand.NewPCG(1, 2)),
		Signals: sigs, Environ: os.Environ()}
}

func options(key string, argv ...string) (Options, *bytes.Buffer, *bytes.Buffer) {
	var stdout, stderr bytes.Buffer
	return Options{
		Key: key, Argv: argv, Fingerprint: "fp:" + key, MaxAttempts: 3,
		Success: flagval.CodesOf(0), Transient: flagval.CodesOf(75),
		Backoff: backoff.Policy{Initial: 10 * time.Millisecond, Multiplier: 2, Max: time.Second},
		Lease:   30 * time.Second, KillGrace: time.Second, MaxOutput: 1 << 20,
		Stdout: &stdout, Stderr: &stderr,
	}, &stdout, &stderr
}

// TestHostLookedUpOnlyToRun: a run that starts its command looks the host
// up once, records it as the owner with its directory and user, and
// gives the command idem's environment; a replay of the key never looks
// it up (it would read /proc for nothing).
func TestHostLookedUpOnlyToRun(t *testing.T) {
	l := openLedger(t)
	// An identity no other source gives: the record shows it came from
	// the lookup.
	host := Host{Name: "lookup-host", BootID: "lookup-boot", PIDNS: 4242, Cwd: "/srv/lookup", User: "lookup-user"}
	lookups := 0
	runner := func() *Runner {
		r := newRunner(l, nil)
		r.Host, r.LookupHost = Host{}, func() Host { lookups++; return host }
		return r
	}
	o, stdout, _ := options("host:lookup", "sh", "-c", `echo "$IDEM_KEY"`)
	res, err := runner().Run(context.Background(), o)
	if err != nil || res.Replayed || stdout.String() != "host:lookup\n" {
		t.Fatalf("first run: %+v, %v, stdout %q; want a run that printed its key", res, err, stdout.String())
	}
	if lookups != 1 {
		t.Errorf("a run looked the host up %d times, want 1", lookups)
	}
	rec, err := l.Get(context.Background(), o.Key)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Owner.Host != host.Name || rec.Owner.BootID != host.BootID || rec.Owner.PIDNS != host.PIDNS ||
		rec.Owner.PID != os.Getpid() || rec.Cwd != host.Cwd || rec.User != host.User {
		t.Errorf("recorded owner %+v, cwd %q, user %q; want the looked-up host %+v and this process", rec.Owner, rec.Cwd, rec.User, host)
	}
	lookups = 0
	o, _, _ = options("host:lookup", "sh", "-c", `echo "$IDEM_KEY"`)
	res, err = runner().Run(context.Background(), o)
	if err != nil || !res.Replayed {
		t.Fatalf("second run: %+v, %v; want a replay", res, err)
	}
	if lookups != 0 {
		t.Errorf("a replay looked the host up %d times, want 0", lookups)
	}
}

// TestRenewalIOErrorRetried: renewals that fail with an I/O error are
// retried; the attempt goes on and is recorded once the ledger recovers.
func TestRenewalIOErrorRetried(t *testing.T) {
	f := &faultyLedger{Ledger: openLedger(t), failRenew: 3}
	o, stdout, _ := options("renew:recovers", "sh", "-c", "sleep 2.5; echo ok")
	o.Lease = 3 * time.Second // renew every 750ms; after a failure retry every 150ms; the watchdog acts at 1.7s
	res, err := newRunner(f, nil).Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != ledger.StatusSucceeded || stdout.String() != "ok\n" {
		t.Errorf("status %s, stdout %q", res.Status, stdout.String())
	}
	if f.renewals <= 3 {
		t.Errorf("%d renewals: the failures were not retried", f.renewals)
	}
}

// TestRenewalIOErrorLapses: when renewals keep failing, idem stops its child
// before the lease lapses and returns *LeaseLapsedError (exit 74); the
// child's group is gone, nothing is recorded, and the key, which the
// ledger still answers for, is given back as retryable, the stopped
// attempt not counted.
func TestRenewalIOErrorLapses(t *testing.T) {
	sq := openLedger(t)
	// The first renewal succeeds (the claim, or, folded into the
	// reservation, the first while the child runs); every one after it
	// fails.
	f := &faultyLedger{Ledger: sq, failRenew: -1, okFirst: 1}
	o, _, _ := options("renew:lapses", "sh", "-c", "sleep 30 & sleep 30")
	o.Lease, o.KillGrace = 600*time.Millisecond, 100*time.Millisecond // a lease CheckLease accepts
	_, err := newRunner(f, nil).Run(context.Background(), o)
	var lapsed *LeaseLapsedError
	if !errors.As(err, &lapsed) || lapsed.Paused || !lapsed.Stopped || !lapsed.Released {
		t.Fatalf("err = %#v, want *LeaseLapsedError, the command stopped and the key released", err)
	}
	if pgid := f.childGroup(); pgid == 0 || LocalHost().groupLive(pgid) {
		t.Errorf("child group %d still runs", pgid)
	}
	rec, err := sq.Get(context.Background(), "renew:lapses")
	if err != nil || rec.Status != ledger.StatusRetryable || rec.Attempts != 0 {
		t.Errorf("record %+v, %v: want the key retryable, no attempt counted", rec, err)
	}
}

// TestLeaseLostStopsChild: another run takes the key over (here it decides
// the owner is dead); the owner's next renewal touches no row: it stops its
// child, writes nothing and returns *LeaseLostError.
func TestLeaseLostStopsChild(t *testing.T) {
	sq := openLedger(t)
	f := &faultyLedger{Ledger: sq}
	o, _, _ := options("lease:lost", "sh", "-c", "sleep 30 & sleep 30")
	o.Lease, o.KillGrace = 300*time.Millisecond, 100*time.Millisecond
	done := make(chan error, 1)
	go func() {
		_, err := newRunner(f, nil).Run(context.Background(), o)
		done <- err
	}()
	for f.childGroup() == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	taker, err := sq.Reserve(context.Background(), ledger.ReserveRequest{Key: o.Key, Fingerprint: o.Fingerprint,
		Command: o.Argv, MaxAttempts: 3, Owner: LocalHost().Self(), Lease: time.Minute,
		OwnerDead: func(ledger.Owner) bool { return true }})
	if err != nil || taker.Outcome != ledger.Reserved {
		t.Fatalf("takeover: %+v, %v", taker, err)
	}
	err = <-done
	var lost *LeaseLostError
	if !errors.As(err, &lost) || !lost.Stopped || !errors.Is(err, ledger.ErrLeaseLost) {
		t.Fatalf("err = %v, want *LeaseLostError with the child stopped", err)
	}
	if LocalHost().groupLive(f.childGroup()) {
		t.Error("the child's group still runs")
	}
	rec, _ := sq.Get(context.Background(), o.Key)
	if rec.Token != taker.Token || rec.Status != ledger.StatusInProgress {
		t.Errorf("record %+v: the old owner wrote over the taker", rec)
	}
}

// holder reserves key as a live owner (this process) and returns its
// reservation.
func holder(t *testing.T, l ledger.Ledger, o Options) *ledger.Reservation {
	t.Helper()
	resv, err := l.Reserve(context.Background(), ledger.ReserveRequest{Key: o.Key, Fingerprint: o.Fingerprint,
		Command: o.Argv, MaxAttempts: o.MaxAttempts, Owner: LocalHost().Self(), Lease: time.Minute,
		OwnerDead: LocalHost().OwnerDead})
	if err != nil || resv.Outcome != ledger.Reserved {
		t.Fatalf("holder: %+v, %v", resv, err)
	}
	return resv
}

func TestWaitTimeout(t *testing.T) {
	l := openLedger(t)
	o, _, _ := options("wait:timeout", "echo", "never")
	h := holder(t, l, o)
	o.Wait, o.WaitTimeout = true, 150*time.Millisecond
	_, err := newRunner(l, nil).Run(context.Background(), o)
	var wt *WaitTimeoutError
	if !errors.As(err, &wt) || wt.Deadline || wt.Record.Token != h.Token {
		t.Fatalf("err = %#v, want *WaitTimeoutError naming the holder", err)
	}
	o.WaitTimeout, o.Deadline = 0, 150*time.Millisecond
	_, err = newRunner(l, nil).Run(context.Background(), o)
	if !errors.As(err, &wt) || !wt.Deadline {
		t.Fatalf("err = %#v, want *WaitTimeoutError for the deadline", err)
	}
	rec, _ := l.Get(context.Background(), o.Key)
	if rec.Token != h.Token || rec.Replays != 0 || rec.Status != ledger.StatusInProgress {
		t.Errorf("waiting touched the record: %+v", rec)
	}
}

// TestWaitReplays: the holder finishes while the waiter polls; the waiter
// replays its result.
func TestWaitReplays(t *testing.T) {
	l := openLedger(t)
	o, stdout, _ := options("wait:replay", "echo", "never")
	h := holder(t, l, o)
	go func() {
		time.Sleep(100 * time.Millisecond)
		l.Finish(context.Background(), ledger.FinishRequest{Key: o.Key, Token: h.Token, AttemptID: h.AttemptID,
			Status: ledger.StatusSucceeded, ExitCode: 0, ExitSource: "child", Class: ledger.ClassSuccess,
			OutputStored: true, Stdout: []byte("from the holder\n")})
	}()
	o.Wait = true
	res, err := newRunner(l, nil).Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Replayed || string(res.Record.Stdout) != "from the holder\n" || stdout.Len() != 0 {
		t.Errorf("result %+v, stdout %q: want a replay of the holder's output", res, stdout.String())
	}
}

// TestWaitTakesRetryable: the holder ends retryable; the waiter takes the
// key and runs the command as attempt 2.
func TestWaitTakesRetryable(t *testing.T) {
	l := openLedger(t)
	o, stdout, _ := options("wait:retryable", "echo", "ran")
	h := holder(t, l, o)
	go func() {
		time.Sleep(100 * time.Millisecond)
		l.Finish(context.Background(), ledger.FinishRequest{Key: o.Key, Token: h.Token, AttemptID: h.AttemptID,
			Status: ledger.StatusRetryable, ExitCode: 143, ExitSource: "child", Class: ledger.ClassInterrupted,
			OutputStored: true})
	}()
	o.Wait = true
	res, err := newRunner(l, nil).Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if res.Replayed || res.Status != ledger.StatusSucceeded || res.Attempts != 2 || stdout.String() != "ran\n" {
		t.Errorf("result %+v, stdout %q: want attempt 2 run and succeeded", res, stdout.String())
	}
}

// TestWaitInterrupted: a signal while waiting returns *InterruptedError and
// leaves the record alone.
func TestWaitInterrupted(t *testing.T) {
	l := openLedger(t)
	o, _, _ := options("wait:signal", "echo", "never")
	h := holder(t, l, o)
	sigs := make(chan os.Signal, 1)
	go func() {
		time.Sleep(100 * time.Millisecond)
		sigs <- syscall.SIGINT
	}()
	o.Wait = true
	_, err := newRunner(l, sigs).Run(context.Background(), o)
	var intr *InterruptedError
	if !errors.As(err, &intr) || intr.Signal != syscall.SIGINT || !intr.Waiting {
		t.Fatalf("err = %v, want *InterruptedError while waiting", err)
	}
	if rec, _ := l.Get(context.Background(), o.Key); rec.Token != h.Token || rec.Replays != 0 {
		t.Errorf("waiting touched the record: %+v", rec)
	}
}

// TestSignalBeforeFirstAttempt: a signal that came while idem reserved the
// key stops it before anything runs; the reservation is released.
func TestSignalBeforeFirstAttempt(t *testing.T) {
	l := openLedger(t)
	dir := t.TempDir()
	o, _, _ := options("signal:early", "touch", filepath.Join(dir, "ran"))
	sigs := make(chan os.Signal, 1)
	sigs <- syscall.SIGTERM
	_, err := newRunner(l, sigs).Run(context.Background(), o)
	var intr *InterruptedError
	if !errors.As(err, &intr) || intr.Signal != syscall.SIGTERM || intr.Waiting {
		t.Fatalf("err = %v, want *InterruptedError", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "ran")); err == nil {
		t.Error("the command ran")
	}
	if _, err := l.Get(context.Background(), o.Key); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("the reservation was kept: %v", err)
	}
}

// TestDeadlineBeforeFirstAttempt: a deadline that passed before the first
// attempt could start runs nothing and releases the reservation.
func TestDeadlineBeforeFirstAttempt(t *testing.T) {
	l := openLedger(t)
	dir := t.TempDir()
	o, _, _ := options("deadline:early", "touch", filepath.Join(dir, "ran"))
	o.Deadline = time.Nanosecond
	_, err := newRunner(l, nil).Run(context.Background(), o)
	var de *DeadlineError
	if !errors.As(err, &de) {
		t.Fatalf("err = %v, want *DeadlineError", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "ran")); err == nil {
		t.Error("the command ran")
	}
	if _, err := l.Get(context.Background(), o.Key); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("the reservation was kept: %v", err)
	}
}

func TestParseRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"30s", 30 * time.Second, true},
		{"1m\n", time.Minute, true},
		{" 45 ", 45 * time.Second, true},
		{"0.5", 500 * time.Millisecond, true},
		{"1d", 24 * time.Hour, true},
		{"0", 0, true},
		{"", 0, false},
		{"-5", 0, false},
		{"-5s", 0, false},
		{"soon", 0, false},
		{"1e3", 0, false},
		{"0x10", 0, false},
		{"NaN", 0, false},
		{"inf", 0, false},
		{"1.2.3", 0, false},
		{"99999999999999999999", 0, false},
	} {
		got, err := parseRetryAfter(tc.in)
		if (err == nil) != tc.ok || tc.ok && got != tc.want {
			t.Errorf("parseRetryAfter(%q) = %v, %v; want %v, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}
