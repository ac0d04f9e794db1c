package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgOutcome is a record's outcome time (creation while in progress), the
// expression the records_outcome index is built on.
const pgOutcome = `coalesce(finished, created)`

// pgLive is true for an in_progress record whose lease has not expired at @now.
const pgLive = `coalesce(status = 'in_progress' AND lease_expires > @now, false)`

// pgFilter is the WHERE clause of List and of Purge's selector: every
// condition is off when its argument is NULL (or false), so the statement
// is fixed and its arguments are named.
const pgFilter = `(@statuses::text[] IS NULL OR status = ANY(@statuses::text[]))
	AND (@prefix::text IS NULL OR (key >= @prefix::text AND starts_with(key, @prefix::text)))`

// pgSelector adds Purge's own conditions: records reserved after the purge
// began (by runs that started after it did) never match.
const pgSelector = pgFilter + `
	AND started <= @now
	AND (@keys::text[] IS NULL OR key = ANY(@keys::text[]))
	AND (@before::timestamptz IS NULL OR ` + pgOutcome + ` < @before::timestamptz)
	AND (NOT @expired::boolean OR expires <= @now)`

// statusArg validates statuses; nil (no filter) when there are none.
func statusArg(statuses []Status) (any, error) {
	if len(statuses) == 0 {
		return nil, nil
	}
	out := make([]string, len(statuses))
	for i, st := range statuses {
		if !st.Valid() {
			return nil, fmt.Errorf("invalid status %q", st)
		}
		out[i] = string(st)
	}
	return out, nil
}

func textArg(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// clock returns the ledger's now: Now when set, else the server's clock.
func (p *Postgres) clock(ctx context.Context) (time.Time, error) {
	var now time.Time
	err := p.pool.QueryRow(ctx, `SELECT `+pgNow(1), p.now()).Scan(&now)
	return now, err
}

// List implements Ledger.
func (p *Postgres) List(ctx context.Context, f ListFilter) ([]*Record, error) {
	statuses, err := statusArg(f.Statuses)
	if err != nil {
		return nil, err
	}
	args := pgx.NamedArgs{"statuses": statuses, "prefix": textArg(f.Prefix), "since": tsArg(f.Since), "limit": nil}
	if f.Limit > 0 {
		args["limit"] = f.Limit
	}
	var out []*Record
	err = p.do(ctx, "list", func() error {
		out = nil
		rows, err := p.pool.Query(ctx, `SELECT `+pgRecordColumns+` FROM records
			WHERE `+pgFilter+` AND (@since::timestamptz IS NULL OR `+pgOutcome+` >= @since::timestamptz)
			ORDER BY `+pgOutcome+` DESC, seq DESC LIMIT @limit::bigint`, args)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			r, err := scanPGRecord(rows)
			if err != nil {
				return err
			}
			out = append(out, r)
		}
		return rows.Err()
	})
	return out, err
}

// Purge implements Ledger. Candidates are read a page at a time in key
// order; each page is deleted by one statement (its own short transaction)
// that checks the selector again, so a record that changed in between is
// judged by its new state. PostgreSQL locks rows, not the ledger: a
// concurrent run waits only if it touches a record of the page being
// deleted, and its attempts go with it (ON DELETE CASCADE).
func (p *Postgres) Purge(ctx context.Context, req PurgeRequest) (*PurgeResult, error) {
	if req.Selector.Empty() {
		return nil, ErrEmptySelector
	}
	chunk := req.Chunk
	if chunk <= 0 {
		chunk = DefaultPurgeChunk
	}
	statuses, err := statusArg(req.Statuses)
	if err != nil {
		return nil, err
	}
	now, err := p.clock(ctx)
	if err != nil {
		return nil, p.wrap("purge", err)
	}
	args := pgx.NamedArgs{"now": now, "statuses": statuses, "prefix": textArg(req.Prefix), "keys": nil,
		"before": nil, "expired": req.Expired}
	if len(req.Keys) > 0 {
		args["keys"] = req.Keys
	}
	if req.OlderThan > 0 {
		args["before"] = now.Add(-req.OlderThan)
	}
	res := &PurgeResult{}
	if res.Missing, err = p.missing(ctx, req.Keys); err != nil {
		return nil, p.wrap("purge", err)
	}
	cursor := ""
	for {
		args["cursor"], args["chunk"] = cursor, chunk
		keys, live, err := p.page(ctx, args)
		if err != nil {
			return nil, p.wrap("purge", err)
		}
		if len(keys) == 0 {
			break
		}
		cursor = keys[len(keys)-1]
		del := deletable(keys, live, req.Force)
		if res.Live, err = liveRecords(res.Live, keys, live, func(k string) (*Record, error) {
			return getPGRecord(ctx, p.pool, k, false)
		}); err != nil {
			return nil, p.wrap("purge", err)
		}
		if req.DryRun {
			res.Keys = append(res.Keys, del...)
			res.Removed += len(del)
		} else if len(del) > 0 {
			args["del"], args["force"] = del, req.Force
			var tag int64
			err := p.do(ctx, "purge", func() error {
				t, err := p.pool.Exec(ctx, `DELETE FROM records WHERE key = ANY(@del::text[]) AND `+pgSelector+`
					AND (@force::boolean OR NOT `+pgLive+`)`, args)
				tag = t.RowsAffected()
				return err
			})
			if err != nil {
				return res, err
			}
			res.Removed += int(tag)
		}
		if len(keys) < chunk {
			break
		}
	}
	return res, nil
}

// missing returns the keys that have no record, in the order given.
func (p *Postgres) missing(ctx context.Context, keys []string) ([]string, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	rows, err := p.pool.Query(ctx, `SELECT u.k FROM unnest($1::text[]) WITH ORDINALITY AS u(k, i)
		WHERE NOT EXISTS (SELECT 1 FROM records r WHERE r.key = u.k) GROUP BY u.k ORDER BY min(u.i)`, keys)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// page reads one page of purge candidates: their keys in order, and which
// of them are live.
func (p *Postgres) page(ctx context.Context, args pgx.NamedArgs) ([]string, map[string]struct{}, error) {
	rows, err := p.pool.Query(ctx, `SELECT key, `+pgLive+` FROM records
		WHERE key > @cursor::text AND `+pgSelector+` ORDER BY key LIMIT @chunk::bigint`, args)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	return scanPage(rows)
}

// Vacuum implements Ledger: VACUUM FULL rewrites the ledger's tables and
// gives their free space back. It holds an exclusive lock on them while it
// runs (runs wait for it), and needs the tables' owner (the role that
// created the schema).
func (p *Postgres) Vacuum(ctx context.Context) (*VacuumResult, error) {
	size := func() (int64, error) {
		var n int64
		err := p.pool.QueryRow(ctx,
			`SELECT pg_total_relation_size('records'::regclass) + pg_total_relation_size('attempts'::regclass)`).Scan(&n)
		return n, err
	}
	var (
		r   VacuumResult
		err error
	)
	if r.Before, err = size(); err != nil {
		return nil, p.wrap("compact", err)
	}
	// VACUUM skips, with a mere warning, tables the role does not own.
	var owner bool
	if err := p.pool.QueryRow(ctx, `SELECT bool_and(pg_has_role(relowner, 'USAGE')) FROM pg_class
		WHERE oid IN ('records'::regclass, 'attempts'::regclass)`).Scan(&owner); err != nil {
		return nil, p.wrap("compact", err)
	}
	if !owner {
		return nil, &StoreError{Op: "compact", Path: p.desc, Err: errors.New("only the owner of the ledger's tables may compact them"),
			Hint: "run it as the role that created the ledger's schema"}
	}
	if err := p.do(ctx, "compact", func() error {
		_, err := p.pool.Exec(ctx, `VACUUM (FULL, ANALYZE) records, attempts`)
		return err
	}); err != nil {
		return nil, err
	}
	if r.After, err = size(); err != nil {
		return nil, p.wrap("compact", err)
	}
	return &r, nil
}
