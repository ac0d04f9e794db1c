package ledgertest

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/idemhq/idem/internal/ledger"
)

// opsTests are the conformance tests of what operators read: why a run
// failed, the metrics, and listings that stream. RunQuery runs them.
var opsTests = []struct {
	name string
	fn   func(*env)
}{
	{"WhyItFailed", testWhyItFailed},
	{"NoOutputStoresNoTail", testNoOutputNoTail},
	{"CountersNeverGoDown", testCountersNeverGoDown},
	{"MetricsGauges", testMetricsGauges},
	{"LastSuccessOutlivesPurge", testLastSuccessOutlivesPurge},
	{"EachStreamsPages", testEachStreams},
	{"EachPagesAgree", testEachPagesAgree},
}

// testWhyItFailed: every attempt keeps the end of its own stderr, the
// record the class and last stderr line of its last attempt, and where
// and as whom it ran.
func testWhyItFailed(e *env) {
	const key = "evt:why:1"
	req := request(key, ownerA)
	req.Cwd, req.User = "/srv/app", "deploy"
	res := e.reserve(req)
	if err := e.l.EndAttempt(e.ctx, ledger.AttemptEnd{Key: key, Token: res.Token, AttemptID: res.AttemptID, ExitCode: 75,
		Class: ledger.ClassTransient, Delay: time.Second, StderrTail: []byte("first try\nconnection refused\n")}); err != nil {
		e.t.Fatalf("EndAttempt: %v", err)
	}
	_, id, err := e.l.StartAttempt(e.ctx, key, res.Token, lease)
	if err != nil {
		e.t.Fatalf("StartAttempt: %v", err)
	}
	long := append(bytes.Repeat([]byte("x"), 2*ledger.TailMax), "\n\x1b[31mdisk full\x1b[0m\n\n"...)
	if err := e.l.Finish(e.ctx, ledger.FinishRequest{Key: key, Token: res.Token, AttemptID: id, Status: ledger.StatusFailed,
		ExitCode: 2, ExitSource: "child", Class: ledger.ClassPermanent, OutputStored: true, Stderr: long[:100],
		StderrTruncated: true, StderrTail: long}); err != nil {
		e.t.Fatalf("Finish: %v", err)
	}
	rec := e.get(key)
	if rec.Class != ledger.ClassPermanent || rec.Reason != "\x1b[31mdisk full\x1b[0m" || rec.Cwd != "/srv/app" || rec.User != "deploy" {
		e.t.Errorf("record class %q reason %q cwd %q user %q; want permanent, the last stderr line, /srv/app, deploy",
			rec.Class, rec.Reason, rec.Cwd, rec.User)
	}
	h := e.history(key)
	if len(h) != 2 {
		e.t.Fatalf("history has %d attempts, want 2", len(h))
	}
	if got := string(h[0].StderrTail); got != "first try\nconnection refused\n" {
		e.t.Errorf("attempt 1 tail %q, want its own stderr", got)
	}
	if !bytes.Equal(h[1].StderrTail, ledger.Tail(long)) || len(h[1].StderrTail) != ledger.TailMax {
		e.t.Errorf("attempt 2 tail of %d bytes, want the last %d of its stderr", len(h[1].StderrTail), ledger.TailMax)
	}
	// Listings carry the reason too, without the output.
	recs, err := e.l.List(e.ctx, ledger.ListFilter{Prefix: "evt:why:"})
	if err != nil || len(recs) != 1 || recs[0].Reason != rec.Reason || recs[0].Class != rec.Class || recs[0].Stderr != nil {
		e.t.Errorf("List: %v, %v; want the record with its reason and class, no output", recs, err)
	}
}

// testNoOutputNoTail: with --no-output nothing of the output is stored,
// tails and reason included.
func testNoOutputNoTail(e *env) {
	const key = "evt:why:secret"
	res := e.reserve(request(key, ownerA))
	if err := e.l.Finish(e.ctx, ledger.FinishRequest{Key: key, Token: res.Token, AttemptID: res.AttemptID,
		Status: ledger.StatusFailed, ExitCode: 1, ExitSource: "child", Class: ledger.ClassPermanent, OutputStored: false,
		StderrTail: []byte("password=hunter2\n")}); err != nil {
		e.t.Fatalf("Finish: %v", err)
	}
	if rec := e.get(key); rec.Reason != "" || rec.Stderr != nil {
		e.t.Errorf("reason %q stderr %q, want none stored", rec.Reason, rec.Stderr)
	}
	if h := e.history(key); len(h) != 1 || h[0].StderrTail != nil {
		e.t.Errorf("history %+v, want one attempt without a tail", h)
	}
}

func (e *env) metrics(req ledger.MetricsRequest) *ledger.Metrics {
	e.t.Helper()
	m, err := e.l.Metrics(e.ctx, req)
	if err != nil {
		e.t.Fatalf("Metrics: %v", err)
	}
	return m
}

// testCountersNeverGoDown: runs, attempts and replays are counted, and
// purging or expiring records moves their counts to the totals.
func testCountersNeverGoDown(e *env) {
	e.outcome("evt:cnt:ok", ledger.StatusSucceeded, 0)
	for range 2 {
		e.mustOutcome(e.reserve(request("evt:cnt:ok", ownerA)), ledger.Replay)
	}
	e.outcome("evt:cnt:bad", ledger.StatusFailed, 0)
	e.outcome("evt:cnt:again", ledger.StatusRetryable, 0)
	e.outcome("evt:cnt:ttl", ledger.StatusSucceeded, time.Minute)
	m1 := e.metrics(ledger.MetricsRequest{})
	want := ledger.Counters{Replays: 2, RunsSucceeded: 2, RunsFailed: 1, RunsRetryable: 1,
		AttemptsSuccess: 2, AttemptsPermanent: 1, AttemptsInterrupted: 1}
	if m1.Counters != want {
		e.t.Errorf("counters %+v, want %+v", m1.Counters, want)
	}
	if m1.Records[ledger.StatusSucceeded] != 2 || m1.Records[ledger.StatusFailed] != 1 || m1.Records[ledger.StatusRetryable] != 1 {
		e.t.Errorf("records by status %v", m1.Records)
	}

	// The TTL runs out, and a run of that key finds it expired.
	e.clock.Advance(2 * time.Minute)
	if m := e.metrics(ledger.MetricsRequest{}); m.Expired != 1 || m.Records[ledger.StatusSucceeded] != 1 {
		e.t.Errorf("after the TTL: expired %d, succeeded %d; want 1 and 1", m.Expired, m.Records[ledger.StatusSucceeded])
	}
	res := e.reserve(request("evt:cnt:ttl", ownerA))
	e.mustOutcome(res, ledger.Reserved)
	e.finish("evt:cnt:ttl", res, ledger.StatusSucceeded, 0, ledger.ClassSuccess)
	e.purge(ledger.PurgeRequest{Selector: ledger.Selector{Keys: []string{"evt:cnt:ok", "evt:cnt:bad"}}})
	m2 := e.metrics(ledger.MetricsRequest{})
	want.RunsSucceeded++
	want.AttemptsSuccess++
	if m2.Counters != want || m2.Purged != 2 || m2.ExpiredRemoved != 1 {
		e.t.Errorf("after purge and expiry: counters %+v purged %d expired %d; want %+v, 2 and 1", m2.Counters, m2.Purged, m2.ExpiredRemoved, want)
	}
	if m2.Records[ledger.StatusSucceeded] != 1 || m2.Records[ledger.StatusFailed] != 0 {
		e.t.Errorf("records by status after purge: %v", m2.Records)
	}
}

// testMetricsGauges: in-progress keys, stuck ones, the oldest, and the
// last success of each group, capped.
func testMetricsGauges(e *env) {
	start := e.clock.Now()
	e.reserve(request("job:gauge:old", ownerA))
	e.clock.Advance(time.Minute) // past the lease: stuck
	e.reserve(request("job:gauge:live", ownerB))
	e.clock.Advance(time.Second)
	for i, g := range []string{"gamma", "alpha", "beta", "alpha"} {
		e.clock.Advance(time.Second)
		e.outcome(fmt.Sprintf("%s:gauge:%d", g, i), ledger.StatusSucceeded, 0)
	}
	alphaLast := e.clock.Now()
	e.outcome("nosep-gauge", ledger.StatusSucceeded, 0)
	e.outcome("zeta:gauge:fail", ledger.StatusFailed, 0)
	m := e.metrics(ledger.MetricsRequest{MaxGroups: 2})
	if m.Records[ledger.StatusInProgress] != 2 || m.Stuck != 1 || !sameTime(m.OldestInProgress, start) {
		e.t.Errorf("in progress %d, stuck %d, oldest %v; want 2, 1, %v", m.Records[ledger.StatusInProgress], m.Stuck, m.OldestInProgress, start)
	}
	if len(m.LastSuccess) != 2 || m.LastSuccess[0].Group != "alpha" || m.LastSuccess[1].Group != "beta" ||
		!sameTime(m.LastSuccess[0].Last, alphaLast) {
		e.t.Errorf("groups %+v; want alpha (last at %v) and beta", m.LastSuccess, alphaLast)
	}
	if m.OtherGroups != 2 || !sameTime(m.Other, e.clock.Now()) {
		e.t.Errorf("other: %d groups, last %v; want gamma and nosep-gauge, last %v", m.OtherGroups, m.Other, e.clock.Now())
	}
	m = e.metrics(ledger.MetricsRequest{Separator: "-"})
	var groups []string
	for _, g := range m.LastSuccess {
		groups = append(groups, g.Group)
	}
	if want := []string{"alpha:gauge:1", "alpha:gauge:3", "beta:gauge:2", "gamma:gauge:0", "nosep"}; !slices.Equal(groups, want) {
		e.t.Errorf("groups by \"-\": %q, want %q", groups, want)
	}
}

// testLastSuccessOutlivesPurge: purging a group's records keeps its last
// success in the metrics (a staleness alert on it can still fire), and a
// later success moves it on.
func testLastSuccessOutlivesPurge(e *env) {
	e.outcome("backup:2026-11-01", ledger.StatusSucceeded, 0)
	e.clock.Advance(time.Second)
	e.outcome("backup:2026-11-02", ledger.StatusSucceeded, 0)
	backupLast := e.clock.Now()
	e.clock.Advance(time.Second)
	e.outcome("backup:2026-11-03", ledger.StatusFailed, 0)
	e.outcome("report.daily:2026-11-03", ledger.StatusSucceeded, 0)
	reportLast := e.clock.Now()
	e.outcome("never:2026-11-03", ledger.StatusFailed, 0)
	e.purge(ledger.PurgeRequest{Selector: ledger.Selector{All: true}})
	groups := func(m *ledger.Metrics) map[string]time.Time {
		out := map[string]time.Time{}
		for _, g := range m.LastSuccess {
			out[g.Group] = g.Last
		}
		return out
	}
	m := e.metrics(ledger.MetricsRequest{})
	got := groups(m)
	if len(got) != 2 || !sameTime(got["backup"], backupLast) || !sameTime(got["report.daily"], reportLast) {
		e.t.Errorf("after purging every record: groups %v; want backup at %v and report.daily at %v, kept", got, backupLast, reportLast)
	}
	if m.Records[ledger.StatusSucceeded] != 0 {
		e.t.Errorf("after purging every record: %d succeeded records", m.Records[ledger.StatusSucceeded])
	}
	if got := groups(e.metrics(ledger.MetricsRequest{Separator: "."})); !sameTime(got["report"], reportLast) {
		e.t.Errorf("groups by \".\": %v; want report at %v", got, reportLast)
	}
	e.clock.Advance(time.Minute)
	e.outcome("backup:2026-11-04", ledger.StatusSucceeded, 0)
	newer := e.clock.Now()
	if got := groups(e.metrics(ledger.MetricsRequest{})); !sameTime(got["backup"], newer) {
		e.t.Errorf("a new success: backup at %v, want %v", got["backup"], newer)
	}
	e.purge(ledger.PurgeRequest{Selector: ledger.Selector{Keys: []string{"backup:2026-11-04"}}})
	if got := groups(e.metrics(ledger.MetricsRequest{})); !sameTime(got["backup"], newer) {
		e.t.Errorf("the new success purged: backup at %v, want %v", got["backup"], newer)
	}
}

// testEachStreams: Each hands over each page before it reads the next,
// so records removed while the first is being handled are not listed.
func testEachStreams(e *env) {
	for i := range 5 {
		e.outcome(fmt.Sprintf("evt:stream:%d", i), ledger.StatusSucceeded, 0)
	}
	var got []string
	err := e.l.Each(e.ctx, ledger.ListFilter{PageSize: 2}, func(r *ledger.Record) error {
		if len(got) == 0 {
			e.purge(ledger.PurgeRequest{Selector: ledger.Selector{All: true}})
		}
		got = append(got, r.Key)
		return nil
	})
	if err != nil {
		e.t.Fatalf("Each: %v", err)
	}
	if want := []string{"evt:stream:4", "evt:stream:3"}; !slices.Equal(got, want) {
		e.t.Errorf("Each with pages of 2, all purged at the first record: %q; want the first page only, %q", got, want)
	}
	stop := fmt.Errorf("stop")
	if err := e.l.Each(e.ctx, ledger.ListFilter{}, func(*ledger.Record) error { return stop }); err != nil {
		e.t.Errorf("Each over nothing: %v", err)
	}
}

// testEachPagesAgree: whatever the page size, Each lists what one page
// lists, in the same order, ties of outcome time included.
func testEachPagesAgree(e *env) {
	for i := range 4 { // four outcomes at the same instant
		e.outcome(fmt.Sprintf("evt:agree:tie-%d", i), ledger.StatusSucceeded, 0)
	}
	st := []ledger.Status{ledger.StatusSucceeded, ledger.StatusFailed, ledger.StatusRetryable, ledger.StatusSucceeded, ledger.StatusFailed}
	for i, s := range st {
		e.clock.Advance(time.Second)
		e.outcome(fmt.Sprintf("job:agree:%d", i), s, 0)
	}
	since := e.clock.Now().Add(-2 * time.Second)
	e.reserve(request("job:agree:running", ownerA))
	for _, f := range []ledger.ListFilter{
		{},
		{Statuses: []ledger.Status{ledger.StatusFailed, ledger.StatusSucceeded}},
		{Statuses: []ledger.Status{ledger.StatusInProgress, ledger.StatusRetryable, ledger.StatusFailed}},
		{Prefix: "job:agree:"},
		{Prefix: "evt:agree:", Statuses: []ledger.Status{ledger.StatusSucceeded}},
		{Since: since},
		{Limit: 3},
		{Limit: 5, Statuses: []ledger.Status{ledger.StatusSucceeded, ledger.StatusFailed}},
	} {
		whole := e.list(f)
		if len(whole) == 0 {
			e.t.Errorf("%+v lists nothing", f)
		}
		for _, n := range []int{1, 2, 3} {
			f.PageSize = n
			if got := e.list(f); !slices.Equal(got, whole) {
				e.t.Errorf("%+v: %s; want %s", f, strings.Join(got, " "), strings.Join(whole, " "))
			}
		}
	}
}
