package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"strings"
	"time"

	"github.com/idemhq/idem/internal/ledger"
)

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
	q += ` RETURNING key, CASE WHEN status = 'succeeded' THEN finished_ms END, ` + ledger.CounterColumns
	var n int
	err = s.write(ctx, "purge", func(ctx context.Context, tx querier) error {
		n = 0
		rows, err := tx.QueryContext(ctx, q, args...)
		if err != nil {
			return err
		}
		gone := make([]string, 0, len(keys))
		var sum ledger.Counters
		kept := ledger.KeptSuccesses{}
		for rows.Next() {
			var (
				k    string
				done sql.NullInt64
				c    ledger.Counters
			)
			if err := rows.Scan(append([]any{&k, &done}, c.Fields()...)...); err != nil {
				rows.Close()
				return err
			}
			gone = append(gone, k)
			sum.Add(c)
			if done.Valid {
				kept.Add(k, time.UnixMilli(done.Int64))
			}
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
		if err := keepSuccesses(ctx, tx, kept); err != nil {
			return err
		}
		g, err := json.Marshal(gone)
		if err != nil {
			return err
		}
		for _, q := range []string{`DELETE FROM attempts WHERE key IN (SELECT value FROM json_each(?))`,
			`DELETE FROM outputs WHERE key IN (SELECT value FROM json_each(?))`} {
			if _, err := tx.ExecContext(ctx, q, string(g)); err != nil {
				return err
			}
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
	if s.shmReplaced() { // VACUUM and the checkpoint write outside writeOnce
		return nil, s.wrap("compact", errShmReplaced)
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

// addTotals adds what removed records held to the ledger's totals, with
// how many were purged and how many expired. SQLite has one writer at a
// time, so one row (shard 0) serves.
func addTotals(ctx context.Context, tx querier, c ledger.Counters, purged, expired int64) error {
	args := append(c.Fields(), purged, expired)
	for i, a := range args[:len(args)-2] {
		args[i] = *a.(*int64)
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO totals (shard, `+ledger.CounterColumns+`, purged, expired)
		VALUES (0, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (shard) DO UPDATE SET replays = replays + excluded.replays,
			runs_succeeded = runs_succeeded + excluded.runs_succeeded, runs_failed = runs_failed + excluded.runs_failed,
			runs_retryable = runs_retryable + excluded.runs_retryable, att_success = att_success + excluded.att_success,
			att_transient = att_transient + excluded.att_transient, att_permanent = att_permanent + excluded.att_permanent,
			att_abandoned = att_abandoned + excluded.att_abandoned, att_interrupted = att_interrupted + excluded.att_interrupted,
			att_timeout = att_timeout + excluded.att_timeout, purged = purged + excluded.purged, expired = expired + excluded.expired`,
		args...)
	return err
}

// keepSuccesses raises each group's kept last success to the newest among
// the removed records', so that purge does not take a group out of the
// metrics.
func keepSuccesses(ctx context.Context, tx querier, kept ledger.KeptSuccesses) error {
	if len(kept) == 0 {
		return nil
	}
	rows := make([][2]any, 0, len(kept))
	for g, t := range kept {
		rows = append(rows, [2]any{g, t.UnixMilli()})
	}
	j, err := json.Marshal(rows)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO last_success (grp, finished_ms)
		SELECT value ->> 0, value ->> 1 FROM json_each(?) WHERE true
		ON CONFLICT (grp) DO UPDATE SET finished_ms = max(finished_ms, excluded.finished_ms)`, string(j))
	return err
}
