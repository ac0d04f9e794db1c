// Package ledgertest is the conformance suite of the ledger contract. Every
// backend runs the same suite from its own tests:
//
//	func TestConformance(t *testing.T) {
//		ledgertest.Run(t, func(t *testing.T, now func() time.Time) ledger.Ledger {
//			l := openEmptyLedger(t) // a fresh, empty store per call
//			l.Now = now
//			return l
//		})
//	}
//
// RunQuery checks the operators' methods and RunReadOnly a read-only open;
// Run includes the check that Reserve does what ledger.Decide says for
// every state and request, so a backend that answers a case in a single
// statement shows there that it keeps the rules.
//
// A ledger is used by one goroutine at a time, as idem does; concurrent
// processes are each backend's own test (they need a second handle on the
// same store). The suite drives time through now: a backend must take every time it
// stores or compares (reservations, leases, outcomes, TTL expiry, replays)
// from it. Times are compared at millisecond precision.
package ledgertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/ledger"
)

// Opener returns a ledger on a fresh, empty store whose clock is now. It
// closes the ledger itself (t.Cleanup).
type Opener func(t *testing.T, now func() time.Time) ledger.Ledger

// Clock is the suite's settable time source.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a clock at a fixed, millisecond-aligned instant.
func NewClock() *Clock {
	return &Clock{t: time.Date(2026, 12, 2, 3, 17, 0, 0, time.UTC)}
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// env is one subtest's ledger and clock.
type env struct {
	t     *testing.T
	l     ledger.Ledger
	clock *Clock
	ctx   context.Context
}

func newEnv(t *testing.T, open Opener) *env {
	t.Helper()
	c := NewClock()
	return &env{t: t, l: open(t, c.Now), clock: c, ctx: context.Background()}
}

// Owners used by the suite: two idem processes on one host, one elsewhere.
var (
	ownerA = ledger.Owner{Host: "host-a", BootID: "boot-a", PIDNS: 4026531836, PID: 311, StartTime: 1000}
	ownerB = ledger.Owner{Host: "host-a", BootID: "boot-a", PIDNS: 4026531836, PID: 422, StartTime: 2000}
)

const (
	fp1   = "fp-1111111111111111111111111111111111111111111111111111111111111111"
	fp2   = "fp-2222222222222222222222222222222222222222222222222222222222222222"
	lease = 30 * time.Second
)

var argv1 = []string{"deploy.sh", "--env", "prod", "two words", ""}

func request(key string, owner ledger.Owner) ledger.ReserveRequest {
	return ledger.ReserveRequest{Key: key, Fingerprint: fp1, Command: argv1, MaxAttempts: 3, Owner: owner, Lease: lease}
}

func (e *env) reserve(req ledger.ReserveRequest) *ledger.Reservation {
	e.t.Helper()
	res, err := e.l.Reserve(e.ctx, req)
	if err != nil {
		e.t.Fatalf("Reserve(%s): %v", req.Key, err)
	}
	if res == nil {
		e.t.Fatalf("Reserve(%s): nil reservation", req.Key)
	}
	return res
}

func (e *env) mustOutcome(res *ledger.Reservation, want ledger.Outcome) {
	e.t.Helper()
	if res.Outcome != want {
		e.t.Fatalf("outcome %s, want %s (record %+v)", outcomeName(res.Outcome), outcomeName(want), res.Record)
	}
}

func outcomeName(o ledger.Outcome) string {
	switch o {
	case ledger.Reserved:
		return "Reserved"
	case ledger.Replay:
		return "Replay"
	case ledger.Busy:
		return "Busy"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// finish records an outcome for the owner of res.
func (e *env) finish(key string, res *ledger.Reservation, status ledger.Status, code int, class string) {
	e.t.Helper()
	err := e.l.Finish(e.ctx, ledger.FinishRequest{Key: key, Token: res.Token, AttemptID: res.AttemptID, Status: status,
		ExitCode: code, ExitSource: "child", Class: class, Duration: time.Second, OutputStored: true,
		Stdout: []byte("out " + key), Stderr: []byte("err " + key)})
	if err != nil {
		e.t.Fatalf("Finish(%s, %s): %v", key, status, err)
	}
}

func (e *env) get(key string) *ledger.Record {
	e.t.Helper()
	rec, err := e.l.Get(e.ctx, key)
	if err != nil {
		e.t.Fatalf("Get(%s): %v", key, err)
	}
	return rec
}

func (e *env) history(key string) []ledger.Attempt {
	e.t.Helper()
	h, err := e.l.History(e.ctx, key)
	if err != nil {
		e.t.Fatalf("History(%s): %v", key, err)
	}
	return h
}

// state is the part of a record the suite expects a refused or fenced call
// to leave alone.
type state struct {
	Status      ledger.Status
	Token       int64
	Attempts    int
	MaxAttempts int
	ExitCode    int
	HasExit     bool
	Replays     int64
	OwnerPID    int
	ChildPGID   int
	LeaseExpiry time.Time
	Finished    time.Time
	Stdout      string
	History     int
}

func (e *env) state(key string) state {
	e.t.Helper()
	r := e.get(key)
	return state{Status: r.Status, Token: r.Token, Attempts: r.Attempts, MaxAttempts: r.MaxAttempts,
		ExitCode: r.ExitCode, HasExit: r.HasExit, Replays: r.Replays, OwnerPID: r.Owner.PID, ChildPGID: r.Owner.ChildPGID,
		LeaseExpiry: r.LeaseExpiry.UTC(), Finished: r.Finished.UTC(), Stdout: string(r.Stdout), History: len(e.history(key))}
}

func sameTime(a, b time.Time) bool {
	if a.IsZero() || b.IsZero() {
		return a.IsZero() == b.IsZero()
	}
	return a.UnixMilli() == b.UnixMilli()
}

func (e *env) checkTime(what string, got, want time.Time) {
	e.t.Helper()
	if !sameTime(got, want) {
		e.t.Errorf("%s = %v, want %v", what, got.UTC(), want.UTC())
	}
}

// Run runs the conformance suite against the backend open returns.
func Run(t *testing.T, open Opener) {
	tests := []struct {
		name string
		fn   func(*env)
	}{
		{"ReserveNew", testReserveNew},
		{"IdentifiedOnlyWhenWritten", testIdentify},
		{"GetUnknown", testGetUnknown},
		{"BusyWhileLeaseLive", testBusy},
		{"MismatchInEveryState", nil}, // table below, one store per state
		{"ReplaySucceeded", testReplaySucceeded},
		{"ReplayFailedRaisedBudgetStaysFinal", testReplayFailed},
		{"RerunFailedFreshBudget", testRerunFailed},
		{"RetryableContinues", testRetryableContinues},
		{"BudgetSpentAcrossInvocations", testBudgetSpent},
		{"LoweredBudgetMakesRetryableFinal", testLoweredBudget},
		{"ExpiredTTLCountsAsAbsent", testExpiredTTL},
		{"TakeoverExpiredLease", testTakeoverExpired},
		{"TakeoverOwnerDead", testTakeoverOwnerDead},
		{"TakeoverOfLastAttemptIsFinal", testTakeoverBudgetSpent},
		{"FencingStaleToken", testFencing},
		{"ReleaseNewDeletes", testReleaseNew},
		{"ReleaseRestoresPrevious", testReleaseRestores},
		{"FinishStoresOutcome", testFinishOutcome},
		{"AttemptLoopWrites", testAttemptLoop},
		{"TokensStrictlyGrow", testTokensGrow},
		{"ReserveAgreesWithDecide", testAgreesWithDecide},
	}
	for _, tt := range tests {
		if tt.fn == nil {
			t.Run(tt.name, func(t *testing.T) { testMismatch(t, open) })
			continue
		}
		t.Run(tt.name, func(t *testing.T) { tt.fn(newEnv(t, open)) })
	}
}

func testReserveNew(e *env) {
	t := e.t
	start := e.clock.Now()
	res := e.reserve(request("evt:new-key:1", ownerA))
	e.mustOutcome(res, ledger.Reserved)
	if res.Token <= 0 || res.Attempt != 1 || res.AttemptID == 0 || res.Prev != nil || res.Abandoned != nil {
		t.Fatalf("reservation %+v, want token > 0, attempt 1, an attempt id, no Prev, no Abandoned", res)
	}
	rec := e.get("evt:new-key:1")
	if rec.Key != "evt:new-key:1" || rec.Fingerprint != fp1 || rec.Status != ledger.StatusInProgress ||
		rec.Attempts != 1 || rec.MaxAttempts != 3 || rec.Token != res.Token || rec.HasExit || rec.Replays != 0 {
		t.Errorf("record %+v", rec)
	}
	if fmt.Sprintf("%q", rec.Command) != fmt.Sprintf("%q", argv1) {
		t.Errorf("Command = %q, want %q", rec.Command, argv1)
	}
	if rec.Owner != ownerA {
		t.Errorf("Owner = %+v, want %+v", rec.Owner, ownerA)
	}
	e.checkTime("LeaseExpiry", rec.LeaseExpiry, start.Add(lease))
	e.checkTime("Created", rec.Created, start)
	e.checkTime("Started", rec.Started, start)
	e.checkTime("Finished", rec.Finished, time.Time{})
	e.checkTime("Expires", rec.Expires, time.Time{})
	h := e.history("evt:new-key:1")
	if len(h) != 1 {
		t.Fatalf("history has %d attempts, want 1", len(h))
	}
	if a := h[0]; a.N != 1 || a.Token != res.Token || a.Host != ownerA.Host || a.PID != ownerA.PID || a.HasExit || !a.Ended.IsZero() {
		t.Errorf("attempt %+v, want n 1, token %d, running", a, res.Token)
	}
	e.checkTime("attempt Started", h[0].Started, start)
}

// testIdentify: a request that leaves its owner, directory and user to
// Identify has them recorded by the reservation that runs (a new key, and
// a failed one run again), and a replay, which writes none of them, never
// asks for them.
func testIdentify(e *env) {
	t := e.t
	const key = "evt:identify"
	asked := 0
	req := request(key, ledger.Owner{})
	req.Identify = func() (ledger.Owner, string, string) {
		asked++
		return ownerA, "/srv/app", "deploy"
	}
	res := e.reserve(req)
	e.mustOutcome(res, ledger.Reserved)
	if rec := e.get(key); asked == 0 || rec.Owner != ownerA || rec.Cwd != "/srv/app" || rec.User != "deploy" {
		t.Fatalf("new key: Identify asked %d times; record owner %+v, cwd %q, user %q; want ownerA, /srv/app, deploy",
			asked, rec.Owner, rec.Cwd, rec.User)
	}
	e.finish(key, res, ledger.StatusFailed, 3, ledger.ClassPermanent)
	asked = 0
	for i := 0; i < 2; i++ {
		e.mustOutcome(e.reserve(req), ledger.Replay)
	}
	if asked != 0 {
		t.Errorf("two replays asked Identify %d times, want 0", asked)
	}
	req.RerunFailed = true
	req.Identify = func() (ledger.Owner, string, string) {
		asked++
		return ownerB, "/srv/other", "ops"
	}
	e.mustOutcome(e.reserve(req), ledger.Reserved)
	if rec := e.get(key); asked == 0 || rec.Owner != ownerB || rec.Cwd != "/srv/other" || rec.User != "ops" {
		t.Errorf("failed key run again: Identify asked %d times; record owner %+v, cwd %q, user %q; want ownerB, /srv/other, ops",
			asked, rec.Owner, rec.Cwd, rec.User)
	}
}

func testGetUnknown(e *env) {
	if _, err := e.l.Get(e.ctx, "evt:no-such-key"); !errors.Is(err, ledger.ErrNotFound) {
		e.t.Fatalf("Get(unknown) error %v, want ErrNotFound", err)
	}
}

func testBusy(e *env) {
	t := e.t
	const key = "evt:busy-key"
	first := e.reserve(request(key, ownerA))
	if err := e.l.SetChild(e.ctx, key, first.Token, 5150, 77); err != nil {
		t.Fatal(err)
	}
	before := e.state(key)
	e.clock.Advance(lease - time.Millisecond)

	var asked []ledger.Owner
	for _, dead := range []func(ledger.Owner) bool{
		nil,
		func(o ledger.Owner) bool { asked = append(asked, o); return false },
	} {
		req := request(key, ownerB)
		req.OwnerDead = dead
		res := e.reserve(req)
		e.mustOutcome(res, ledger.Busy)
		if res.Record == nil || res.Record.Owner.PID != ownerA.PID || res.Record.Owner.Host != ownerA.Host ||
			res.Record.Attempts != 1 || res.Record.MaxAttempts != 3 {
			t.Fatalf("busy record %+v, want owner A, attempt 1/3", res.Record)
		}
		if res.Abandoned != nil {
			t.Errorf("busy reservation names an abandoned owner")
		}
	}
	if len(asked) != 1 || asked[0].PID != ownerA.PID || asked[0].StartTime != ownerA.StartTime ||
		asked[0].BootID != ownerA.BootID || asked[0].ChildPGID != 5150 || asked[0].ChildStart != 77 {
		t.Errorf("OwnerDead was asked about %+v, want owner A with its child", asked)
	}
	if after := e.state(key); after != before {
		t.Errorf("a busy reserve changed the record:\n got %+v\nwant %+v", after, before)
	}
	// The holder's lease is untouched: it can still write.
	if err := e.l.Renew(e.ctx, key, first.Token, lease); err != nil {
		t.Errorf("holder's Renew after a busy reserve: %v", err)
	}
}

// testMismatch: a different fingerprint never runs, whatever the state, and
// changes nothing.
func testMismatch(t *testing.T, open Opener) {
	const key = "evt:mismatch"
	setups := []struct {
		name   string
		status ledger.Status
		setup  func(e *env) *ledger.Reservation // returns the live reservation, if any
	}{
		{"in_progress", ledger.StatusInProgress, func(e *env) *ledger.Reservation {
			return e.reserve(request(key, ownerA))
		}},
		{"in_progress_lease_expired", ledger.StatusInProgress, func(e *env) *ledger.Reservation {
			e.reserve(request(key, ownerA))
			e.clock.Advance(2 * lease)
			return nil
		}},
		{"succeeded", ledger.StatusSucceeded, func(e *env) *ledger.Reservation {
			e.finish(key, e.reserve(request(key, ownerA)), ledger.StatusSucceeded, 0, ledger.ClassSuccess)
			return nil
		}},
		{"failed", ledger.StatusFailed, func(e *env) *ledger.Reservation {
			e.finish(key, e.reserve(request(key, ownerA)), ledger.StatusFailed, 3, ledger.ClassPermanent)
			return nil
		}},
		{"retryable", ledger.StatusRetryable, func(e *env) *ledger.Reservation {
			e.finish(key, e.reserve(request(key, ownerA)), ledger.StatusRetryable, 75, ledger.ClassInterrupted)
			return nil
		}},
		{"retryable_budget_spent", ledger.StatusRetryable, func(e *env) *ledger.Reservation {
			req := request(key, ownerA)
			req.MaxAttempts = 1
			e.finish(key, e.reserve(req), ledger.StatusRetryable, 75, ledger.ClassInterrupted)
			return nil
		}},
	}
	for _, s := range setups {
		t.Run(s.name, func(t *testing.T) {
			e := newEnv(t, open)
			live := s.setup(e)
			before := e.state(key)
			for _, rerun := range []bool{false, true} {
				req := request(key, ownerB)
				req.Fingerprint, req.Command, req.RerunFailed = fp2, []string{"other", "command"}, rerun
				req.OwnerDead = func(ledger.Owner) bool { return true }
				res, err := e.l.Reserve(e.ctx, req)
				var mm *ledger.MismatchError
				if !errors.As(err, &mm) {
					t.Fatalf("Reserve with another fingerprint (rerun %v): %+v, %v; want *MismatchError", rerun, res, err)
				}
				if mm.Record == nil || mm.Record.Key != key || mm.Record.Status != s.status ||
					fmt.Sprintf("%q", mm.Record.Command) != fmt.Sprintf("%q", argv1) || mm.Record.Fingerprint != fp1 {
					t.Errorf("MismatchError.Record = %+v, want the recorded %s command %q", mm.Record, s.status, argv1)
				}
			}
			if after := e.state(key); after != before {
				t.Errorf("a mismatched reserve changed the record:\n got %+v\nwant %+v", after, before)
			}
			if live != nil {
				if err := e.l.Renew(e.ctx, key, live.Token, lease); err != nil {
					t.Errorf("holder's Renew after a mismatched reserve: %v", err)
				}
			}
		})
	}
}

func testReplaySucceeded(e *env) {
	t := e.t
	const key = "evt:replay-ok"
	res := e.reserve(request(key, ownerA))
	stdout := make([]byte, 1024)
	for i := range stdout {
		stdout[i] = byte(i)
	}
	stderr := []byte("warn\x00\xff\r\n")
	e.clock.Advance(1500 * time.Millisecond)
	if err := e.l.Finish(e.ctx, ledger.FinishRequest{Key: key, Token: res.Token, AttemptID: res.AttemptID,
		Status: ledger.StatusSucceeded, ExitCode: 0, ExitSource: "child", Class: ledger.ClassSuccess,
		Duration: 1500 * time.Millisecond, OutputStored: true, Stdout: stdout, Stderr: stderr}); err != nil {
		t.Fatal(err)
	}
	finished := e.clock.Now()
	for i := int64(1); i <= 2; i++ {
		e.clock.Advance(time.Minute)
		rep := e.reserve(request(key, ownerB))
		e.mustOutcome(rep, ledger.Replay)
		r := rep.Record
		if r == nil || r.Status != ledger.StatusSucceeded || r.ExitCode != 0 || !r.HasExit || r.Attempts != 1 {
			t.Fatalf("replayed record %+v", r)
		}
		if !bytes.Equal(r.Stdout, stdout) || !bytes.Equal(r.Stderr, stderr) {
			t.Errorf("replayed output differs:\nstdout %q\nstderr %q", r.Stdout, r.Stderr)
		}
		if r.Replays != i {
			t.Errorf("replay %d: Replays = %d", i, r.Replays)
		}
		e.checkTime("replay LastReplay", r.LastReplay, e.clock.Now())
		e.checkTime("replay Finished", r.Finished, finished)
		if rep.Token != 0 && rep.Token == res.Token {
			t.Errorf("a replay handed out the owner's token")
		}
	}
	rec := e.get(key)
	if rec.Replays != 2 {
		t.Errorf("Get after 2 replays: Replays = %d", rec.Replays)
	}
	e.checkTime("LastReplay", rec.LastReplay, e.clock.Now())
	if rec.Token != res.Token || len(e.history(key)) != 1 {
		t.Errorf("a replay changed the token or history")
	}
}

func testReplayFailed(e *env) {
	t := e.t
	const key = "evt:replay-failed"
	e.finish(key, e.reserve(request(key, ownerA)), ledger.StatusFailed, 3, ledger.ClassPermanent)
	for _, max := range []int{3, 10} {
		req := request(key, ownerB)
		req.MaxAttempts = max
		rep := e.reserve(req)
		e.mustOutcome(rep, ledger.Replay)
		if r := rep.Record; r.Status != ledger.StatusFailed || r.ExitCode != 3 || string(r.Stdout) != "out "+key ||
			string(r.Stderr) != "err "+key {
			t.Errorf("max %d: replayed %+v", max, r)
		}
	}
	if rec := e.get(key); rec.Status != ledger.StatusFailed || rec.Attempts != 1 || rec.Replays != 2 {
		t.Errorf("after replays: %+v", rec)
	}
}

func testRerunFailed(e *env) {
	t := e.t
	const key = "evt:rerun-failed"
	created := e.clock.Now()
	req := request(key, ownerA)
	req.MaxAttempts = 2
	first := e.reserve(req)
	if err := e.l.EndAttempt(e.ctx, ledger.AttemptEnd{Key: key, Token: first.Token, AttemptID: first.AttemptID, ExitCode: 75, Class: ledger.ClassTransient, Delay: 0}); err != nil {
		t.Fatal(err)
	}
	n, id, err := e.l.StartAttempt(e.ctx, key, first.Token, lease)
	if err != nil || n != 2 {
		t.Fatalf("StartAttempt = %d, %v", n, err)
	}
	first.AttemptID = id
	e.finish(key, first, ledger.StatusFailed, 75, ledger.ClassTransient)
	failedAt := e.clock.Now()

	e.clock.Advance(time.Hour)
	req = request(key, ownerB)
	req.MaxAttempts, req.RerunFailed = 2, true
	res := e.reserve(req)
	e.mustOutcome(res, ledger.Reserved)
	if res.Attempt != 1 || res.Token <= first.Token {
		t.Errorf("rerun reservation %+v, want attempt 1 and a token above %d", res, first.Token)
	}
	if p := res.Prev; p == nil || p.Status != ledger.StatusFailed || p.Attempts != 2 || p.ExitCode != 75 || !p.HasExit ||
		!sameTime(p.Finished, failedAt) {
		t.Errorf("Prev = %+v, want the failed state (2 attempts, exit 75)", res.Prev)
	}
	rec := e.get(key)
	if rec.Status != ledger.StatusInProgress || rec.Attempts != 1 || rec.Owner.PID != ownerB.PID || !rec.Finished.IsZero() {
		t.Errorf("after rerun: %+v", rec)
	}
	e.checkTime("Started", rec.Started, e.clock.Now())
	e.checkTime("Created", rec.Created, created)
	if h := e.history(key); len(h) != 3 || h[2].Token != res.Token || h[2].HasExit {
		t.Errorf("history %+v, want the two old attempts and a running third", h)
	}
	// A succeeded record is not rerun by --rerun-failed.
	e.finish(key, res, ledger.StatusSucceeded, 0, ledger.ClassSuccess)
	e.mustOutcome(e.reserve(req), ledger.Replay)
}

func testRetryableContinues(e *env) {
	t := e.t
	const key = "evt:retryable"
	first := e.reserve(request(key, ownerA))
	e.finish(key, first, ledger.StatusRetryable, 130, ledger.ClassInterrupted)
	e.clock.Advance(time.Minute)
	res := e.reserve(request(key, ownerB))
	e.mustOutcome(res, ledger.Reserved)
	if res.Attempt != 2 || res.Token <= first.Token || res.Abandoned != nil {
		t.Errorf("reservation %+v, want attempt 2", res)
	}
	if p := res.Prev; p == nil || p.Status != ledger.StatusRetryable || p.Attempts != 1 || p.ExitCode != 130 {
		t.Errorf("Prev = %+v", res.Prev)
	}
	rec := e.get(key)
	if rec.Status != ledger.StatusInProgress || rec.Attempts != 2 || rec.Owner != ownerB || rec.Replays != 0 {
		t.Errorf("record %+v", rec)
	}
	e.checkTime("Finished", rec.Finished, time.Time{})
	e.checkTime("LeaseExpiry", rec.LeaseExpiry, e.clock.Now().Add(lease))
	h := e.history(key)
	if len(h) != 2 || h[0].ExitCode != 130 || h[0].Class != ledger.ClassInterrupted || h[1].N != 2 || h[1].Token != res.Token {
		t.Errorf("history %+v", h)
	}
}

func testBudgetSpent(e *env) {
	t := e.t
	const key = "evt:budget"
	req := request(key, ownerA)
	req.MaxAttempts = 2
	e.finish(key, e.reserve(req), ledger.StatusRetryable, 75, ledger.ClassTransient)
	res := e.reserve(req)
	if res.Attempt != 2 {
		t.Fatalf("second invocation attempt %d, want 2", res.Attempt)
	}
	// The runner records the last allowed attempt as failed: the budget wins.
	e.finish(key, res, ledger.StatusFailed, 75, ledger.ClassTransient)
	for _, max := range []int{2, 5} {
		req.MaxAttempts = max
		rep := e.reserve(req)
		e.mustOutcome(rep, ledger.Replay)
		if rep.Record.Status != ledger.StatusFailed || rep.Record.Attempts != 2 || rep.Record.ExitCode != 75 {
			t.Errorf("max %d: replayed %+v", max, rep.Record)
		}
	}
}

func testLoweredBudget(e *env) {
	t := e.t
	const key = "evt:lowered"
	req := request(key, ownerA)
	req.MaxAttempts = 5
	e.finish(key, e.reserve(req), ledger.StatusRetryable, 75, ledger.ClassTransient)
	e.finish(key, e.reserve(req), ledger.StatusRetryable, 75, ledger.ClassTransient)
	req.MaxAttempts = 2
	rep := e.reserve(req)
	e.mustOutcome(rep, ledger.Replay)
	if r := rep.Record; r.Status != ledger.StatusFailed || r.Attempts != 2 || r.ExitCode != 75 || string(r.Stdout) != "out "+key {
		t.Errorf("replayed %+v, want failed after 2 attempts", r)
	}
	if rec := e.get(key); rec.Status != ledger.StatusFailed {
		t.Errorf("status %s after a lowered budget, want failed", rec.Status)
	}
	// Final now: raising the budget again does not reopen it.
	req.MaxAttempts = 5
	e.mustOutcome(e.reserve(req), ledger.Replay)
	if rec := e.get(key); rec.Status != ledger.StatusFailed || rec.Attempts != 2 {
		t.Errorf("after raising the budget: %+v", rec)
	}
}
