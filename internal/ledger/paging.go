package ledger

import (
	"context"
	"time"
)

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
