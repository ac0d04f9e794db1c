package ledgertest

import (
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/idemhq/idem/internal/ledger"
)

// deadOwner is a same-host owner that the requests of testAgreesWithDecide
// report dead.
var deadOwner = ledger.Owner{Host: "host-a", BootID: "boot-a", PIDNS: 4026531836, PID: 999, StartTime: 3000}

func deadIsDead(o ledger.Owner) bool { return o.PID == deadOwner.PID }

// decideState is how testAgreesWithDecide sets a key up before it asks.
type decideState struct {
	name   string
	status ledger.Status // the outcome, or in_progress
	owner  ledger.Owner  // the holder, in progress
	lease  time.Duration // the holder's lease, in progress
	ttl    time.Duration // the outcome's TTL
}

// testAgreesWithDecide: whatever the record's state and the request, the
// backend's Reserve does what ledger.Decide says, single-statement paths
// included: every status (a live, expired or dead holder in progress;
// outcomes with no TTL, a TTL ahead and a TTL over) × the same or another
// fingerprint × RerunFailed × a budget left or spent.
func testAgreesWithDecide(e *env) {
	var states []decideState
	for _, st := range []ledger.Status{ledger.StatusSucceeded, ledger.StatusFailed, ledger.StatusRetryable} {
		for _, ttl := range []struct {
			name string
			d    time.Duration
		}{{"no TTL", 0}, {"TTL ahead", time.Hour}, {"TTL over", time.Second}} {
			states = append(states, decideState{name: string(st) + ", " + ttl.name, status: st, ttl: ttl.d})
		}
	}
	states = append(states,
		decideState{name: "in_progress, live", status: ledger.StatusInProgress, owner: ownerA, lease: time.Hour},
		decideState{name: "in_progress, lease over", status: ledger.StatusInProgress, owner: ownerA, lease: time.Second},
		decideState{name: "in_progress, owner dead", status: ledger.StatusInProgress, owner: deadOwner, lease: time.Hour})

	type ask struct {
		key  string
		name string
		req  ledger.ReserveRequest
	}
	var asks []ask
	n := 0
	for _, st := range states {
		for _, otherFP := range []bool{false, true} {
			for _, rerun := range []bool{false, true} {
				for _, spent := range []bool{false, true} {
					n++
					key := fmt.Sprintf("evt:decide-%03d", n)
					e.setUp(key, st)
					req := request(key, ownerB)
					req.OwnerDead = deadIsDead
					req.RerunFailed = rerun
					if otherFP {
						req.Fingerprint = fp2
					}
					if spent {
						req.MaxAttempts = 1 // every state has made one attempt
					}
					asks = append(asks, ask{key: key, req: req,
						name: fmt.Sprintf("%s, other fingerprint %v, rerun %v, budget spent %v", st.name, otherFP, rerun, spent)})
				}
			}
		}
	}
	e.clock.Advance(2 * time.Second) // past the short leases and TTLs, not the long ones

	for _, a := range asks {
		e.agrees(a.name, a.key, a.req)
	}
}

// setUp makes key's record as st says, with one attempt made.
func (e *env) setUp(key string, st decideState) {
	e.t.Helper()
	req := request(key, st.owner)
	if st.status != ledger.StatusInProgress {
		req.Owner = ownerA
	} else {
		req.Lease = st.lease
	}
	res := e.reserve(req)
	e.mustOutcome(res, ledger.Reserved)
	if st.status == ledger.StatusInProgress {
		if err := e.l.SetChild(e.ctx, key, res.Token, 7000, 7001); err != nil {
			e.t.Fatalf("SetChild(%s): %v", key, err)
		}
		return
	}
	code, class := 0, ledger.ClassSuccess
	switch st.status {
	case ledger.StatusFailed:
		code, class = 1, ledger.ClassPermanent
	case ledger.StatusRetryable:
		code, class = 75, ledger.ClassTransient
	}
	if err := e.l.Finish(e.ctx, ledger.FinishRequest{Key: key, Token: res.Token, AttemptID: res.AttemptID,
		Status: st.status, ExitCode: code, ExitSource: "child", Class: class, Duration: time.Second, TTL: st.ttl,
		OutputStored: true, Stdout: []byte("out " + key), Stderr: []byte("err " + key)}); err != nil {
		e.t.Fatalf("Finish(%s): %v", key, err)
	}
}

// agrees asks Reserve for req and checks its answer, and the record it
// leaves, against ledger.Decide on the record as it was.
func (e *env) agrees(name, key string, req ledger.ReserveRequest) {
	e.t.Helper()
	before := e.get(key)
	beforeState := e.state(key)
	d := ledger.Decide(before, req, e.clock.Now())
	res, err := e.l.Reserve(e.ctx, req)

	if d.Action == ledger.ActMismatch {
		var mismatch *ledger.MismatchError
		if !errors.As(err, &mismatch) {
			e.t.Errorf("%s: Decide says %v; Reserve returned %+v, %v", name, d.Action, res, err)
		} else if after := e.state(key); after != beforeState {
			e.t.Errorf("%s: a refused reservation changed the record:\n got %+v\nwant %+v", name, after, beforeState)
		}
		return
	}
	if err != nil {
		e.t.Errorf("%s: Decide says %v; Reserve failed: %v", name, d.Action, err)
		return
	}
	if res.Outcome != d.Outcome() {
		e.t.Errorf("%s: Decide says %v; Reserve's outcome is %s", name, d.Action, outcomeName(res.Outcome))
		return
	}
	if !reflect.DeepEqual(res.Abandoned, d.Abandoned) {
		e.t.Errorf("%s: Abandoned = %+v, Decide says %+v", name, res.Abandoned, d.Abandoned)
	}
	after := e.get(key)
	hist := e.history(key)
	switch d.Action {
	case ledger.ActBusy:
		if res.Record == nil || res.Record.Key != key || res.Record.Owner.PID != before.Owner.PID {
			e.t.Errorf("%s: Busy names holder %+v, want pid %d", name, res.Record, before.Owner.PID)
		}
		if got := e.state(key); got != beforeState {
			e.t.Errorf("%s: Busy changed the record:\n got %+v\nwant %+v", name, got, beforeState)
		}
	case ledger.ActCreate, ledger.ActTake:
		want := d.Done + 1
		if res.Attempt != want || after.Attempts != want || after.Status != ledger.StatusInProgress ||
			after.Owner.PID != req.Owner.PID || after.Token != res.Token || after.MaxAttempts != req.MaxAttempts {
			e.t.Errorf("%s: %v: attempt %d, record %s attempts %d/%d pid %d token %d; want attempt %d of %d by pid %d, token %d",
				name, d.Action, res.Attempt, after.Status, after.Attempts, after.MaxAttempts, after.Owner.PID, after.Token,
				want, req.MaxAttempts, req.Owner.PID, res.Token)
		}
		e.samePrev(name, res.Prev, d.Prev)
		if d.Action == ledger.ActCreate && len(hist) != 1 {
			e.t.Errorf("%s: a created record has %d attempts in its history, want 1", name, len(hist))
		}
		e.checkAbandoned(name, hist, d.Abandoned != nil)
	case ledger.ActReplay, ledger.ActClose, ledger.ActAbandon:
		if res.Record == nil || string(res.Record.Stdout) != string(after.Stdout) || res.Record.Replays != before.Replays+1 ||
			after.Replays != before.Replays+1 {
			e.t.Errorf("%s: %v: replayed %+v; want the record with one more replay than %d", name, d.Action, res.Record, before.Replays)
			return
		}
		switch d.Action {
		case ledger.ActReplay:
			if after.Status != before.Status || after.Token != before.Token || after.Attempts != before.Attempts {
				e.t.Errorf("%s: a replay changed the record: %s token %d attempts %d, was %s token %d attempts %d",
					name, after.Status, after.Token, after.Attempts, before.Status, before.Token, before.Attempts)
			}
		case ledger.ActClose:
			if after.Status != ledger.StatusFailed || after.MaxAttempts != req.MaxAttempts || after.ExitCode != before.ExitCode {
				e.t.Errorf("%s: closing left %s, budget %d, code %d; want failed, budget %d, code %d",
					name, after.Status, after.MaxAttempts, after.ExitCode, req.MaxAttempts, before.ExitCode)
			}
		case ledger.ActAbandon:
			if after.Status != ledger.StatusFailed || after.ExitCode != ledger.AbandonedExitCode || after.ExitSource != "idem" ||
				after.Finished.IsZero() || after.Token == before.Token || after.MaxAttempts != req.MaxAttempts {
				e.t.Errorf("%s: abandoning the last attempt left %s, code %d from %s, finished %v, token %d (was %d), budget %d",
					name, after.Status, after.ExitCode, after.ExitSource, after.Finished, after.Token, before.Token, after.MaxAttempts)
			}
			e.checkAbandoned(name, hist, true)
		}
	}
}

// samePrev compares a reservation's Prev with Decide's, times to the
// millisecond.
func (e *env) samePrev(name string, got, want *ledger.Snapshot) {
	e.t.Helper()
	if (got == nil) != (want == nil) {
		e.t.Errorf("%s: Prev = %+v, Decide says %+v", name, got, want)
		return
	}
	if got == nil {
		return
	}
	if got.Status != want.Status || got.Attempts != want.Attempts || got.MaxAttempts != want.MaxAttempts ||
		got.ExitCode != want.ExitCode || got.HasExit != want.HasExit ||
		!sameTime(got.Finished, want.Finished) || !sameTime(got.Expires, want.Expires) {
		e.t.Errorf("%s: Prev = %+v, Decide says %+v", name, got, want)
	}
}

// checkAbandoned checks that the first attempt of hist ended as abandoned
// when it should have, and is still open otherwise when it was.
func (e *env) checkAbandoned(name string, hist []ledger.Attempt, abandoned bool) {
	e.t.Helper()
	if len(hist) == 0 {
		e.t.Errorf("%s: no history", name)
		return
	}
	first := hist[0]
	isAbandoned := first.Class == ledger.ClassAbandoned && first.HasExit && first.ExitCode == ledger.AbandonedExitCode &&
		!first.Ended.IsZero()
	if abandoned && !isAbandoned {
		e.t.Errorf("%s: the lost attempt is %+v, want it ended as abandoned (%d)", name, first, ledger.AbandonedExitCode)
	}
	if !abandoned && first.Class == ledger.ClassAbandoned {
		e.t.Errorf("%s: attempt %+v ended as abandoned, but no owner was", name, first)
	}
}
