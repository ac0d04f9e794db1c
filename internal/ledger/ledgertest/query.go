package ledgertest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/ledger"
)

// RunQuery runs the conformance suite of the operators' methods: List,
// Each, Purge, Vacuum and Metrics, and of what the run path records for
// them (stderr tails, reasons, counters).
func RunQuery(t *testing.T, open Opener) {
	tests := []struct {
		name string
		fn   func(*env)
	}{
		{"ListNewestOutcomeFirst", testListOrder},
		{"ListFilters", testListFilters},
		{"PurgeEmptySelector", testPurgeEmpty},
		{"PurgeKeysWithHistory", testPurgeKeys},
		{"PurgeOlderThanMeasuresOutcome", testPurgeOlderThan},
		{"PurgeSelectorsCombine", testPurgeCombine},
		{"PurgeExpired", testPurgeExpired},
		{"PurgeLiveNeedsForce", testPurgeLive},
		{"PurgeDryRunRemovesNothing", testPurgeDryRun},
		{"PurgeInChunks", testPurgeChunks},
		{"PurgeLeavesLaterReservations", testPurgeLater},
		{"VacuumReportsSizes", testVacuum},
	}
	for _, tt := range append(tests, opsTests...) {
		t.Run(tt.name, func(t *testing.T) { tt.fn(newEnv(t, open)) })
	}
}

// set moves the clock to t (backwards too).
func (c *Clock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// outcome creates key with one attempt that ends with status at the
// clock's time, and returns its reservation.
func (e *env) outcome(key string, status ledger.Status, ttl time.Duration) *ledger.Reservation {
	e.t.Helper()
	res := e.reserve(request(key, ownerA))
	e.mustOutcome(res, ledger.Reserved)
	code, class := 0, ledger.ClassSuccess
	switch status {
	case ledger.StatusFailed:
		code, class = 1, ledger.ClassPermanent
	case ledger.StatusRetryable:
		code, class = 75, ledger.ClassInterrupted
	}
	if err := e.l.Finish(e.ctx, ledger.FinishRequest{Key: key, Token: res.Token, AttemptID: res.AttemptID,
		Status: status, ExitCode: code, ExitSource: "child", Class: class, Duration: time.Second, TTL: ttl,
		OutputStored: true, Stdout: []byte("out " + key), Stderr: []byte("err " + key)}); err != nil {
		e.t.Fatalf("Finish(%s): %v", key, err)
	}
	return res
}

func (e *env) list(f ledger.ListFilter) []string {
	e.t.Helper()
	recs, err := e.l.List(e.ctx, f)
	if err != nil {
		e.t.Fatalf("List(%+v): %v", f, err)
	}
	keys := make([]string, len(recs))
	for i, r := range recs {
		keys[i] = r.Key
	}
	return keys
}

func (e *env) purge(req ledger.PurgeRequest) *ledger.PurgeResult {
	e.t.Helper()
	res, err := e.l.Purge(e.ctx, req)
	if err != nil {
		e.t.Fatalf("Purge(%+v): %v", req, err)
	}
	return res
}

// present returns the keys among keys that Get still finds.
func (e *env) present(keys ...string) []string {
	e.t.Helper()
	var out []string
	for _, k := range keys {
		_, err := e.l.Get(e.ctx, k)
		switch {
		case err == nil:
			out = append(out, k)
		case !errors.Is(err, ledger.ErrNotFound):
			e.t.Fatalf("Get(%s): %v", k, err)
		}
	}
	return out
}

func liveKeys(recs []*ledger.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.Key
	}
	return out
}

func testListOrder(e *env) {
	t := e.t
	t0 := e.clock.Now()
	e.outcome("evt:list:a", ledger.StatusRetryable, 0) // outcome t0, again at t0+3m below
	e.clock.Advance(time.Minute)
	e.outcome("evt:list:b", ledger.StatusSucceeded, 0) // outcome t0+1m
	e.clock.Advance(time.Minute)
	e.reserve(request("evt:list:c", ownerA)) // in progress since t0+2m
	e.clock.Advance(time.Minute)
	again := e.reserve(request("evt:list:a", ownerB))
	e.mustOutcome(again, ledger.Reserved)
	e.finish("evt:list:a", again, ledger.StatusSucceeded, 0, ledger.ClassSuccess) // outcome t0+3m
	e.clock.Advance(time.Minute)
	// A replay is not an outcome: b stays where it was.
	e.mustOutcome(e.reserve(request("evt:list:b", ownerB)), ledger.Replay)

	recs, err := e.l.List(e.ctx, ledger.ListFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := liveKeys(recs), []string{"evt:list:a", "evt:list:c", "evt:list:b"}; !slices.Equal(got, want) {
		t.Fatalf("List order %q, want %q", got, want)
	}
	a, c, b := recs[0], recs[1], recs[2]
	if a.Status != ledger.StatusSucceeded || a.Attempts != 2 || !a.HasExit || a.ExitCode != 0 {
		t.Errorf("a = %+v", a)
	}
	e.checkTime("a.Created", a.Created, t0)
	e.checkTime("a.Finished", a.Finished, t0.Add(3*time.Minute))
	if c.Status != ledger.StatusInProgress || c.Owner.PID != ownerA.PID || c.Owner.Host != ownerA.Host || c.Token == 0 {
		t.Errorf("c = %+v", c)
	}
	e.checkTime("c.LeaseExpiry", c.LeaseExpiry, t0.Add(2*time.Minute+lease))
	if b.Replays != 1 {
		t.Errorf("b.Replays = %d, want 1", b.Replays)
	}
	e.checkTime("b.LastReplay", b.LastReplay, t0.Add(4*time.Minute))
	for _, r := range recs {
		if r.Stdout != nil || r.Stderr != nil {
			t.Errorf("%s: List returned output (%q, %q); it must not", r.Key, r.Stdout, r.Stderr)
		}
		if len(r.Command) != len(argv1) || r.Fingerprint != fp1 {
			t.Errorf("%s: command %q fingerprint %q", r.Key, r.Command, r.Fingerprint)
		}
	}
}

func testListFilters(e *env) {
	t := e.t
	t0 := e.clock.Now()
	// Outcomes one minute apart, oldest first.
	e.outcome("evt:f:ok-1", ledger.StatusSucceeded, 0)
	e.clock.Advance(time.Minute)
	e.outcome("evt:f:bad-1", ledger.StatusFailed, 0)
	e.clock.Advance(time.Minute)
	e.outcome("job:f:ok-2", ledger.StatusSucceeded, 0)
	e.clock.Advance(time.Minute)
	e.outcome("evt:f:retry", ledger.StatusRetryable, 0)
	e.clock.Advance(time.Minute)
	e.outcome("evt:f:ttl-gone", ledger.StatusSucceeded, time.Second)
	e.clock.Advance(time.Minute) // ttl-gone expired; List still shows it
	e.reserve(request("evt:f:running", ownerA))

	for _, tc := range []struct {
		name string
		f    ledger.ListFilter
		want []string
	}{
		{"all", ledger.ListFilter{}, []string{"evt:f:running", "evt:f:ttl-gone", "evt:f:retry", "job:f:ok-2", "evt:f:bad-1", "evt:f:ok-1"}},
		{"limit", ledger.ListFilter{Limit: 2}, []string{"evt:f:running", "evt:f:ttl-gone"}},
		{"one status", ledger.ListFilter{Statuses: []ledger.Status{ledger.StatusSucceeded}}, []string{"evt:f:ttl-gone", "job:f:ok-2", "evt:f:ok-1"}},
		{"two statuses", ledger.ListFilter{Statuses: []ledger.Status{ledger.StatusFailed, ledger.StatusInProgress}}, []string{"evt:f:running", "evt:f:bad-1"}},
		{"prefix", ledger.ListFilter{Prefix: "job:"}, []string{"job:f:ok-2"}},
		{"prefix is literal", ledger.ListFilter{Prefix: "evt:f:ok-"}, []string{"evt:f:ok-1"}},
		{"prefix with glob characters", ledger.ListFilter{Prefix: "evt:f:*"}, nil},
		{"prefix no match", ledger.ListFilter{Prefix: "evt:g"}, nil},
		{"since inclusive", ledger.ListFilter{Since: t0.Add(3 * time.Minute)}, []string{"evt:f:running", "evt:f:ttl-gone", "evt:f:retry"}},
		{"everything combined", ledger.ListFilter{Statuses: []ledger.Status{ledger.StatusSucceeded, ledger.StatusRetryable},
			Prefix: "evt:", Since: t0.Add(time.Minute), Limit: 1}, []string{"evt:f:ttl-gone"}},
	} {
		if got := e.list(tc.f); !slices.Equal(got, tc.want) {
			t.Errorf("%s: List = %q, want %q", tc.name, got, tc.want)
		}
	}
	recs, err := e.l.List(e.ctx, ledger.ListFilter{Prefix: "evt:f:ttl"})
	if err != nil || len(recs) != 1 || !recs[0].Expired(e.clock.Now()) {
		t.Errorf("expired record: %v %+v, want listed and Expired", err, recs)
	}
	if _, err := e.l.List(e.ctx, ledger.ListFilter{Statuses: []ledger.Status{"done"}}); err == nil {
		t.Errorf("List with status %q: no error", "done")
	}
}

func testPurgeEmpty(e *env) {
	e.outcome("evt:empty:kept", ledger.StatusSucceeded, 0)
	for _, req := range []ledger.PurgeRequest{{}, {Force: true}, {DryRun: true}} {
		if _, err := e.l.Purge(e.ctx, req); !errors.Is(err, ledger.ErrEmptySelector) {
			e.t.Errorf("Purge(%+v) = %v, want ErrEmptySelector", req, err)
		}
	}
	if got := e.present("evt:empty:kept"); len(got) != 1 {
		e.t.Errorf("an empty selector removed a record")
	}
}

func testPurgeKeys(e *env) {
	t := e.t
	a := e.outcome("evt:keys:a", ledger.StatusSucceeded, 0)
	e.outcome("evt:keys:b", ledger.StatusFailed, 0)
	res := e.purge(ledger.PurgeRequest{Selector: ledger.Selector{Keys: []string{"evt:keys:zz-missing", "evt:keys:a", "evt:keys:a"}}})
	if res.Removed != 1 || !slices.Equal(res.Missing, []string{"evt:keys:zz-missing"}) || len(res.Live) != 0 || res.Keys != nil {
		t.Errorf("Purge = %+v, want 1 removed, the missing key named", res)
	}
	if got := e.present("evt:keys:a", "evt:keys:b"); !slices.Equal(got, []string{"evt:keys:b"}) {
		t.Errorf("left %q, want only b", got)
	}
	if h := e.history("evt:keys:a"); len(h) != 0 {
		t.Errorf("history of a purged key: %+v", h)
	}
	if h := e.history("evt:keys:b"); len(h) != 1 {
		t.Errorf("history of b: %d attempts, want 1", len(h))
	}
	// The token counter is not reset: a re-created key gets a new token.
	again := e.reserve(request("evt:keys:a", ownerB))
	e.mustOutcome(again, ledger.Reserved)
	if again.Token <= a.Token || again.Attempt != 1 {
		t.Errorf("re-created key: token %d attempt %d, want token above %d, attempt 1", again.Token, again.Attempt, a.Token)
	}
}

func testPurgeOlderThan(e *env) {
	t := e.t
	const day = 24 * time.Hour
	t0 := e.clock.Now()
	e.outcome("evt:age:old-replayed", ledger.StatusSucceeded, 0)
	e.reserve(request("evt:age:old-abandoned", ownerA)) // in progress since t0; lease long gone
	e.outcome("evt:age:old-retry", ledger.StatusRetryable, 0)
	e.clock.set(t0.Add(10 * day))
	e.outcome("evt:age:boundary", ledger.StatusFailed, 0) // exactly 30d old at the purge
	e.clock.set(t0.Add(39 * day))
	// Replayed yesterday: still old. Run again yesterday: young.
	e.mustOutcome(e.reserve(request("evt:age:old-replayed", ownerB)), ledger.Replay)
	r := e.reserve(request("evt:age:old-retry", ownerB))
	e.mustOutcome(r, ledger.Reserved)
	e.finish("evt:age:old-retry", r, ledger.StatusSucceeded, 0, ledger.ClassSuccess)
	e.outcome("evt:age:young", ledger.StatusSucceeded, 0)
	e.clock.set(t0.Add(40 * day))

	// The abandoned in_progress record is old, but its processes may
	// still run: kept without --force, and named.
	dry := e.purge(ledger.PurgeRequest{Selector: ledger.Selector{OlderThan: 30 * day}, DryRun: true})
	want := []string{"evt:age:old-replayed"}
	if !slices.Equal(dry.Keys, want) || dry.Removed != 1 || len(dry.Live) != 1 {
		t.Errorf("dry run: %+v, want %q", dry, want)
	}
	res := e.purge(ledger.PurgeRequest{Selector: ledger.Selector{OlderThan: 30 * day}})
	if res.Removed != 1 || len(res.Live) != 1 || res.Live[0].Key != "evt:age:old-abandoned" {
		t.Errorf("Purge = %+v, want 1 removed, the abandoned one kept", res)
	}
	if res := e.purge(ledger.PurgeRequest{Selector: ledger.Selector{Keys: []string{"evt:age:old-abandoned"}}, Force: true}); res.Removed != 1 {
		t.Errorf("with force: %+v, want the abandoned one removed", res)
	}
	all := []string{"evt:age:old-replayed", "evt:age:old-abandoned", "evt:age:old-retry", "evt:age:boundary", "evt:age:young"}
	if got := e.present(all...); !slices.Equal(got, []string{"evt:age:old-retry", "evt:age:boundary", "evt:age:young"}) {
		t.Errorf("left %q", got)
	}
	e.clock.Advance(time.Millisecond)
	if res := e.purge(ledger.PurgeRequest{Selector: ledger.Selector{OlderThan: 30 * day}}); res.Removed != 1 {
		t.Errorf("1 ms later: removed %d, want the boundary record", res.Removed)
	}
}

func testPurgeCombine(e *env) {
	t := e.t
	e.outcome("evt:c:a:failed", ledger.StatusFailed, 0)
	e.outcome("evt:c:a:ok-old", ledger.StatusSucceeded, 0)
	e.outcome("evt:c:b:failed", ledger.StatusFailed, 0)
	e.clock.Advance(2 * time.Hour)
	e.outcome("evt:c:a:failed-new", ledger.StatusFailed, 0)
	res := e.purge(ledger.PurgeRequest{Selector: ledger.Selector{Statuses: []ledger.Status{ledger.StatusFailed},
		Prefix: "evt:c:a:", OlderThan: time.Hour}})
	if res.Removed != 1 {
		t.Errorf("removed %d, want 1", res.Removed)
	}
	all := []string{"evt:c:a:failed", "evt:c:a:ok-old", "evt:c:b:failed", "evt:c:a:failed-new"}
	if got := e.present(all...); !slices.Equal(got, all[1:]) {
		t.Errorf("left %q, want %q", got, all[1:])
	}
	// Keys combine with conditions too: a named key that does not match stays.
	res = e.purge(ledger.PurgeRequest{Selector: ledger.Selector{Keys: []string{"evt:c:a:ok-old", "evt:c:b:failed"},
		Statuses: []ledger.Status{ledger.StatusSucceeded}}})
	if res.Removed != 1 || len(res.Missing) != 0 {
		t.Errorf("keys and status: %+v, want 1 removed", res)
	}
	if got := e.present(all...); !slices.Equal(got, all[2:]) {
		t.Errorf("left %q, want %q", got, all[2:])
	}
	if _, err := e.l.Purge(e.ctx, ledger.PurgeRequest{Selector: ledger.Selector{Statuses: []ledger.Status{"gone"}}}); err == nil {
		t.Errorf("Purge with status %q: no error", "gone")
	}
}

func testPurgeExpired(e *env) {
	t := e.t
	e.outcome("evt:exp:short", ledger.StatusSucceeded, time.Minute)
	e.outcome("evt:exp:short-failed", ledger.StatusFailed, time.Minute)
	e.outcome("evt:exp:long", ledger.StatusSucceeded, time.Hour)
	e.outcome("evt:exp:never", ledger.StatusSucceeded, 0)
	e.clock.Advance(time.Minute)
	res := e.purge(ledger.PurgeRequest{Selector: ledger.Selector{Expired: true, Statuses: []ledger.Status{ledger.StatusSucceeded}}})
	if res.Removed != 1 {
		t.Errorf("expired+succeeded: removed %d, want 1", res.Removed)
	}
	res = e.purge(ledger.PurgeRequest{Selector: ledger.Selector{Expired: true}})
	if res.Removed != 1 {
		t.Errorf("expired: removed %d, want 1", res.Removed)
	}
	all := []string{"evt:exp:short", "evt:exp:short-failed", "evt:exp:long", "evt:exp:never"}
	if got := e.present(all...); !slices.Equal(got, all[2:]) {
		t.Errorf("left %q, want %q", got, all[2:])
	}
}

func testPurgeLive(e *env) {
	t := e.t
	stale := e.reserve(request("evt:live:stale", ownerA))
	e.clock.Advance(lease) // stale's lease is over; its processes may still run
	live := e.reserve(request("evt:live:running", ownerB))
	e.outcome("evt:live:done", ledger.StatusSucceeded, 0)
	sel := ledger.Selector{Statuses: []ledger.Status{ledger.StatusInProgress}}

	res := e.purge(ledger.PurgeRequest{Selector: sel})
	if res.Removed != 0 || len(res.Live) != 2 {
		t.Fatalf("without force: %+v, want both in_progress rows kept, the expired one too", res)
	}
	if l := res.Live[1]; l.Key != "evt:live:stale" || l.Owner.PID != ownerA.PID || l.Token != stale.Token {
		t.Errorf("kept expired record %+v", l)
	}
	if l := res.Live[0]; l.Key != "evt:live:running" || l.Owner.PID != ownerB.PID || l.Token != live.Token {
		t.Errorf("kept live record %+v", l)
	}
	e.checkTime("kept LeaseExpiry", res.Live[0].LeaseExpiry, e.clock.Now().Add(lease))
	if got := e.present("evt:live:stale", "evt:live:running", "evt:live:done"); !slices.Equal(got, []string{"evt:live:stale", "evt:live:running", "evt:live:done"}) {
		t.Errorf("left %q", got)
	}
	res = e.purge(ledger.PurgeRequest{Selector: ledger.Selector{Keys: []string{"evt:live:stale"}}, Force: true})
	if res.Removed != 1 || len(res.Live) != 1 {
		t.Fatalf("expired with force: %+v, want it removed and named", res)
	}
	if err := e.l.Renew(e.ctx, "evt:live:stale", stale.Token, lease); !errors.Is(err, ledger.ErrLeaseLost) {
		t.Errorf("Renew by the purged stale owner: %v, want ErrLeaseLost", err)
	}
	// --all without force keeps it too.
	res = e.purge(ledger.PurgeRequest{Selector: ledger.Selector{All: true}, DryRun: true})
	if !slices.Equal(res.Keys, []string{"evt:live:done"}) || len(res.Live) != 1 {
		t.Errorf("dry run of all: %+v", res)
	}

	res = e.purge(ledger.PurgeRequest{Selector: sel, Force: true})
	if res.Removed != 1 || len(res.Live) != 1 || res.Live[0].Key != "evt:live:running" {
		t.Errorf("with force: %+v, want the live row removed and named", res)
	}
	if got := e.present("evt:live:running"); len(got) != 0 {
		t.Errorf("live row survived --force")
	}
	// Its owner finds out at its next write.
	err := e.l.Finish(e.ctx, ledger.FinishRequest{Key: "evt:live:running", Token: live.Token, AttemptID: live.AttemptID,
		Status: ledger.StatusSucceeded, ExitSource: "child", Class: ledger.ClassSuccess, OutputStored: true})
	if !errors.Is(err, ledger.ErrLeaseLost) {
		t.Errorf("Finish by the purged owner: %v, want ErrLeaseLost", err)
	}
	if got := e.present("evt:live:running"); len(got) != 0 {
		t.Errorf("the purged owner's Finish re-created its record")
	}
}

func testPurgeDryRun(e *env) {
	t := e.t
	keys := []string{"evt:dry:1", "evt:dry:2", "evt:dry:3"}
	for _, k := range keys {
		e.outcome(k, ledger.StatusFailed, time.Second)
	}
	e.clock.Advance(time.Hour)
	for _, sel := range []ledger.Selector{{All: true}, {Keys: keys}, {Prefix: "evt:dry:"}, {Expired: true}, {OlderThan: time.Minute}} {
		res := e.purge(ledger.PurgeRequest{Selector: sel, DryRun: true})
		if res.Removed != 3 || !slices.Equal(res.Keys, keys) {
			t.Errorf("dry run %+v: %+v, want all three listed", sel, res)
		}
	}
	if got := e.present(keys...); !slices.Equal(got, keys) {
		t.Errorf("dry run removed records: left %q", got)
	}
	for _, k := range keys {
		if h := e.history(k); len(h) != 1 {
			t.Errorf("dry run touched the history of %s: %+v", k, h)
		}
	}
}

func testPurgeChunks(e *env) {
	t := e.t
	var keys []string
	for i := range 10 {
		k := fmt.Sprintf("evt:chunk:%02d", i)
		keys = append(keys, k)
		if i == 4 {
			e.reserve(request(k, ownerA)) // live, in the middle of a chunk
			continue
		}
		e.outcome(k, ledger.StatusSucceeded, 0)
	}
	dry := e.purge(ledger.PurgeRequest{Selector: ledger.Selector{All: true}, DryRun: true, Chunk: 3})
	want := slices.Delete(slices.Clone(keys), 4, 5)
	if !slices.Equal(dry.Keys, want) || dry.Removed != 9 || len(dry.Live) != 1 {
		t.Errorf("dry run in chunks of 3: %+v", dry)
	}
	res := e.purge(ledger.PurgeRequest{Selector: ledger.Selector{All: true}, Chunk: 3})
	if res.Removed != 9 || len(res.Live) != 1 || res.Live[0].Key != "evt:chunk:04" {
		t.Errorf("purge in chunks of 3: %+v", res)
	}
	if got := e.present(keys...); !slices.Equal(got, []string{"evt:chunk:04"}) {
		t.Errorf("left %q", got)
	}
}

func testPurgeLater(e *env) {
	t := e.t
	start := e.clock.Now()
	e.outcome("evt:later:before", ledger.StatusSucceeded, 0)
	e.clock.Advance(time.Second)
	e.outcome("evt:later:after", ledger.StatusSucceeded, 0)
	// A purge whose clock reads between the two runs leaves the second alone,
	// as it would a run that started while the purge was going on.
	e.clock.set(start.Add(500 * time.Millisecond))
	res := e.purge(ledger.PurgeRequest{Selector: ledger.Selector{All: true}, Force: true})
	if res.Removed != 1 {
		t.Errorf("removed %d, want 1", res.Removed)
	}
	if got := e.present("evt:later:before", "evt:later:after"); !slices.Equal(got, []string{"evt:later:after"}) {
		t.Errorf("left %q", got)
	}
}

func testVacuum(e *env) {
	t := e.t
	for i := range 50 {
		e.outcome(fmt.Sprintf("evt:vacuum:%03d", i), ledger.StatusSucceeded, 0)
	}
	if res := e.purge(ledger.PurgeRequest{Selector: ledger.Selector{All: true}}); res.Removed != 50 {
		t.Fatalf("removed %d, want 50", res.Removed)
	}
	v, err := e.l.Vacuum(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v.Before <= 0 || v.After <= 0 || v.After > v.Before {
		t.Errorf("Vacuum sizes %+v", v)
	}
	// The ledger still works.
	e.outcome("evt:vacuum:after", ledger.StatusSucceeded, 0)
}
