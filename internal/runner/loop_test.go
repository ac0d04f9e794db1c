package runner

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/backoff"
	"github.com/idemhq/idem/internal/flagval"
	"github.com/idemhq/idem/internal/ledger"
	"github.com/idemhq/idem/internal/ledger/sqlite"
)

// loopClock is a fake clock for the attempt loop: a wait that ends before
// the horizon passes at once and moves the clock by its length, so backoff
// sleeps are instant and recorded. A wait that would end at or after the
// horizon never fires: lease renewals (an hour-long lease renews every 10
// minutes, at the default horizon of 10 minutes), and the stop at a
// --deadline when a test moves the horizon to it, so that an attempt is
// never cut short by a clock that does not really pass.
type loopClock struct {
	mu      sync.Mutex
	now     time.Time
	horizon time.Time
	slept   []time.Duration
}

func newLoopClock() *loopClock {
	c := &loopClock{now: time.Date(2026, 12, 2, 3, 17, 0, 0, time.UTC)}
	c.limit(10 * time.Minute)
	return c
}

// limit sets the horizon d from now.
func (c *loopClock) limit(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.horizon = c.now.Add(d)
}

func (c *loopClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *loopClock) After(d time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.now.Add(d).Before(c.horizon) {
		return ch
	}
	c.now = c.now.Add(d)
	c.slept = append(c.slept, d)
	ch <- c.now
	return ch
}

func (c *loopClock) sleeps() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.slept)
}

// loopRig is a runner over a real SQLite ledger running real children
// (/bin/sh) in a temporary directory, with the fake clock.
type loopRig struct {
	t      *testing.T
	dir    string
	l      *sqlite.Ledger
	clock  *loopClock
	r      *Runner
	stdout bytes.Buffer
	stderr bytes.Buffer
}

func newLoopRig(t *testing.T) *loopRig {
	t.Helper()
	dir := t.TempDir()
	l, err := sqlite.Open(context.Background(), filepath.Join(dir, "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	g := &loopRig{t: t, dir: dir, l: l, clock: newLoopClock()}
	g.r = &Runner{Ledger: l, Host: LocalHost(), Clock: g.clock, Rand: rand.New(rand.NewPCG(1, 2)),
		Environ: append(os.Environ(), "IDEM_KEY=from-outside", "LOOP_TEST=inherited")}
	return g
}

// options runs script with sh in the rig's directory; the script can keep
// state in files there. The fingerprint is the key's, whatever the script.
func (g *loopRig) options(key, script string) Options {
	return Options{
		Key: key, Argv: []string{"/bin/sh", "-c", "cd " + g.dir + " && " + script}, Fingerprint: "fp:" + key,
		MaxAttempts: 3, Success: flagval.CodesOf(0), Transient: flagval.CodesOf(75),
		Backoff: backoff.Policy{Initial: time.Second, Multiplier: 2, Max: 30 * time.Second},
		Lease:   time.Hour, KillGrace: time.Second, MaxOutput: 1 << 20,
		Stdout: &g.stdout, Stderr: &g.stderr,
	}
}

func (g *loopRig) run(o Options) *Result {
	g.t.Helper()
	g.stdout.Reset()
	g.stderr.Reset()
	res, err := g.r.Run(context.Background(), o)
	if err != nil {
		g.t.Fatalf("Run(%s): %v", o.Key, err)
	}
	return res
}

func (g *loopRig) calls() string {
	b, _ := os.ReadFile(filepath.Join(g.dir, "calls"))
	return strings.TrimSpace(string(b))
}

func (g *loopRig) history(key string) string {
	g.t.Helper()
	h, err := g.l.History(context.Background(), key)
	if err != nil {
		g.t.Fatal(err)
	}
	var parts []string
	for _, a := range h {
		parts = append(parts, a.Class+"/"+a.Delay.String())
	}
	return strings.Join(parts, " ")
}

// count appends one line per execution to calls and prints the attempt.
const count = `echo x >> calls; echo "attempt $IDEM_ATTEMPT"; n=$(wc -l < calls); `

func TestLoopTransientThenSuccess(t *testing.T) {
	g := newLoopRig(t)
	o := g.options("loop:transient", count+`[ "$n" -ge 3 ] || exit 75`)
	res := g.run(o)
	if res.Status != ledger.StatusSucceeded || res.ExitCode != 0 || res.Attempts != 3 || res.Ran != 3 || res.Replayed {
		t.Fatalf("result %+v", res)
	}
	if got, want := g.clock.sleeps(), []time.Duration{time.Second, 2 * time.Second}; !slices.Equal(got, want) {
		t.Errorf("slept %v, want %v (initial 1s, multiplier 2, no jitter)", got, want)
	}
	if got, want := g.history(o.Key), "transient/1s transient/2s success/0s"; got != want {
		t.Errorf("history %q, want %q", got, want)
	}
	if got := g.stdout.String(); got != "attempt 1\nattempt 2\nattempt 3\n" {
		t.Errorf("live stdout %q: every attempt streams", got)
	}
	rec, err := g.l.Get(context.Background(), o.Key)
	if err != nil {
		t.Fatal(err)
	}
	if string(rec.Stdout) != "attempt 3\n" {
		t.Errorf("recorded stdout %q, want the last attempt's", rec.Stdout)
	}
	// A repeat replays and runs nothing.
	res = g.run(o)
	if !res.Replayed || res.ExitCode != 0 || string(res.Record.Stdout) != "attempt 3\n" || g.calls() != "x\nx\nx" {
		t.Errorf("repeat: %+v, calls %q", res, g.calls())
	}
}

func TestLoopJitterDrawsFromRand(t *testing.T) {
	g := newLoopRig(t)
	o := g.options("loop:jitter", count+`[ "$n" -ge 3 ] || exit 75`)
	o.Backoff.Jitter = 0.5
	g.run(o)
	r := rand.New(rand.NewPCG(1, 2))
	want := []time.Duration{o.Backoff.Delay(1, r), o.Backoff.Delay(2, r)}
	if got := g.clock.sleeps(); !slices.Equal(got, want) {
		t.Errorf("slept %v, want %v (the schedule drawn from the runner's Rand)", got, want)
	}
}

func TestLoopPermanentNotRetried(t *testing.T) {
	g := newLoopRig(t)
	o := g.options("loop:permanent", count+`echo oops >&2; exit 3`)
	res := g.run(o)
	if res.Status != ledger.StatusFailed || res.ExitCode != 3 || res.Attempts != 1 {
		t.Fatalf("result %+v", res)
	}
	if len(g.clock.sleeps()) != 0 || g.calls() != "x" {
		t.Errorf("slept %v, calls %q: a permanent failure is not retried", g.clock.sleeps(), g.calls())
	}
	res = g.run(o)
	if !res.Replayed || res.ExitCode != 3 || string(res.Record.Stderr) != "oops\n" || g.calls() != "x" {
		t.Errorf("repeat: %+v", res)
	}
}

func TestLoopBudgetWins(t *testing.T) {
	g := newLoopRig(t)
	o := g.options("loop:budget", count+`exit 75`)
	res := g.run(o)
	if res.Status != ledger.StatusFailed || res.ExitCode != 75 || res.Attempts != 3 || res.Ran != 3 {
		t.Fatalf("result %+v", res)
	}
	if got, want := g.clock.sleeps(), []time.Duration{time.Second, 2 * time.Second}; !slices.Equal(got, want) {
		t.Errorf("slept %v, want %v: no backoff after the last attempt", got, want)
	}
	o.MaxAttempts = 10
	if res := g.run(o); !res.Replayed || res.Status != ledger.StatusFailed || g.calls() != "x\nx\nx" {
		t.Errorf("a raised budget reopened a final record: %+v", res)
	}
}

// TestLoopDeadlineLeavesRetryable: a backoff that would pass the deadline
// is not started; the key stays retryable and the next invocation goes on
// counting.
func TestLoopDeadlineLeavesRetryable(t *testing.T) {
	g := newLoopRig(t)
	o := g.options("loop:deadline", count+`exit 75`)
	o.MaxAttempts, o.Deadline = 10, 5*time.Second
	g.clock.limit(o.Deadline)
	res := g.run(o)
	// 1s and 2s fit in 5s; the third backoff (4s) would not.
	if res.Status != ledger.StatusRetryable || res.ExitCode != 75 || res.Attempts != 3 {
		t.Fatalf("result %+v", res)
	}
	if got, want := g.clock.sleeps(), []time.Duration{time.Second, 2 * time.Second}; !slices.Equal(got, want) {
		t.Errorf("slept %v, want %v", got, want)
	}
	o.MaxAttempts, o.Deadline = 4, 0
	g.clock.limit(10 * time.Minute)
	res = g.run(o)
	if res.Replayed || res.Attempts != 4 || res.Status != ledger.StatusFailed || !strings.HasSuffix(g.stdout.String(), "attempt 4\n") {
		t.Errorf("next invocation: %+v, stdout %q; want attempt 4, the last of the budget, failed", res, g.stdout.String())
	}
}

func TestLoopRetryAfter(t *testing.T) {
	g := newLoopRig(t)
	script := count + `case $n in
		1) echo 7s > "$IDEM_RETRY_AFTER"; exit 75;;
		2) echo 90 > "$IDEM_RETRY_AFTER"; exit 75;;
		3) echo soon > "$IDEM_RETRY_AFTER"; exit 75;;
		4) exit 75;;
	esac`
	o := g.options("loop:retry-after", script)
	o.MaxAttempts = 5
	res := g.run(o)
	if res.Status != ledger.StatusSucceeded || res.Attempts != 5 {
		t.Fatalf("result %+v", res)
	}
	// 7s as asked; 90s capped by --max-delay; garbage ignored (backoff
	// 1s*2^2); nothing asked (backoff 1s*2^3).
	want := []time.Duration{7 * time.Second, 30 * time.Second, 4 * time.Second, 8 * time.Second}
	if got := g.clock.sleeps(); !slices.Equal(got, want) {
		t.Errorf("slept %v, want %v", got, want)
	}
}

func TestLoopEnvironment(t *testing.T) {
	g := newLoopRig(t)
	// IDEM_RETRY_AFTER names a file the command may create by writing it.
	o := g.options("loop:environment", `echo "$IDEM_KEY $IDEM_ATTEMPT $IDEM_MAX_ATTEMPTS $LOOP_TEST"; test -e "$IDEM_RETRY_AFTER" || echo path; echo 1s > "$IDEM_RETRY_AFTER" && echo writable`)
	o.MaxAttempts = 7
	g.run(o)
	if got, want := g.stdout.String(), "loop:environment 1 7 inherited\npath\nwritable\n"; got != want {
		t.Errorf("child saw %q, want %q", got, want)
	}
}

func TestLoopStartErrorKeepsNothing(t *testing.T) {
	g := newLoopRig(t)
	notExec := filepath.Join(g.dir, "not-executable")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\necho ran\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		argv []string
		code int
	}{
		{[]string{filepath.Join(g.dir, "missing")}, 127},
		{[]string{"idem-no-such-command-on-path"}, 127},
		{[]string{notExec}, 126},
		{[]string{g.dir}, 126},
	} {
		o := g.options("loop:start-error", "")
		o.Argv = tc.argv
		_, err := g.r.Run(context.Background(), o)
		var se *StartError
		if !errors.As(err, &se) || se.Code != tc.code {
			t.Errorf("Run(%q) error %v, want *StartError %d", tc.argv, err, tc.code)
		}
		if _, err := g.l.Get(context.Background(), o.Key); !errors.Is(err, ledger.ErrNotFound) {
			t.Errorf("Run(%q) kept a record: %v", tc.argv, err)
		}
	}
}

// TestLoopStartErrorRestoresRetryable: a continuing key whose command
// cannot be started goes back to its previous state, uncounted.
func TestLoopStartErrorRestoresRetryable(t *testing.T) {
	g := newLoopRig(t)
	o := g.options("loop:start-error-continue", count+`exit 75`)
	o.Deadline = 500 * time.Millisecond // no room for a backoff: retryable after attempt 1
	g.clock.limit(o.Deadline)
	if res := g.run(o); res.Status != ledger.StatusRetryable || res.Attempts != 1 {
		t.Fatalf("first run %+v", res)
	}
	missing := o
	missing.Argv = []string{filepath.Join(g.dir, "gone")}
	for range 2 {
		_, err := g.r.Run(context.Background(), missing)
		var se *StartError
		if !errors.As(err, &se) || se.Code != 127 {
			t.Fatalf("error %v, want *StartError 127", err)
		}
		rec, err := g.l.Get(context.Background(), o.Key)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Status != ledger.StatusRetryable || rec.Attempts != 1 || rec.ExitCode != 75 {
			t.Errorf("after a start error: %s, %d attempts, exit %d; want retryable after 1 attempt, exit 75",
				rec.Status, rec.Attempts, rec.ExitCode)
		}
		if got := g.history(o.Key); got != "transient/0s" {
			t.Errorf("history %q, want only the attempt that ran", got)
		}
	}
	o.Deadline = 0
	g.clock.limit(10 * time.Minute)
	res := g.run(o)
	if !strings.HasPrefix(g.stdout.String(), "attempt 2\n") || res.Attempts != 3 {
		t.Errorf("next run: stdout %q, %+v; want attempts 2 and 3", g.stdout.String(), res)
	}
}

func TestLoopSpooledStdinAndFinalStdout(t *testing.T) {
	g := newLoopRig(t)
	o := g.options("loop:spool", count+`cat; [ "$n" -ge 3 ] || exit 75`)
	o.SpooledStdin = []byte("same bytes\n")
	o.StdoutMode = StdoutFinal
	res := g.run(o)
	if res.Status != ledger.StatusSucceeded {
		t.Fatalf("result %+v", res)
	}
	if got := g.stdout.String(); got != "attempt 3\nsame bytes\n" {
		t.Errorf("stdout %q, want only the recorded attempt's", got)
	}
	if got := g.stderr.String(); got != "attempt 1\nsame bytes\nattempt 2\nsame bytes\n" {
		t.Errorf("stderr %q, want the failed attempts' stdout", got)
	}
}

func TestLoopOutputBoundsAndClosedStdout(t *testing.T) {
	g := newLoopRig(t)
	o := g.options("loop:closed", `i=0; while [ $i -lt 2000 ]; do echo "line $i"; i=$((i+1)); done; echo err >&2`)
	o.Stdout = &failingWriter{}
	o.MaxOutput = 100
	res := g.run(o)
	if res.Status != ledger.StatusSucceeded || !res.StdoutTruncated || res.StderrTruncated {
		t.Fatalf("result %+v", res)
	}
	rec, err := g.l.Get(context.Background(), o.Key)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Stdout) != 100 || !strings.HasPrefix(string(rec.Stdout), "line 0\nline 1\n") || !rec.StdoutTruncated {
		t.Errorf("recorded %d bytes of stdout, truncated %v", len(rec.Stdout), rec.StdoutTruncated)
	}
	if string(rec.Stderr) != "err\n" || rec.StderrTruncated {
		t.Errorf("recorded stderr %q truncated %v", rec.Stderr, rec.StderrTruncated)
	}

	o = g.options("loop:no-output", `echo secret`)
	o.NoOutput = true
	g.run(o)
	rec, err = g.l.Get(context.Background(), o.Key)
	if err != nil {
		t.Fatal(err)
	}
	if rec.OutputStored || len(rec.Stdout) != 0 || g.stdout.String() != "secret\n" {
		t.Errorf("--no-output: stored %v %q, streamed %q", rec.OutputStored, rec.Stdout, g.stdout.String())
	}
}

func TestLoopBusyAndMismatch(t *testing.T) {
	g := newLoopRig(t)
	o := g.options("loop:busy", "exit 0")
	other := ledger.Owner{Host: "elsewhere", BootID: "other-boot", PID: 1}
	if _, err := g.l.Reserve(context.Background(), ledger.ReserveRequest{Key: o.Key, Fingerprint: o.Fingerprint,
		Command: o.Argv, MaxAttempts: 3, Owner: other, Lease: time.Hour}); err != nil {
		t.Fatal(err)
	}
	_, err := g.r.Run(context.Background(), o)
	var busy *BusyError
	if !errors.As(err, &busy) || busy.Record.Owner.Host != "elsewhere" {
		t.Errorf("error %v, want *BusyError naming the holder", err)
	}
	o.Fingerprint = "fp:another"
	_, err = g.r.Run(context.Background(), o)
	var mm *ledger.MismatchError
	if !errors.As(err, &mm) {
		t.Errorf("error %v, want *ledger.MismatchError", err)
	}
}

// TestLoopStartErrorOnLaterAttempt: the command vanishes between attempts
// of one invocation. The attempt that ran is kept (retryable, its exit code);
// the one that never started is not counted.
func TestLoopStartErrorOnLaterAttempt(t *testing.T) {
	g := newLoopRig(t)
	script := filepath.Join(g.dir, "vanishing.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho \"attempt $IDEM_ATTEMPT\"\nrm \"$0\"\nexit 75\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	o := g.options("loop:vanishing", "")
	o.Argv = []string{script}
	_, err := g.r.Run(context.Background(), o)
	var se *StartError
	if !errors.As(err, &se) || se.Code != 127 {
		t.Fatalf("error %v, want *StartError 127", err)
	}
	if g.stdout.String() != "attempt 1\n" {
		t.Errorf("stdout %q", g.stdout.String())
	}
	rec, err := g.l.Get(context.Background(), o.Key)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Status != ledger.StatusRetryable || rec.Attempts != 1 || rec.ExitCode != 75 {
		t.Errorf("record %s, %d attempts, exit %d; want retryable after 1 attempt, exit 75", rec.Status, rec.Attempts, rec.ExitCode)
	}
	if got := g.history(o.Key); got != "transient/1s" {
		t.Errorf("history %q, want only the attempt that ran", got)
	}
	// The command is back: the next invocation is attempt 2.
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho \"attempt $IDEM_ATTEMPT\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if res := g.run(o); res.Status != ledger.StatusSucceeded || g.stdout.String() != "attempt 2\n" {
		t.Errorf("next run %+v, stdout %q", res, g.stdout.String())
	}
}

// slowReserve is the rig's ledger with a Reserve after which the clock
// moves on by advance (idem paused between its reservation and its
// claim), and, when steal, another run takes the key over meanwhile (it
// found the lease expired). It counts the Renew calls.
type slowReserve struct {
	*sqlite.Ledger
	clock   *loopClock
	advance time.Duration
	steal   bool
	renews  int
}

func (s *slowReserve) Reserve(ctx context.Context, req ledger.ReserveRequest) (*ledger.Reservation, error) {
	res, err := s.Ledger.Reserve(ctx, req)
	if err != nil || res.Outcome != ledger.Reserved {
		return res, err
	}
	s.clock.mu.Lock()
	s.clock.now = s.clock.now.Add(s.advance)
	s.clock.mu.Unlock()
	if s.steal {
		taker := req
		taker.Owner.PID++
		taker.OwnerDead = func(ledger.Owner) bool { return true }
		if _, err := s.Ledger.Reserve(ctx, taker); err != nil {
			return nil, err
		}
	}
	return res, nil
}

func (s *slowReserve) Renew(ctx context.Context, key string, token int64, lease time.Duration) error {
	s.renews++
	return s.Ledger.Renew(ctx, key, token, lease)
}

// TestClaimFoldedOnlyWhileFresh: the first attempt's claim is folded into
// the reservation while less than a renewal period has passed since it
// (no Renew before the child starts); an invocation that was held up
// longer claims, and finding the key taken over starts nothing.
func TestClaimFoldedOnlyWhileFresh(t *testing.T) {
	g := newLoopRig(t)
	fresh := &slowReserve{Ledger: g.l, clock: g.clock}
	g.r.Ledger = fresh
	g.run(g.options("claim:fresh", `echo ran >> calls`))
	if fresh.renews != 0 || g.calls() != "ran" {
		t.Errorf("a fresh reservation: %d renewals before the child, calls %q; want none and one run", fresh.renews, g.calls())
	}

	slow := &slowReserve{Ledger: g.l, clock: g.clock, advance: 20 * time.Minute, steal: true}
	g.r.Ledger = slow
	_, err := g.r.Run(context.Background(), g.options("claim:slow", `echo slow >> calls`))
	var lost *LeaseLostError
	if !errors.As(err, &lost) {
		t.Fatalf("a reservation taken over while idem was held up: err %v, want *LeaseLostError", err)
	}
	if slow.renews != 1 || strings.Contains(g.calls(), "slow") {
		t.Errorf("%d renewals (want the claim), calls %q: the command must not start", slow.renews, g.calls())
	}
}
