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

func testExpiredTTL(e *env) {
	t := e.t
	for _, tc := range []struct {
		name   string
		status ledger.Status
		fp     string
	}{
		{"succeeded_same_fingerprint", ledger.StatusSucceeded, fp1},
		{"failed_other_fingerprint", ledger.StatusFailed, fp2},
		{"retryable", ledger.StatusRetryable, fp1},
	} {
		key := "evt:ttl:" + tc.name
		res := e.reserve(request(key, ownerA))
		if err := e.l.Finish(e.ctx, ledger.FinishRequest{Key: key, Token: res.Token, AttemptID: res.AttemptID,
			Status: tc.status, ExitCode: 0, ExitSource: "child", Class: ledger.ClassSuccess, TTL: time.Hour,
			OutputStored: true, Stdout: []byte("old")}); err != nil {
			t.Fatal(err)
		}
		finished := e.clock.Now()
		if rec := e.get(key); !sameTime(rec.Expires, finished.Add(time.Hour)) || rec.TTL != time.Hour {
			t.Errorf("%s: Expires %v TTL %v, want outcome + 1h", tc.name, rec.Expires, rec.TTL)
		}
		e.clock.Advance(time.Hour - time.Millisecond)
		if tc.status != ledger.StatusRetryable {
			e.mustOutcome(e.reserve(request(key, ownerB)), ledger.Replay)
		}
		e.clock.Advance(time.Millisecond)
		req := request(key, ownerB)
		req.Fingerprint = tc.fp
		got := e.reserve(req)
		e.mustOutcome(got, ledger.Reserved)
		if got.Attempt != 1 || got.Prev != nil || got.Token <= res.Token {
			t.Errorf("%s: reservation after expiry %+v, want a new record", tc.name, got)
		}
		rec := e.get(key)
		if rec.Replays != 0 || rec.Attempts != 1 || rec.Fingerprint != tc.fp || len(rec.Stdout) != 0 || !rec.Expires.IsZero() {
			t.Errorf("%s: record after expiry %+v", tc.name, rec)
		}
		e.checkTime(tc.name+" Created", rec.Created, e.clock.Now())
		if h := e.history(key); len(h) != 1 || h[0].Token != got.Token {
			t.Errorf("%s: history %+v, want only the new attempt", tc.name, h)
		}
		// Releasing it leaves nothing: the expired record is gone for good.
		if err := e.l.Release(e.ctx, key, got.Token, got.AttemptID, got.Prev); err != nil {
			t.Fatal(err)
		}
		if _, err := e.l.Get(e.ctx, key); !errors.Is(err, ledger.ErrNotFound) {
			t.Errorf("%s: Get after releasing the re-created key: %v", tc.name, err)
		}
	}
}

// takeover sets up owner A in attempt 1 with a child, then has B take over
// using how (expire the lease or report A dead).
func (e *env) takeover(key string, maxAttempts int, how string) (a, b *ledger.Reservation) {
	e.t.Helper()
	req := request(key, ownerA)
	req.MaxAttempts = maxAttempts
	a = e.reserve(req)
	if err := e.l.SetChild(e.ctx, key, a.Token, 5150, 77); err != nil {
		e.t.Fatal(err)
	}
	req = request(key, ownerB)
	req.MaxAttempts = maxAttempts
	switch how {
	case "expire":
		e.clock.Advance(lease)
	case "dead":
		e.clock.Advance(time.Second)
		req.OwnerDead = func(o ledger.Owner) bool { return o.PID == ownerA.PID && o.StartTime == ownerA.StartTime }
	}
	return a, e.reserve(req)
}

func (e *env) checkTakeover(key string, a, b *ledger.Reservation) {
	t := e.t
	e.mustOutcome(b, ledger.Reserved)
	if b.Attempt != 2 || b.Token <= a.Token {
		t.Errorf("takeover reservation attempt %d token %d, want attempt 2 and a token above %d", b.Attempt, b.Token, a.Token)
	}
	want := ownerA
	want.ChildPGID, want.ChildStart = 5150, 77
	if b.Abandoned == nil || *b.Abandoned != want {
		t.Errorf("Abandoned = %+v, want %+v", b.Abandoned, want)
	}
	if p := b.Prev; p == nil || p.Status != ledger.StatusRetryable || p.Attempts != 1 || p.ExitCode != ledger.AbandonedExitCode || !p.HasExit {
		t.Errorf("Prev = %+v, want retryable after 1 attempt, exit 75", b.Prev)
	}
	rec := e.get(key)
	if rec.Status != ledger.StatusInProgress || rec.Attempts != 2 || rec.Token != b.Token || rec.Owner != ownerB {
		t.Errorf("record after takeover %+v", rec)
	}
	e.checkTime("LeaseExpiry", rec.LeaseExpiry, e.clock.Now().Add(lease))
	h := e.history(key)
	if len(h) != 2 {
		t.Fatalf("history %+v, want 2 attempts", h)
	}
	if h[0].Class != ledger.ClassAbandoned || h[0].ExitCode != ledger.AbandonedExitCode || !h[0].HasExit || h[0].Token != a.Token {
		t.Errorf("abandoned attempt %+v", h[0])
	}
	e.checkTime("abandoned attempt Ended", h[0].Ended, e.clock.Now())
	if h[1].N != 2 || h[1].Token != b.Token || h[1].PID != ownerB.PID || h[1].HasExit {
		t.Errorf("new attempt %+v", h[1])
	}
}

func testTakeoverExpired(e *env) {
	a, b := e.takeover("evt:takeover-expired", 3, "expire")
	e.checkTakeover("evt:takeover-expired", a, b)
}

func testTakeoverOwnerDead(e *env) {
	a, b := e.takeover("evt:takeover-dead", 3, "dead")
	e.checkTakeover("evt:takeover-dead", a, b)
}

func testTakeoverBudgetSpent(e *env) {
	t := e.t
	const key = "evt:takeover-last"
	a, b := e.takeover(key, 1, "expire")
	e.mustOutcome(b, ledger.Replay)
	if b.Abandoned == nil || b.Abandoned.PID != ownerA.PID || b.Abandoned.ChildPGID != 5150 {
		t.Errorf("Abandoned = %+v, want owner A and its child", b.Abandoned)
	}
	r := b.Record
	if r.Status != ledger.StatusFailed || r.ExitCode != ledger.AbandonedExitCode || r.ExitSource != "idem" || r.Attempts != 1 {
		t.Errorf("record %+v, want failed with exit 75 from idem after 1 attempt", r)
	}
	e.checkTime("Finished", r.Finished, e.clock.Now())
	if h := e.history(key); len(h) != 1 || h[0].Class != ledger.ClassAbandoned {
		t.Errorf("history %+v", h)
	}
	// A's late outcome is refused.
	e.finishStale(key, a)
	e.mustOutcome(e.reserve(request(key, ownerB)), ledger.Replay)
}

func (e *env) finishStale(key string, a *ledger.Reservation) {
	e.t.Helper()
	err := e.l.Finish(e.ctx, ledger.FinishRequest{Key: key, Token: a.Token, AttemptID: a.AttemptID,
		Status: ledger.StatusSucceeded, ExitCode: 0, ExitSource: "child", Class: ledger.ClassSuccess, OutputStored: true, Stdout: []byte("late")})
	if !errors.Is(err, ledger.ErrLeaseLost) {
		e.t.Errorf("Finish with a stale token: %v, want ErrLeaseLost", err)
	}
}

func testFencing(e *env) {
	t := e.t
	const key = "evt:fencing"
	a, b := e.takeover(key, 3, "expire")
	e.mustOutcome(b, ledger.Reserved)
	if err := e.l.SetChild(e.ctx, key, b.Token, 6000, 88); err != nil {
		t.Fatal(err)
	}
	before := e.state(key)
	stale := map[string]func(token, attemptID int64) error{
		"SetChild": func(tok, _ int64) error { return e.l.SetChild(e.ctx, key, tok, 9999, 1) },
		"Renew":    func(tok, _ int64) error { return e.l.Renew(e.ctx, key, tok, time.Hour) },
		"EndAttempt": func(tok, id int64) error {
			return e.l.EndAttempt(e.ctx, ledger.AttemptEnd{Key: key, Token: tok, AttemptID: id, ExitCode: 75, Class: ledger.ClassTransient, Delay: time.Second})
		},
		"StartAttempt": func(tok, _ int64) error {
			_, _, err := e.l.StartAttempt(e.ctx, key, tok, time.Hour)
			return err
		},
		"Finish": func(tok, id int64) error {
			return e.l.Finish(e.ctx, ledger.FinishRequest{Key: key, Token: tok, AttemptID: id, Status: ledger.StatusSucceeded,
				ExitSource: "child", Class: ledger.ClassSuccess, OutputStored: true, Stdout: []byte("late")})
		},
		"ReleaseNew": func(tok, id int64) error { return e.l.Release(e.ctx, key, tok, id, nil) },
		"ReleasePrev": func(tok, id int64) error {
			return e.l.Release(e.ctx, key, tok, id, &ledger.Snapshot{Status: ledger.StatusSucceeded, Attempts: 1, MaxAttempts: 3})
		},
	}
	tokens := []struct {
		name      string
		token, id int64
	}{
		{"stale", a.Token, a.AttemptID},
		{"never_issued", b.Token + 1000, b.AttemptID + 1000},
	}
	for _, tok := range tokens {
		for name, write := range stale {
			if err := write(tok.token, tok.id); !errors.Is(err, ledger.ErrLeaseLost) {
				t.Errorf("%s with a %s token: %v, want ErrLeaseLost", name, tok.name, err)
			}
		}
	}
	if after := e.state(key); after != before {
		t.Errorf("fenced writes changed the record:\n got %+v\nwant %+v", after, before)
	}
	// Unknown key: no row, so no lease.
	if err := e.l.Renew(e.ctx, "evt:fencing-unknown", b.Token, lease); !errors.Is(err, ledger.ErrLeaseLost) {
		t.Errorf("Renew of an unknown key: %v, want ErrLeaseLost", err)
	}
	// The current owner still writes, and a finished record fences every token.
	e.finish(key, b, ledger.StatusSucceeded, 0, ledger.ClassSuccess)
	if err := e.l.Renew(e.ctx, key, a.Token, lease); !errors.Is(err, ledger.ErrLeaseLost) {
		t.Errorf("Renew with the stale token after the outcome: %v, want ErrLeaseLost", err)
	}
}

func testReleaseNew(e *env) {
	t := e.t
	const key = "evt:release-new"
	res := e.reserve(request(key, ownerA))
	if err := e.l.Release(e.ctx, key, res.Token, res.AttemptID, res.Prev); err != nil {
		t.Fatal(err)
	}
	if _, err := e.l.Get(e.ctx, key); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("Get after Release of a new key: %v, want ErrNotFound", err)
	}
	if h, err := e.l.History(e.ctx, key); err != nil || len(h) != 0 {
		t.Errorf("History after Release of a new key: %+v, %v; want none", h, err)
	}
	// The key is free again, for another fingerprint too.
	req := request(key, ownerB)
	req.Fingerprint = fp2
	again := e.reserve(req)
	e.mustOutcome(again, ledger.Reserved)
	if again.Token <= res.Token || again.Attempt != 1 {
		t.Errorf("reservation after release %+v", again)
	}
}

func testReleaseRestores(e *env) {
	t := e.t
	cases := []struct {
		name  string
		setup func(key string) (*ledger.Reservation, state)
	}{
		{"retryable", func(key string) (*ledger.Reservation, state) {
			e.finish(key, e.reserve(request(key, ownerA)), ledger.StatusRetryable, 75, ledger.ClassTransient)
			before := e.state(key)
			e.clock.Advance(time.Minute)
			return e.reserve(request(key, ownerB)), before
		}},
		{"failed_rerun", func(key string) (*ledger.Reservation, state) {
			e.finish(key, e.reserve(request(key, ownerA)), ledger.StatusFailed, 4, ledger.ClassPermanent)
			before := e.state(key)
			e.clock.Advance(time.Minute)
			req := request(key, ownerB)
			req.RerunFailed = true
			return e.reserve(req), before
		}},
	}
	for _, tc := range cases {
		key := "evt:release:" + tc.name
		res, before := tc.setup(key)
		e.mustOutcome(res, ledger.Reserved)
		if err := e.l.Release(e.ctx, key, res.Token, res.AttemptID, res.Prev); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		after := e.state(key)
		// The token may move on; everything else is as before.
		after.Token, before.Token = 0, 0
		after.OwnerPID, before.OwnerPID = 0, 0
		after.LeaseExpiry, before.LeaseExpiry = time.Time{}, time.Time{}
		if after != before {
			t.Errorf("%s: Release did not restore the record:\n got %+v\nwant %+v", tc.name, after, before)
		}
		if err := e.l.Renew(e.ctx, key, res.Token, lease); !errors.Is(err, ledger.ErrLeaseLost) {
			t.Errorf("%s: Renew after Release: %v, want ErrLeaseLost", tc.name, err)
		}
	}
	// Releasing after a takeover restores the abandoned attempt's outcome:
	// retryable, exit 75, the lost attempt counted.
	const key = "evt:release:takeover"
	_, b := e.takeover(key, 3, "dead")
	e.mustOutcome(b, ledger.Reserved)
	if err := e.l.Release(e.ctx, key, b.Token, b.AttemptID, b.Prev); err != nil {
		t.Fatal(err)
	}
	rec := e.get(key)
	if rec.Status != ledger.StatusRetryable || rec.Attempts != 1 || rec.ExitCode != ledger.AbandonedExitCode {
		t.Errorf("after releasing a takeover: %+v", rec)
	}
	if h := e.history(key); len(h) != 1 || h[0].Class != ledger.ClassAbandoned {
		t.Errorf("history after releasing a takeover: %+v", h)
	}
	// And the next run continues from there.
	next := e.reserve(request(key, ownerA))
	if next.Outcome != ledger.Reserved || next.Attempt != 2 {
		t.Errorf("reservation after release: %+v", next)
	}
}

func testFinishOutcome(e *env) {
	t := e.t
	all := make([]byte, 512)
	for i := range all {
		all[i] = byte(i)
	}
	cases := []struct {
		name string
		req  ledger.FinishRequest
		// want stored output
		stdout, stderr []byte
	}{
		{"binary", ledger.FinishRequest{Status: ledger.StatusSucceeded, ExitCode: 0, ExitSource: "child", Class: ledger.ClassSuccess,
			OutputStored: true, Stdout: all, Stderr: []byte{0, 0, 0xff}}, all, []byte{0, 0, 0xff}},
		{"empty", ledger.FinishRequest{Status: ledger.StatusSucceeded, ExitCode: 0, ExitSource: "child", Class: ledger.ClassSuccess,
			OutputStored: true}, nil, nil},
		{"truncated", ledger.FinishRequest{Status: ledger.StatusFailed, ExitCode: 1, ExitSource: "child", Class: ledger.ClassPermanent,
			OutputStored: true, Stdout: []byte("abc"), Stderr: []byte("de"), StdoutTruncated: true, StderrTruncated: true},
			[]byte("abc"), []byte("de")},
		{"stderr_truncated_only", ledger.FinishRequest{Status: ledger.StatusFailed, ExitCode: 2, ExitSource: "child", Class: ledger.ClassPermanent,
			OutputStored: true, Stdout: []byte("x"), Stderr: []byte("y"), StderrTruncated: true}, []byte("x"), []byte("y")},
		{"no_output", ledger.FinishRequest{Status: ledger.StatusSucceeded, ExitCode: 0, ExitSource: "child", Class: ledger.ClassSuccess,
			OutputStored: false, Stdout: []byte("secret"), Stderr: []byte("secret")}, nil, nil},
		{"timeout_retryable", ledger.FinishRequest{Status: ledger.StatusRetryable, ExitCode: 124, ExitSource: "idem", Class: ledger.ClassTimeout,
			OutputStored: true, Stdout: []byte("partial"), TTL: 48 * time.Hour}, []byte("partial"), nil},
	}
	for _, tc := range cases {
		key := "evt:finish:" + tc.name
		res := e.reserve(request(key, ownerA))
		started := e.clock.Now()
		e.clock.Advance(2500 * time.Millisecond)
		req := tc.req
		req.Key, req.Token, req.AttemptID, req.Duration = key, res.Token, res.AttemptID, 2500*time.Millisecond
		if err := e.l.Finish(e.ctx, req); err != nil {
			t.Fatalf("%s: Finish: %v", tc.name, err)
		}
		now := e.clock.Now()
		rec := e.get(key)
		if rec.Status != req.Status || rec.ExitCode != req.ExitCode || !rec.HasExit || rec.ExitSource != req.ExitSource {
			t.Errorf("%s: record %+v", tc.name, rec)
		}
		if !bytes.Equal(rec.Stdout, tc.stdout) || !bytes.Equal(rec.Stderr, tc.stderr) {
			t.Errorf("%s: stored stdout %q stderr %q, want %q %q", tc.name, rec.Stdout, rec.Stderr, tc.stdout, tc.stderr)
		}
		if rec.OutputStored != req.OutputStored || rec.StdoutTruncated != req.StdoutTruncated || rec.StderrTruncated != req.StderrTruncated {
			t.Errorf("%s: OutputStored %v truncated %v/%v, want %v %v/%v", tc.name, rec.OutputStored, rec.StdoutTruncated,
				rec.StderrTruncated, req.OutputStored, req.StdoutTruncated, req.StderrTruncated)
		}
		if rec.Duration != req.Duration || rec.TTL != req.TTL {
			t.Errorf("%s: Duration %v TTL %v", tc.name, rec.Duration, rec.TTL)
		}
		e.checkTime(tc.name+" Finished", rec.Finished, now)
		e.checkTime(tc.name+" Started", rec.Started, started)
		wantExp := time.Time{}
		if req.TTL > 0 {
			wantExp = now.Add(req.TTL)
		}
		e.checkTime(tc.name+" Expires", rec.Expires, wantExp)
		if !rec.OutcomeTime().Equal(rec.Finished) {
			t.Errorf("%s: OutcomeTime %v, want Finished", tc.name, rec.OutcomeTime())
		}
		h := e.history(key)
		if len(h) != 1 || h[0].ExitCode != req.ExitCode || !h[0].HasExit || h[0].Class != req.Class {
			t.Errorf("%s: history %+v", tc.name, h)
		} else {
			e.checkTime(tc.name+" attempt Ended", h[0].Ended, now)
		}
		// The replay gives back exactly what was stored.
		rep := e.reserve(request(key, ownerB))
		if tc.req.Status == ledger.StatusRetryable {
			e.mustOutcome(rep, ledger.Reserved)
			continue
		}
		e.mustOutcome(rep, ledger.Replay)
		if !bytes.Equal(rep.Record.Stdout, tc.stdout) || !bytes.Equal(rep.Record.Stderr, tc.stderr) ||
			rep.Record.StdoutTruncated != req.StdoutTruncated || rep.Record.OutputStored != req.OutputStored {
			t.Errorf("%s: replay %+v", tc.name, rep.Record)
		}
	}
}

func testAttemptLoop(e *env) {
	t := e.t
	const key = "evt:attempt-loop"
	res := e.reserve(request(key, ownerA))
	if err := e.l.SetChild(e.ctx, key, res.Token, 4242, 99); err != nil {
		t.Fatal(err)
	}
	if rec := e.get(key); rec.Owner.ChildPGID != 4242 || rec.Owner.ChildStart != 99 {
		t.Errorf("after SetChild: owner %+v", rec.Owner)
	}
	e.clock.Advance(10 * time.Second)
	if err := e.l.Renew(e.ctx, key, res.Token, lease); err != nil {
		t.Fatal(err)
	}
	e.checkTime("LeaseExpiry after Renew", e.get(key).LeaseExpiry, e.clock.Now().Add(lease))

	if err := e.l.EndAttempt(e.ctx, ledger.AttemptEnd{Key: key, Token: res.Token, AttemptID: res.AttemptID, ExitCode: 75, Class: ledger.ClassTransient, Delay: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	ended := e.clock.Now()
	if rec := e.get(key); rec.Status != ledger.StatusInProgress || rec.ExitCode != 75 || !rec.HasExit || rec.Attempts != 1 {
		t.Errorf("after EndAttempt: %+v", rec)
	}
	e.clock.Advance(2 * time.Second)
	n, id, err := e.l.StartAttempt(e.ctx, key, res.Token, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 || id == res.AttemptID || id == 0 {
		t.Errorf("StartAttempt = %d, %d; want attempt 2 with a new id", n, id)
	}
	rec := e.get(key)
	if rec.Attempts != 2 || rec.Token != res.Token || rec.Owner.ChildPGID != 0 || rec.Status != ledger.StatusInProgress {
		t.Errorf("after StartAttempt: %+v", rec)
	}
	e.checkTime("LeaseExpiry after StartAttempt", rec.LeaseExpiry, e.clock.Now().Add(time.Minute))
	h := e.history(key)
	if len(h) != 2 {
		t.Fatalf("history %+v", h)
	}
	if a := h[0]; a.N != 1 || a.ExitCode != 75 || a.Class != ledger.ClassTransient || a.Delay != 2*time.Second {
		t.Errorf("first attempt %+v", a)
	}
	e.checkTime("first attempt Ended", h[0].Ended, ended)
	if a := h[1]; a.N != 2 || a.Token != res.Token || a.HasExit || !a.Ended.IsZero() || a.PID != ownerA.PID {
		t.Errorf("second attempt %+v", a)
	}
	e.checkTime("second attempt Started", h[1].Started, e.clock.Now())
	// The outcome lands on the second attempt.
	e.finish(key, &ledger.Reservation{Token: res.Token, AttemptID: id}, ledger.StatusSucceeded, 0, ledger.ClassSuccess)
	h = e.history(key)
	if h[0].Class != ledger.ClassTransient || h[1].Class != ledger.ClassSuccess || h[1].ExitCode != 0 {
		t.Errorf("history after Finish %+v", h)
	}
}

func testTokensGrow(e *env) {
	t := e.t
	var last int64
	next := func(what string, tok int64) {
		t.Helper()
		if tok <= last {
			t.Errorf("%s: token %d, not above %d", what, tok, last)
		}
		last = tok
	}
	k1 := e.reserve(request("evt:tokens-1", ownerA))
	next("first key", k1.Token)
	k2 := e.reserve(request("evt:tokens-2", ownerA))
	next("second key", k2.Token)
	if err := e.l.Release(e.ctx, "evt:tokens-2", k2.Token, k2.AttemptID, nil); err != nil {
		t.Fatal(err)
	}
	k2 = e.reserve(request("evt:tokens-2", ownerA))
	next("re-created after delete", k2.Token)
	e.finish("evt:tokens-2", k2, ledger.StatusRetryable, 75, ledger.ClassTransient)
	k2 = e.reserve(request("evt:tokens-2", ownerB))
	next("continued retryable", k2.Token)
	e.finish("evt:tokens-2", k2, ledger.StatusFailed, 1, ledger.ClassPermanent)
	req := request("evt:tokens-2", ownerA)
	req.RerunFailed = true
	k2 = e.reserve(req)
	next("rerun failed", k2.Token)
	e.clock.Advance(lease)
	k1 = e.reserve(request("evt:tokens-1", ownerB))
	e.mustOutcome(k1, ledger.Reserved)
	next("takeover", k1.Token)
	if err := e.l.Finish(e.ctx, ledger.FinishRequest{Key: "evt:tokens-1", Token: k1.Token, AttemptID: k1.AttemptID,
		Status: ledger.StatusSucceeded, ExitSource: "child", Class: ledger.ClassSuccess, TTL: time.Minute, OutputStored: true}); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Minute)
	k1 = e.reserve(request("evt:tokens-1", ownerA))
	e.mustOutcome(k1, ledger.Reserved)
	next("re-created after expiry", k1.Token)
}
