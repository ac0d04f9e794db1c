package ledger

import (
	"bytes"
	"context"
	"strings"
	"time"
	"unicode/utf8"
)

// TailMax is how much of the end of an attempt's stderr is kept with the
// attempt: enough for the error a failed command prints last.
const TailMax = 4 << 10

// ReasonMax bounds Record.Reason, the last stderr line a listing shows.
const ReasonMax = 200

// Tail returns the last TailMax bytes of b (b itself when shorter).
func Tail(b []byte) []byte {
	if len(b) > TailMax {
		return b[len(b)-TailMax:]
	}
	return b
}

// LastLine returns the last line of tail that holds more than white space,
// trimmed and cut to ReasonMax bytes: what a listing shows of why a
// command failed. Invalid UTF-8 and NUL become U+FFFD (a text column takes
// neither); other control characters are left for the display to escape.
func LastLine(tail []byte) string {
	for len(tail) > 0 {
		i := bytes.LastIndexByte(tail, '\n')
		line := bytes.TrimSpace(tail[i+1:])
		if len(line) > 0 {
			if len(line) > ReasonMax {
				line = cutRune(line[:ReasonMax])
			}
			// A text column takes valid UTF-8 without NUL (PostgreSQL).
			return strings.ToValidUTF8(strings.ReplaceAll(string(line), "\x00", "\uFFFD"), "\uFFFD")
		}
		if i < 0 {
			break
		}
		tail = tail[:i]
	}
	return ""
}

// cutRune drops the first bytes of a rune that a cut at the end of b left
// incomplete.
func cutRune(b []byte) []byte {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return b[:i]
			}
			break
		}
	}
	return b
}

// Counters are counts that only grow: each record keeps its own (written
// by the transactions that already write it, so no row is shared by a
// fleet's runs), and what a record held when it was purged or expired is
// added to the ledger's totals, so a sum over both never goes down.
type Counters struct {
	Replays int64 // duplicates suppressed
	// Runs that recorded an outcome, by the outcome's status.
	RunsSucceeded, RunsFailed, RunsRetryable int64
	// Attempts that ended, by class.
	AttemptsSuccess, AttemptsTransient, AttemptsPermanent   int64
	AttemptsAbandoned, AttemptsInterrupted, AttemptsTimeout int64
}

// CounterColumns names the columns that hold Counters, in the order of
// Counters.Fields, in both backends' records and totals tables.
const CounterColumns = `replays, runs_succeeded, runs_failed, runs_retryable, att_success, att_transient,
	att_permanent, att_abandoned, att_interrupted, att_timeout`

// Fields returns pointers to c's counts in the order of CounterColumns,
// for scanning.
func (c *Counters) Fields() []any {
	return []any{&c.Replays, &c.RunsSucceeded, &c.RunsFailed, &c.RunsRetryable, &c.AttemptsSuccess,
		&c.AttemptsTransient, &c.AttemptsPermanent, &c.AttemptsAbandoned, &c.AttemptsInterrupted, &c.AttemptsTimeout}
}

// Add adds o to c.
func (c *Counters) Add(o Counters) {
	dst, src := c.Fields(), o.Fields()
	for i := range dst {
		*dst[i].(*int64) += *src[i].(*int64)
	}
}

// AttemptClasses are the attempt classes in the order of the att_ columns.
var AttemptClasses = [...]string{ClassSuccess, ClassTransient, ClassPermanent, ClassAbandoned, ClassInterrupted, ClassTimeout}

// BumpSQL is the SET clause, the same in both backends' dialects, that
// counts an ended attempt of class and, when status is set, a run that
// ended with it. Column names come from fixed lists, never from the
// caller's text.
func BumpSQL(class string, status Status) string {
	var b strings.Builder
	for _, c := range AttemptClasses {
		if c == class {
			b.WriteString(`, att_` + c + ` = att_` + c + ` + 1`)
		}
	}
	switch status {
	case StatusSucceeded, StatusFailed, StatusRetryable:
		b.WriteString(`, runs_` + string(status) + ` = runs_` + string(status) + ` + 1`)
	}
	return b.String()
}

// SumCountersSQL sums the counter columns (of table alias t, when set),
// 0 over no rows, in both backends' dialects.
func SumCountersSQL(t string) string {
	var b strings.Builder
	for i, c := range strings.Split(CounterColumns, ",") {
		if i > 0 {
			b.WriteString(", ")
		}
		c = strings.TrimSpace(c)
		if t != "" {
			c = t + "." + c
		}
		b.WriteString("coalesce(sum(" + c + "), 0)")
	}
	return b.String()
}

// ReasonArg is the SQL argument for Record.Reason from a stderr tail: its
// last line, or NULL (nil) when it has none.
func ReasonArg(tail []byte) any {
	if l := LastLine(tail); l != "" {
		return l
	}
	return nil
}

// MetricsRequest says how Metrics groups keys.
type MetricsRequest struct {
	// Separator ends a key's group: the group is the key up to its first
	// Separator (the whole key when it has none). "" means ":".
	Separator string
	// MaxGroups caps the groups reported one by one; the rest are folded
	// into Metrics.Other. 0 means DefaultMaxGroups.
	MaxGroups int
}

// DefaultMaxGroups is MetricsRequest.MaxGroups when it is not set.
const DefaultMaxGroups = 50

// Sep is r.Separator, or ":" when it is not set.
func (r MetricsRequest) Sep() string {
	if r.Separator == "" {
		return ":"
	}
	return r.Separator
}

// Groups is r.MaxGroups, or DefaultMaxGroups when it is not set.
func (r MetricsRequest) Groups() int {
	if r.MaxGroups <= 0 {
		return DefaultMaxGroups
	}
	return r.MaxGroups
}

// GroupSuccess is the time of a key group's last success.
type GroupSuccess struct {
	Group string
	Last  time.Time
}

// Metrics is the ledger's state for monitoring, read at Now (the ledger's
// clock).
type Metrics struct {
	Now time.Time
	// Records counts the records that have not expired, by status.
	Records map[Status]int64
	// Expired counts the records past their TTL (they count as absent).
	Expired int64
	// Stuck counts the in_progress records whose lease has expired: their
	// owner is gone, and the next run of the key takes them over.
	Stuck int64
	// OldestInProgress is when the longest-running in_progress record was
	// reserved; zero when there is none.
	OldestInProgress time.Time
	// LastSuccess is each group's last success (outcome time of its
	// newest succeeded record), in group order, at most MaxGroups of them.
	LastSuccess []GroupSuccess
	// Other is the last success among the groups past MaxGroups (zero
	// when there are none), and OtherGroups how many they are.
	Other       time.Time
	OtherGroups int
	// Counters sums every record's counters and the totals of records
	// that are gone.
	Counters Counters
	// Purged and ExpiredRemoved count the records removed by purge and
	// those dropped when a run found them past their TTL.
	Purged, ExpiredRemoved int64
}

// FoldGroups appends a group's last success to m, or folds it into Other
// once max groups are listed. Backends call it in group order.
func (m *Metrics) FoldGroups(g GroupSuccess, max int) {
	if len(m.LastSuccess) < max {
		m.LastSuccess = append(m.LastSuccess, g)
		return
	}
	m.OtherGroups++
	if g.Last.After(m.Other) {
		m.Other = g.Last
	}
}

// Cursor is the position of Each after a record: the order is outcome
// time, then Seq, both descending.
type Cursor struct {
	Outcome time.Time
	Seq     int64
}

// After is the cursor just after r.
func After(r *Record) *Cursor { return &Cursor{Outcome: r.OutcomeTime(), Seq: r.Seq} }

// PageFunc reads up to n records after cursor (nil: from the newest) in
// Each's order, for a filter with at most one status.
type PageFunc func(ctx context.Context, f ListFilter, after *Cursor, n int) ([]*Record, error)

// EachPaged is Each over a backend's page reader: a filter with several
// statuses is read as one stream per status (each served by the status
// index in order) merged here, so every page costs what it returns.
// Memory holds at most one page per status.
func EachPaged(ctx context.Context, f ListFilter, page PageFunc, fn func(*Record) error) error {
	statuses := f.Statuses
	if len(statuses) == 0 {
		statuses = []Status{""}
	}
	type stream struct {
		f     ListFilter
		buf   []*Record
		after *Cursor
		done  bool
	}
	streams := make([]*stream, 0, len(statuses))
	seen := map[Status]bool{}
	for _, st := range statuses {
		if seen[st] {
			continue
		}
		seen[st] = true
		sf := f
		sf.Statuses = nil
		if st != "" {
			sf.Statuses = []Status{st}
		}
		streams = append(streams, &stream{f: sf})
	}
	n := f.Pages()
	left := f.Limit
	for f.Limit == 0 || left > 0 {
		var best *stream
		for _, s := range streams {
			if len(s.buf) == 0 && !s.done {
				want := n
				if f.Limit > 0 {
					want = min(n, left)
				}
				recs, err := page(ctx, s.f, s.after, want)
				if err != nil {
					return err
				}
				s.buf, s.done = recs, len(recs) < want
				if len(recs) > 0 {
					s.after = After(recs[len(recs)-1])
				}
			}
			if len(s.buf) > 0 && (best == nil || before(s.buf[0], best.buf[0])) {
				best = s
			}
		}
		if best == nil {
			return nil
		}
		r := best.buf[0]
		best.buf[0] = nil
		best.buf = best.buf[1:]
		if err := fn(r); err != nil {
			return err
		}
		left--
	}
	return nil
}

// before reports whether a comes before b in Each's order.
func before(a, b *Record) bool {
	ao, bo := a.OutcomeTime(), b.OutcomeTime()
	if !ao.Equal(bo) {
		return ao.After(bo)
	}
	return a.Seq > b.Seq
}

// Collect is List over Each: every record in a slice.
func Collect(ctx context.Context, f ListFilter, each func(context.Context, ListFilter, func(*Record) error) error) ([]*Record, error) {
	var out []*Record
	err := each(ctx, f, func(r *Record) error {
		out = append(out, r)
		return nil
	})
	return out, err
}
