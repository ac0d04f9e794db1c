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

// List implements Ledger.
func (s *Ledger) List(ctx context.Context, f ledger.ListFilter) ([]*ledger.Record, error) {
	var (
		where []string
		args  []any
	)
	if len(f.Statuses) > 0 {
		c, a, err := statusIn(f.Statuses)
		if err != nil {
			return nil, err
		}
		where, args = append(where, c), append(args, a...)
	}
	if f.Prefix != "" {
		where, args = append(where, `key GLOB ?`), append(args, globPrefix(f.Prefix))
	}
	if !f.Since.IsZero() {
		where, args = append(where, outcomeMS+` >= ?`), append(args, f.Since.UnixMilli())
	}
	q := `SELECT ` + recordColumns + ` FROM records`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, ` AND `)
	}
	// rowid breaks ties in the index's own order, so no sort is needed.
	q += ` ORDER BY ` + outcomeMS + ` DESC, rowid DESC`
	if f.Limit > 0 {
		q += ` LIMIT ?`
		args = append(args, f.Limit)
	}
	rows, err := s.conn.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, s.wrap("list", err)
	}
	defer rows.Close()
	var out []*ledger.Record
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			return nil, s.wrap("list", err)
		}
		out = append(out, r)
	}
	return out, s.wrap("list", rows.Err())
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
	nowMS := s.Now().UnixMilli()
	cond, condArgs, err := selectorWhere(req.Selector, nowMS)
	if err != nil {
		return nil, err
	}
	return ledger.PurgePages(ctx, req, &purger{s: s, cond: cond, condArgs: condArgs, force: req.Force, nowMS: nowMS,
		chunk: req.ChunkSize(), batch: min(firstBatch, req.ChunkSize())})
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
}

func (p *purger) Missing(ctx context.Context, keys []string) ([]string, error) {
	m, err := p.s.missing(ctx, keys)
	return m, p.s.wrap("purge", err)
}

func (p *purger) Page(ctx context.Context, cursor string, n int) ([]string, map[string]struct{}, error) {
	q := `SELECT key, ` + liveSQL + ` FROM records WHERE key > ? AND ` + p.cond + ` ORDER BY key LIMIT ?`
	args := append(append([]any{cursor}, p.condArgs...), n)
	keys, live, err := p.s.page(ctx, q, args)
	return keys, live, p.s.wrap("purge", err)
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
	q += ` RETURNING key`
	var n int
	err = s.write(ctx, "purge", func(tx *sql.Tx) error {
		n = 0
		rows, err := tx.QueryContext(ctx, q, args...)
		if err != nil {
			return err
		}
		gone := make([]string, 0, len(keys))
		for rows.Next() {
			var k string
			if err := rows.Scan(&k); err != nil {
				rows.Close()
				return err
			}
			gone = append(gone, k)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if len(gone) == 0 {
			return nil
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
