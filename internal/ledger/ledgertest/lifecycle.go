package ledgertest

// The suite's checks of a reservation's later life: expiry, takeovers,
// fencing, releases, outcomes, the attempt loop and the tokens.

import (
	"bytes"
	"errors"
	"time"

	"github.com/idemhq/idem/internal/ledger"
)

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
