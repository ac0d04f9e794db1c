package ledger_test

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/ledger"
)

var (
	t0    = time.Date(2026, 12, 2, 3, 17, 0, 0, time.UTC)
	alive = ledger.Owner{Host: "h", PID: 100}
	gone  = ledger.Owner{Host: "h", PID: 200}
)

func deadIsGone(o ledger.Owner) bool { return o == gone }

func TestLive(t *testing.T) {
	for _, tc := range []struct {
		name      string
		status    ledger.Status
		lease     time.Time
		owner     ledger.Owner
		ownerDead func(ledger.Owner) bool
		want      bool
	}{
		{"in progress, lease ahead", ledger.StatusInProgress, t0.Add(time.Second), alive, nil, true},
		{"in progress, lease ahead, owner alive", ledger.StatusInProgress, t0.Add(time.Second), alive, deadIsGone, true},
		{"in progress, lease ahead, owner dead", ledger.StatusInProgress, t0.Add(time.Second), gone, deadIsGone, false},
		{"in progress, lease ends now", ledger.StatusInProgress, t0, alive, nil, false},
		{"in progress, lease past", ledger.StatusInProgress, t0.Add(-time.Second), alive, nil, false},
		{"succeeded", ledger.StatusSucceeded, t0.Add(time.Hour), alive, nil, false},
		{"failed", ledger.StatusFailed, t0.Add(time.Hour), alive, nil, false},
		{"retryable", ledger.StatusRetryable, t0.Add(time.Hour), alive, nil, false},
	} {
		r := &ledger.Record{Status: tc.status, LeaseExpiry: tc.lease, Owner: tc.owner}
		if got := r.Live(t0, tc.ownerDead); got != tc.want {
			t.Errorf("%s: Live = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestDecide(t *testing.T) {
	started := t0.Add(-time.Minute)
	rec := func(status ledger.Status, attempts int, mod ...func(*ledger.Record)) *ledger.Record {
		r := &ledger.Record{Key: "evt:decide", Fingerprint: "fp", Status: status, Attempts: attempts, MaxAttempts: 3,
			Owner: alive, Started: started}
		switch status {
		case ledger.StatusInProgress:
			r.LeaseExpiry = t0.Add(time.Second)
		default:
			r.ExitCode, r.HasExit, r.Finished = 1, true, started.Add(time.Second)
		}
		for _, m := range mod {
			m(r)
		}
		return r
	}
	expired := func(r *ledger.Record) { r.Expires = t0 }
	notExpired := func(r *ledger.Record) { r.Expires = t0.Add(time.Millisecond) }
	leaseOver := func(r *ledger.Record) { r.LeaseExpiry = t0 }
	ownedByGone := func(r *ledger.Record) { r.Owner = gone }
	req := func(mod ...func(*ledger.ReserveRequest)) ledger.ReserveRequest {
		q := ledger.ReserveRequest{Key: "evt:decide", Fingerprint: "fp", MaxAttempts: 3, Owner: ledger.Owner{Host: "h", PID: 300},
			OwnerDead: deadIsGone}
		for _, m := range mod {
			m(&q)
		}
		return q
	}
	otherFP := func(q *ledger.ReserveRequest) { q.Fingerprint = "other" }
	rerun := func(q *ledger.ReserveRequest) { q.RerunFailed = true }
	budget := func(n int) func(*ledger.ReserveRequest) { return func(q *ledger.ReserveRequest) { q.MaxAttempts = n } }
	noOwnerDead := func(q *ledger.ReserveRequest) { q.OwnerDead = nil }
	snap := func(r *ledger.Record) *ledger.Snapshot { return r.Snapshot() }
	abandonedSnap := func(r *ledger.Record) *ledger.Snapshot {
		s := r.Snapshot()
		s.Status, s.ExitCode, s.HasExit = ledger.StatusRetryable, ledger.AbandonedExitCode, true
		return s
	}

	type want struct {
		action    ledger.Action
		expired   bool
		done      int
		prev      func(*ledger.Record) *ledger.Snapshot
		abandoned *ledger.Owner
	}
	for _, tc := range []struct {
		name string
		rec  *ledger.Record
		req  ledger.ReserveRequest
		want want
	}{
		{"no record", nil, req(), want{action: ledger.ActCreate}},
		{"no record, other fingerprint irrelevant", nil, req(otherFP), want{action: ledger.ActCreate}},
		{"succeeded", rec(ledger.StatusSucceeded, 1), req(), want{action: ledger.ActReplay}},
		{"succeeded, TTL ahead", rec(ledger.StatusSucceeded, 1, notExpired), req(), want{action: ledger.ActReplay}},
		{"succeeded, TTL over", rec(ledger.StatusSucceeded, 1, expired), req(), want{action: ledger.ActCreate, expired: true}},
		{"expired beats mismatch", rec(ledger.StatusSucceeded, 1, expired), req(otherFP), want{action: ledger.ActCreate, expired: true}},
		{"succeeded, rerun-failed does not apply", rec(ledger.StatusSucceeded, 1), req(rerun), want{action: ledger.ActReplay}},
		{"succeeded, other fingerprint", rec(ledger.StatusSucceeded, 1), req(otherFP), want{action: ledger.ActMismatch}},
		{"failed", rec(ledger.StatusFailed, 3), req(), want{action: ledger.ActReplay}},
		{"failed, rerun", rec(ledger.StatusFailed, 3), req(rerun), want{action: ledger.ActTake, done: 0, prev: snap}},
		{"failed, rerun, other fingerprint", rec(ledger.StatusFailed, 3), req(rerun, otherFP), want{action: ledger.ActMismatch}},
		{"failed, TTL over", rec(ledger.StatusFailed, 3, expired), req(), want{action: ledger.ActCreate, expired: true}},
		{"retryable, budget left", rec(ledger.StatusRetryable, 1), req(), want{action: ledger.ActTake, done: 1, prev: snap}},
		{"retryable, rerun changes nothing", rec(ledger.StatusRetryable, 2), req(rerun), want{action: ledger.ActTake, done: 2, prev: snap}},
		{"retryable, budget spent", rec(ledger.StatusRetryable, 3), req(), want{action: ledger.ActClose}},
		{"retryable, budget lowered below attempts", rec(ledger.StatusRetryable, 2), req(budget(1)), want{action: ledger.ActClose}},
		{"retryable, budget raised", rec(ledger.StatusRetryable, 3), req(budget(5)), want{action: ledger.ActTake, done: 3, prev: snap}},
		{"retryable, other fingerprint", rec(ledger.StatusRetryable, 1), req(otherFP), want{action: ledger.ActMismatch}},
		{"retryable, TTL over", rec(ledger.StatusRetryable, 3, expired), req(), want{action: ledger.ActCreate, expired: true}},
		{"in progress, live", rec(ledger.StatusInProgress, 1), req(), want{action: ledger.ActBusy}},
		{"in progress, live, no OwnerDead", rec(ledger.StatusInProgress, 1), req(noOwnerDead), want{action: ledger.ActBusy}},
		{"in progress, live, other fingerprint", rec(ledger.StatusInProgress, 1), req(otherFP), want{action: ledger.ActMismatch}},
		{"in progress, lease over", rec(ledger.StatusInProgress, 1, leaseOver), req(),
			want{action: ledger.ActTake, done: 1, prev: abandonedSnap, abandoned: &alive}},
		{"in progress, owner dead", rec(ledger.StatusInProgress, 2, ownedByGone), req(),
			want{action: ledger.ActTake, done: 2, prev: abandonedSnap, abandoned: &gone}},
		{"in progress, owner dead, no OwnerDead", rec(ledger.StatusInProgress, 2, ownedByGone), req(noOwnerDead),
			want{action: ledger.ActBusy}},
		{"in progress, lease over, last attempt", rec(ledger.StatusInProgress, 3, leaseOver), req(),
			want{action: ledger.ActAbandon, abandoned: &alive}},
		{"in progress, owner dead, budget lowered", rec(ledger.StatusInProgress, 2, ownedByGone), req(budget(2)),
			want{action: ledger.ActAbandon, abandoned: &gone}},
		{"in progress, lease over, rerun changes nothing", rec(ledger.StatusInProgress, 3, leaseOver), req(rerun),
			want{action: ledger.ActAbandon, abandoned: &alive}},
		{"in progress, lease over, other fingerprint", rec(ledger.StatusInProgress, 1, leaseOver), req(otherFP),
			want{action: ledger.ActMismatch}},
	} {
		d := ledger.Decide(tc.rec, tc.req, t0)
		w := tc.want
		if d.Action != w.action || d.Expired != w.expired || d.Done != w.done {
			t.Errorf("%s: Decide = %v (expired %v, done %d), want %v (expired %v, done %d)",
				tc.name, d.Action, d.Expired, d.Done, w.action, w.expired, w.done)
			continue
		}
		var prev *ledger.Snapshot
		if w.prev != nil {
			prev = w.prev(tc.rec)
		}
		if !reflect.DeepEqual(d.Prev, prev) {
			t.Errorf("%s: Prev = %+v, want %+v", tc.name, d.Prev, prev)
		}
		if !reflect.DeepEqual(d.Abandoned, w.abandoned) {
			t.Errorf("%s: Abandoned = %+v, want %+v", tc.name, d.Abandoned, w.abandoned)
		}
		var mismatch *ledger.MismatchError
		if (d.Action == ledger.ActMismatch) != errors.As(d.Err, &mismatch) || (mismatch != nil && mismatch.Record != tc.rec) {
			t.Errorf("%s: Err = %v", tc.name, d.Err)
		}
	}
}

func TestDecisionOutcome(t *testing.T) {
	for a, want := range map[ledger.Action]ledger.Outcome{
		ledger.ActCreate: ledger.Reserved, ledger.ActTake: ledger.Reserved,
		ledger.ActReplay: ledger.Replay, ledger.ActClose: ledger.Replay, ledger.ActAbandon: ledger.Replay,
		ledger.ActBusy: ledger.Busy, ledger.ActMismatch: 0,
	} {
		if got := (ledger.Decision{Action: a}).Outcome(); got != want {
			t.Errorf("%v: Outcome = %d, want %d", a, got, want)
		}
	}
}

func TestPlanSchema(t *testing.T) {
	ms := []ledger.Migration{{Version: 1, Compat: 1}, {Version: 2, Compat: 1}, {Version: 3, Compat: 3}}
	v := func(w, c int) ledger.SchemaVersions { return ledger.SchemaVersions{Write: w, Compat: c} }
	for _, tc := range []struct {
		name     string
		stored   ledger.SchemaVersions
		readOnly bool
		pending  []int // versions
		after    ledger.SchemaVersions
		err      string
	}{
		{"new ledger", v(0, 0), false, []int{1, 2, 3}, v(3, 3), ""},
		{"new ledger, read-only", v(0, 0), true, nil, v(0, 0), "no ledger"},
		{"current", v(3, 3), false, nil, v(3, 3), ""},
		{"current, read-only", v(3, 3), true, nil, v(3, 3), ""},
		{"older", v(1, 1), false, []int{2, 3}, v(3, 3), ""},
		{"older, one number", v(2, 0), false, []int{3}, v(3, 3), ""},
		{"older, read-only", v(1, 1), true, nil, v(1, 1), "older"},
		{"write ahead, compat known", v(5, 3), false, nil, v(5, 3), ""},
		{"write ahead, compat known, read-only", v(5, 2), true, nil, v(5, 2), ""},
		{"compat ahead", v(5, 4), false, nil, v(5, 4), "newer"},
		{"compat ahead, read-only", v(5, 4), true, nil, v(5, 4), "newer"},
		{"one number ahead", v(4, 0), false, nil, v(4, 0), "newer"},
	} {
		pending, err := ledger.PlanSchema(tc.stored, ms, tc.readOnly)
		var newer *ledger.NewerSchemaError
		var older *ledger.OlderSchemaError
		switch tc.err {
		case "":
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
		case "no ledger":
			if !errors.Is(err, ledger.ErrNoLedger) {
				t.Errorf("%s: err %v, want ErrNoLedger", tc.name, err)
			}
		case "older":
			if !errors.As(err, &older) {
				t.Errorf("%s: err %v, want *OlderSchemaError", tc.name, err)
			}
		case "newer":
			if !errors.As(err, &newer) {
				t.Errorf("%s: err %v, want *NewerSchemaError", tc.name, err)
			}
		}
		var got []int
		for _, m := range pending {
			got = append(got, m.Version)
		}
		if !reflect.DeepEqual(got, tc.pending) {
			t.Errorf("%s: pending %v, want %v", tc.name, got, tc.pending)
		}
		if after := tc.stored.After(pending); after != tc.after {
			t.Errorf("%s: After = %+v, want %+v", tc.name, after, tc.after)
		}
	}
}

func TestNewerSchemaMessage(t *testing.T) {
	for _, tc := range []struct {
		stored ledger.SchemaVersions
		want   string
	}{
		{ledger.SchemaVersions{Write: 2}, "written by a newer idem (schema v2; this idem knows v1)"},
		{ledger.SchemaVersions{Write: 2, Compat: 2}, "written by a newer idem (schema v2; this idem knows v1)"},
		{ledger.SchemaVersions{Write: 4, Compat: 2}, "written by a newer idem (schema v4, compatible from v2; this idem knows v1)"},
	} {
		if got := (&ledger.NewerSchemaError{Stored: tc.stored, Known: 1}).Error(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.stored, got, tc.want)
		}
	}
}

func TestCloseAtExit(t *testing.T) {
	closed := &fakeLedger{}
	if err := ledger.CloseAtExit(closed); err != nil || !closed.closed {
		t.Errorf("a backend without CloseAtExit: err %v, closed %v; want it closed", err, closed.closed)
	}
	kept := &keptOpen{}
	if err := ledger.CloseAtExit(kept); err != nil || kept.closed || !kept.atExit {
		t.Errorf("a backend with CloseAtExit: err %v, closed %v, CloseAtExit called %v; want only CloseAtExit", err, kept.closed, kept.atExit)
	}
}

type fakeLedger struct {
	ledger.Ledger
	closed bool
}

func (f *fakeLedger) Close() error { f.closed = true; return nil }

type keptOpen struct {
	fakeLedger
	atExit bool
}

func (k *keptOpen) CloseAtExit() error { k.atExit = true; return nil }

func TestPlanError(t *testing.T) {
	for _, tc := range []struct {
		err  error
		hint string
	}{
		{ledger.ErrNoLedger, "no-ledger hint"},
		{&ledger.NewerSchemaError{Stored: ledger.SchemaVersions{Write: 2}, Known: 1}, "newer hint"},
		{&ledger.OlderSchemaError{Stored: ledger.SchemaVersions{Write: 1}, Known: 2}, "run idem once to upgrade the ledger, then look again"},
	} {
		se := ledger.PlanError(tc.err, "/x/ledger.db", "no-ledger hint", "newer hint")
		if se.Op != "open" || se.Path != "/x/ledger.db" || !errors.Is(se, tc.err) || se.Hint != tc.hint {
			t.Errorf("PlanError(%v) = %+v, want Op open, the path, the error wrapped and hint %q", tc.err, se, tc.hint)
		}
	}
}
