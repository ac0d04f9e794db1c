package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/idemhq/idem/internal/ledger"
)

// outcomeMS is a record's outcome time (creation while in progress), the
// expression the records_outcome index is built on.
const outcomeMS = `coalesce(finished_ms, created_ms)`

// List implements Ledger, over Each.
func (s *Ledger) List(ctx context.Context, f ledger.ListFilter) ([]*ledger.Record, error) {
	return ledger.Collect(ctx, f, s.Each)
}

// Each implements Ledger: ledger.EachPaged over keyset pages, each read
// by short SELECTs of its own that start after the last record of the
// page before, down the records_outcome index (records_status_outcome's
// for one status), so that a page costs what it returns. A prefix that
// few records share is read from the key index instead and sorted: see
// pageQuery.
func (s *Ledger) Each(ctx context.Context, f ledger.ListFilter, fn func(*ledger.Record) error) error {
	dense := map[ledger.Status]bool{}
	return ledger.EachPaged(ctx, f, func(ctx context.Context, f ledger.ListFilter, after *ledger.Cursor, n int) ([]*ledger.Record, error) {
		var st ledger.Status
		if len(f.Statuses) == 1 {
			st = f.Statuses[0]
		}
		d, ok := dense[st]
		if !ok && f.Prefix != "" {
			var err error
			if d, err = s.densePrefix(ctx, f, n); err != nil {
				return nil, err
			}
			dense[st] = d
		}
		return s.page1(ctx, f, after, n, d)
	}, fn)
}

// densePrefix reports whether f's prefix (within its status) holds more
// than probeRows(n) records, counting no further: then walking the
// outcome index and skipping other keys costs about n·total/matches per
// page, less than sorting every match of the prefix for each page.
func (s *Ledger) densePrefix(ctx context.Context, f ledger.ListFilter, n int) (bool, error) {
	q := `SELECT count(*) FROM (SELECT 1 FROM records WHERE key GLOB ?`
	args := []any{globPrefix(f.Prefix)}
	if len(f.Statuses) == 1 {
		q, args = q+` AND status = ?`, append(args, string(f.Statuses[0]))
	}
	var c int
	err := s.conn.QueryRowContext(ctx, q+` LIMIT ?)`, append(args, probeRows(n))...).Scan(&c)
	return c >= probeRows(n), s.wrap("list", err)
}

// probeRows is how many matches of a prefix make it dense for pages of n.
func probeRows(n int) int { return max(10*n, 10000) }

// page1 reads one page of Each for a filter with at most one status: the
// records that tie with the cursor's outcome time first, then the older
// ones, each by an index range (a row-value bound on an expression index
// would scan it from the top).
func (s *Ledger) page1(ctx context.Context, f ledger.ListFilter, after *ledger.Cursor, n int, dense bool) ([]*ledger.Record, error) {
	out := make([]*ledger.Record, 0, n)
	for _, part := range []pagePart{partTies, partOlder} {
		if after == nil && part == partTies {
			continue
		}
		q, args, err := pageQuery(f, after, n-len(out), part, dense)
		if err != nil {
			return nil, err
		}
		if out, err = s.readPage(ctx, q, args, out); err != nil {
			return nil, err
		}
		if len(out) == n {
			break
		}
	}
	return out, nil
}

func (s *Ledger) readPage(ctx context.Context, q string, args []any, out []*ledger.Record) ([]*ledger.Record, error) {
	rows, err := s.conn.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, s.wrap("list", err)
	}
	defer rows.Close()
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			return nil, s.wrap("list", err)
		}
		out = append(out, r)
	}
	return out, s.wrap("list", rows.Err())
}

// pagePart is which records after a cursor a page query reads.
type pagePart int

const (
	partTies  pagePart = iota // the cursor's outcome time, older rowids
	partOlder                 // older outcome times
)

// pageQuery is one statement of a page of Each. A prefix is a range of
// the key index (sorted: it is few records) unless it is dense, when the
// outcome index is walked (INDEXED BY: SQLite, without statistics, would
// take the range and sort the prefix's every record for each page).
func pageQuery(f ledger.ListFilter, after *ledger.Cursor, n int, part pagePart, dense bool) (string, []any, error) {
	var (
		where []string
		args  []any
	)
	index := ""
	if len(f.Statuses) > 0 {
		c, a, err := statusIn(f.Statuses)
		if err != nil {
			return "", nil, err
		}
		where, args = append(where, c), append(args, a...)
	}
	if f.Prefix != "" {
		where, args = append(where, `key GLOB ?`), append(args, globPrefix(f.Prefix))
		switch {
		case dense && len(f.Statuses) == 1:
			index = ` INDEXED BY records_status_outcome`
		case dense:
			index = ` INDEXED BY records_outcome`
		case part != partTies && len(f.Statuses) > 0:
			// A sparse prefix: its range of the key index, the status
			// checked on each (the unary + keeps SQLite off the
			// status index, which would read the whole status).
			where[0] = `+` + where[0]
		}
	}
	if !f.Since.IsZero() {
		where, args = append(where, outcomeMS+` >= ?`), append(args, f.Since.UnixMilli())
	}
	if after != nil {
		if part == partTies {
			where = append(where, outcomeMS+` = ? AND rowid < ?`)
			args = append(args, after.Outcome.UnixMilli(), after.Seq)
		} else {
			where, args = append(where, outcomeMS+` < ?`), append(args, after.Outcome.UnixMilli())
		}
	}
	q := `SELECT ` + recordColumns + ` FROM records` + index
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, ` AND `)
	}
	// rowid breaks ties in the index's own order, so no sort is needed
	// (among ties, SQLite sees that only when told the order is rowid's).
	if part == partTies {
		q += ` ORDER BY rowid DESC LIMIT ?`
	} else {
		q += ` ORDER BY ` + outcomeMS + ` DESC, rowid DESC LIMIT ?`
	}
	return q, append(args, n), nil
}

// Metrics implements Ledger, in one read transaction: one pass over the
// records for the counts and counters, one over the succeeded ones (by
// the status index) and the groups purge kept, for the groups.
func (s *Ledger) Metrics(ctx context.Context, req ledger.MetricsRequest) (*ledger.Metrics, error) {
	tx, err := s.conn.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, s.wrap("metrics", err)
	}
	defer tx.Rollback()
	m, err := metrics(ctx, tx, req, s.Now())
	return m, s.wrap("metrics", err)
}

func metrics(ctx context.Context, tx *sql.Tx, req ledger.MetricsRequest, now time.Time) (*ledger.Metrics, error) {
	m := &ledger.Metrics{Now: now, Records: map[ledger.Status]int64{}}
	nowMS := now.UnixMilli()
	rows, err := tx.QueryContext(ctx, `SELECT status, coalesce(expires_ms <= ?, 0), count(*),
		sum(status = 'in_progress' AND lease_expires_ms <= ?), min(CASE WHEN status = 'in_progress' THEN started_ms END),
		`+ledger.SumCountersSQL("")+` FROM records GROUP BY 1, 2`, nowMS, nowMS)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			st       ledger.Status
			expired  bool
			n, stuck int64
			oldest   sql.NullInt64
			c        ledger.Counters
		)
		if err := rows.Scan(append([]any{&st, &expired, &n, &stuck, &oldest}, c.Fields()...)...); err != nil {
			return nil, err
		}
		m.Counters.Add(c)
		if expired {
			m.Expired += n
			continue
		}
		m.Records[st] += n
		m.Stuck += stuck
		if oldest.Valid && (m.OldestInProgress.IsZero() || oldest.Int64 < m.OldestInProgress.UnixMilli()) {
			m.OldestInProgress = time.UnixMilli(oldest.Int64)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows.Close()
	var c ledger.Counters
	if err := tx.QueryRowContext(ctx, `SELECT `+ledger.SumCountersSQL("")+`, coalesce(sum(purged), 0), coalesce(sum(expired), 0) FROM totals`).
		Scan(append(c.Fields(), &m.Purged, &m.ExpiredRemoved)...); err != nil {
		return nil, err
	}
	m.Counters.Add(c)
	// Groups from the succeeded records, and those purge kept, grouped
	// again by this separator.
	grp := func(col string) string {
		return `CASE WHEN instr(` + col + `, ?1) > 0 THEN substr(` + col + `, 1, instr(` + col + `, ?1) - 1) ELSE ` + col + ` END`
	}
	rows, err = tx.QueryContext(ctx, `SELECT g, max(last) FROM (
		SELECT `+grp("key")+` AS g, max(finished_ms) AS last FROM records WHERE status = 'succeeded' GROUP BY 1
		UNION ALL SELECT `+grp("grp")+`, finished_ms FROM last_success)
		GROUP BY 1 ORDER BY 1`, req.Sep())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			g    string
			last int64
		)
		if err := rows.Scan(&g, &last); err != nil {
			return nil, err
		}
		m.FoldGroups(ledger.GroupSuccess{Group: g, Last: time.UnixMilli(last)}, req.Groups())
	}
	return m, rows.Err()
}

// statusIn returns `status IN (?, ...)` for valid statuses.
func statusIn(statuses []ledger.Status) (string, []any, error) {
	args := make([]any, len(statuses))
	for i, st := range statuses {
		if !st.Valid() {
			return "", nil, fmt.Errorf("invalid status %q", st)
		}
		args[i] = string(st)
	}
	return `status IN (?` + strings.Repeat(`, ?`, len(statuses)-1) + `)`, args, nil
}

// globPrefix returns a GLOB pattern matching strings that start with p. The
// GLOB metacharacters in p are bracketed; SQLite turns a literal GLOB prefix
// into a range scan of the key index.
func globPrefix(p string) string {
	var b strings.Builder
	for _, c := range p {
		switch c {
		case '*', '?', '[':
			b.WriteByte('[')
			b.WriteRune(c)
			b.WriteByte(']')
		default:
			b.WriteRune(c)
		}
	}
	b.WriteByte('*')
	return b.String()
}

// selectorWhere turns sel into SQL conditions on records, evaluated at
// nowMS. Records reserved after nowMS (by runs that started after the purge
// did) never match.
func selectorWhere(sel ledger.Selector, nowMS int64) (string, []any, error) {
	where := []string{`started_ms <= ?`}
	args := []any{nowMS}
	if len(sel.Keys) > 0 {
		keys, err := json.Marshal(sel.Keys)
		if err != nil {
			return "", nil, err
		}
		where, args = append(where, `key IN (SELECT value FROM json_each(?))`), append(args, string(keys))
	}
	if len(sel.Statuses) > 0 {
		c, a, err := statusIn(sel.Statuses)
		if err != nil {
			return "", nil, err
		}
		where, args = append(where, c), append(args, a...)
	}
	if sel.Prefix != "" {
		where, args = append(where, `key GLOB ?`), append(args, globPrefix(sel.Prefix))
	}
	if sel.OlderThan > 0 {
		where, args = append(where, outcomeMS+` < ?`), append(args, nowMS-sel.OlderThan.Milliseconds())
	}
	if sel.Expired {
		where, args = append(where, `expires_ms <= ?`), append(args, nowMS)
	}
	return strings.Join(where, ` AND `), args, nil
}
