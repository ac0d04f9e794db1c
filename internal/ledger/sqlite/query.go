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

// Purge deletes in transactions of up to PurgeRequest.Chunk records, but
// starts with firstBatch and halves or doubles the batch so that each holds
// the write lock for about targetHold. Between them it lets go of the lock
// for about as long as it held it, within [minPurgePause, maxPurgePause], so
// that a concurrent run's busy handler (which polls every 1-100 ms) finds
// it free.
const (
	firstBatch    = 64
	targetHold    = 100 * time.Millisecond
	minPurgePause = 5 * time.Millisecond
	maxPurgePause = 100 * time.Millisecond
)

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
// the status index) for the groups, whose rows SQLite hands over one at a
// time in group order.
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
	grp := `CASE WHEN instr(key, ?1) > 0 THEN substr(key, 1, instr(key, ?1) - 1) ELSE key END`
	rows, err = tx.QueryContext(ctx, `SELECT `+grp+`, max(finished_ms) FROM records WHERE status = 'succeeded'
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

// liveSQL is what purge keeps without --force: an in_progress record,
// whether or not its lease expired, since its processes may still run (an
// expired lease says only that its owner stopped renewing it; the run that
// takes it over stops them first).
const liveSQL = `(status = 'in_progress')`

// Purge implements Ledger with ledger.PurgePages. Candidates are read a
// page (Chunk records) at a time outside any write transaction; each page
// is then deleted in short BEGIN IMMEDIATE transactions that check the
// selector again. Between transactions Purge lets go of the write lock
// for a moment, so a concurrent run waits at most about one transaction
// (~targetHold).
func (s *Ledger) Purge(ctx context.Context, req ledger.PurgeRequest) (*ledger.PurgeResult, error) {
	if req.Selector.Empty() {
		return nil, ledger.ErrEmptySelector
	}
	p, err := s.newPurger(ctx, req)
	if err != nil {
		return nil, err
	}
	return ledger.PurgePages(ctx, req, p)
}

// newPurger prepares the pages of a purge: the selector's SQL, and how
// its pages are read.
func (s *Ledger) newPurger(ctx context.Context, req ledger.PurgeRequest) (*purger, error) {
	nowMS := s.Now().UnixMilli()
	cond, condArgs, err := selectorWhere(req.Selector, nowMS)
	if err != nil {
		return nil, err
	}
	if len(req.Statuses) > 0 && len(req.Keys) == 0 {
		dense := req.Prefix != ""
		if !dense {
			if dense, err = s.denseStatus(ctx, req.Statuses, req.ChunkSize()); err != nil {
				return nil, err
			}
		}
		if dense {
			// Walk the keys (of the prefix), checking the status of each:
			// most match, or the prefix bounds the walk. The unary + keeps
			// SQLite off the status index, whose matches it would sort for
			// every page.
			cond = strings.Replace(cond, `status IN (`, `+status IN (`, 1)
		}
	}
	return &purger{s: s, cond: cond, condArgs: condArgs, force: req.Force, nowMS: nowMS,
		chunk: req.ChunkSize(), batch: min(firstBatch, req.ChunkSize()), index: purgeIndex(req.Selector)}, nil
}

// denseStatus reports whether more than probeRows(n) records have one of
// statuses, counting no further.
func (s *Ledger) denseStatus(ctx context.Context, statuses []ledger.Status, n int) (bool, error) {
	c, args, err := statusIn(statuses)
	if err != nil {
		return false, err
	}
	var count int
	err = s.conn.QueryRowContext(ctx, `SELECT count(*) FROM (SELECT 1 FROM records WHERE `+c+` LIMIT ?)`,
		append(args, probeRows(n))...).Scan(&count)
	return count >= probeRows(n), s.wrap("purge", err)
}

// purgeIndex is the index a purge page reads for sel: pages go in key
// order, which the key index gives at no cost, but for --expired and
// --older-than alone it would read every record to find a few; their own
// index finds the candidates, and sorting them costs what they are.
// (--prefix is a range of the key index, which SQLite picks itself; for
// --status, see Purge.)
func purgeIndex(sel ledger.Selector) string {
	switch {
	case len(sel.Keys) > 0, sel.Prefix != "", len(sel.Statuses) > 0:
		return ""
	case sel.Expired:
		return ` INDEXED BY records_expires`
	case sel.OlderThan > 0:
		return ` INDEXED BY records_outcome`
	}
	return ""
}

// purger is SQLite's ledger.Pager: cond and condArgs are the selector's
// SQL, batch the number of records the next delete transaction takes.
type purger struct {
	s        *Ledger
	cond     string
	condArgs []any
	force    bool
	nowMS    int64
	chunk    int // the request's page size: the most a batch takes
	batch    int
	index    string // INDEXED BY clause of the page query, or ""
}

func (p *purger) Missing(ctx context.Context, keys []string) ([]string, error) {
	m, err := p.s.missing(ctx, keys)
	return m, p.s.wrap("purge", err)
}

func (p *purger) Page(ctx context.Context, cursor string, n int) ([]string, map[string]struct{}, error) {
	q, args := p.pageQuery(cursor, n)
	keys, live, err := p.s.page(ctx, q, args)
	return keys, live, p.s.wrap("purge", err)
}

// pageQuery is the statement of the page of n candidates after cursor.
func (p *purger) pageQuery(cursor string, n int) (string, []any) {
	return `SELECT key, ` + liveSQL + ` FROM records` + p.index + ` WHERE key > ? AND ` + p.cond + ` ORDER BY key LIMIT ?`,
		append(append([]any{cursor}, p.condArgs...), n)
}

func (p *purger) Get(ctx context.Context, key string) (*ledger.Record, error) {
	r, err := getRecord(ctx, p.s.conn, key, false)
	return r, p.s.wrap("purge", err)
}

// Delete removes keys in transactions of p.batch records, adapting the
// batch to how long each held the write lock, and yields between them.
func (p *purger) Delete(ctx context.Context, del []string, more bool) (int, error) {
	removed := 0
	for len(del) > 0 {
		n := min(p.batch, len(del))
		began := time.Now()
		r, err := p.s.deleteChunk(ctx, del[:n], p.cond, p.condArgs, p.force, p.nowMS)
		if err != nil {
			return removed, err
		}
		held := time.Since(began)
		removed += r
		del = del[n:]
		p.batch = nextBatch(p.batch, p.chunk, held)
		if len(del) > 0 || more {
			if err := yield(ctx, held); err != nil {
				return removed, err
			}
		}
	}
	return removed, nil
}

// nextBatch adapts the number of records per delete transaction so that
// one holds the write lock for about targetHold: records with megabytes of
// output take far longer to delete than small ones. It stays within
// [1, limit].
func nextBatch(batch, limit int, held time.Duration) int {
	switch {
	case held > targetHold:
		return max(batch/2, 1)
	case held < targetHold/4:
		return min(batch*2, limit)
	}
	return batch
}

// missing returns the keys that have no record, in the order given.
func (s *Ledger) missing(ctx context.Context, keys []string) ([]string, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	j, err := json.Marshal(keys)
	if err != nil {
		return nil, err
	}
	rows, err := s.conn.QueryContext(ctx, `SELECT j.value FROM json_each(?) j
		WHERE j.value NOT IN (SELECT r.key FROM records r) GROUP BY j.value ORDER BY min(j.key)`, string(j))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

// page reads one page of purge candidates: their keys in order, and which
// of them are live.
func (s *Ledger) page(ctx context.Context, q string, args []any) ([]string, map[string]struct{}, error) {
	rows, err := s.conn.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	return ledger.ScanPage(rows)
}

// deleteChunk removes the records among keys that still match cond (and,
// without force, are not live), with their attempts, in one transaction.
func (s *Ledger) deleteChunk(ctx context.Context, keys []string, cond string, condArgs []any, force bool, nowMS int64) (int, error) {
	j, err := json.Marshal(keys)
	if err != nil {
		return 0, err
	}
	q := `DELETE FROM records WHERE key IN (SELECT value FROM json_each(?)) AND ` + cond
	args := append([]any{string(j)}, condArgs...)
	if !force {
		q += ` AND NOT ` + liveSQL
	}
	q += ` RETURNING key, ` + ledger.CounterColumns
	var n int
	err = s.write(ctx, "purge", func(tx *sql.Tx) error {
		n = 0
		rows, err := tx.QueryContext(ctx, q, args...)
		if err != nil {
			return err
		}
		gone := make([]string, 0, len(keys))
		var sum ledger.Counters
		for rows.Next() {
			var (
				k string
				c ledger.Counters
			)
			if err := rows.Scan(append([]any{&k}, c.Fields()...)...); err != nil {
				rows.Close()
				return err
			}
			gone = append(gone, k)
			sum.Add(c)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if len(gone) == 0 {
			return nil
		}
		if err := addTotals(ctx, tx, sum, int64(len(gone)), 0); err != nil {
			return err
		}
		g, err := json.Marshal(gone)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM attempts WHERE key IN (SELECT value FROM json_each(?))`, string(g)); err != nil {
			return err
		}
		n = len(gone)
		return nil
	})
	return n, err
}

// yield waits about as long as the last chunk held the write lock.
func yield(ctx context.Context, held time.Duration) error {
	t := time.NewTimer(min(max(held, minPurgePause), maxPurgePause))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Vacuum implements Ledger: VACUUM, then a truncating checkpoint so the
// WAL gives its space back too. It holds the write lock while it runs.
func (s *Ledger) Vacuum(ctx context.Context) (*ledger.VacuumResult, error) {
	size := func() (int64, error) {
		var n int64
		err := s.conn.QueryRowContext(ctx,
			`SELECT c.page_count * z.page_size FROM pragma_page_count() c, pragma_page_size() z`).Scan(&n)
		return n, err
	}
	var (
		r   ledger.VacuumResult
		err error
	)
	if r.Before, err = size(); err != nil {
		return nil, s.wrap("compact", err)
	}
	for try := 0; try < busyRetries; try++ {
		_, err = s.conn.ExecContext(ctx, `VACUUM`)
		if !isBusy(err) || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		return nil, s.wrap("compact", err)
	}
	if _, err := s.conn.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		return nil, s.wrap("compact", err)
	}
	if r.After, err = size(); err != nil {
		return nil, s.wrap("compact", err)
	}
	return &r, nil
}
