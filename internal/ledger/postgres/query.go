package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/internal/ledger"
)

// outcomeSQL is a record's outcome time (creation while in progress), the
// expression the records_outcome index is built on.
const outcomeSQL = `coalesce(finished, created)`

// liveSQL is what purge keeps without --force: an in_progress record,
// whether or not its lease expired, since its processes may still run (an
// expired lease says only that its owner stopped renewing it; the run that
// takes it over stops them first).
const liveSQL = `(status = 'in_progress')`

// filterSQL is the WHERE clause of List and of Purge's selector: every
// condition is off when its argument is NULL (or false), so the statement
// is fixed and its arguments are named.
const filterSQL = `(@statuses::text[] IS NULL OR status = ANY(@statuses::text[]))
	AND (@prefix::text IS NULL OR (key >= @prefix::text AND starts_with(key, @prefix::text)))`

// selectorSQL adds Purge's own conditions: records reserved after the purge
// began (by runs that started after it did) never match.
const selectorSQL = filterSQL + `
	AND started <= @now
	AND (@keys::text[] IS NULL OR key = ANY(@keys::text[]))
	AND (@before::timestamptz IS NULL OR ` + outcomeSQL + ` < @before::timestamptz)
	AND (NOT @expired::boolean OR expires <= @now)`

// statusArg validates statuses; nil (no filter) when there are none.
func statusArg(statuses []ledger.Status) (any, error) {
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
func (p *Ledger) clock(ctx context.Context) (time.Time, error) {
	var now time.Time
	err := p.pool.QueryRow(ctx, `SELECT `+nowSQL(1), p.now()).Scan(&now)
	return now, err
}

// List implements Ledger.
func (p *Ledger) List(ctx context.Context, f ledger.ListFilter) ([]*ledger.Record, error) {
	statuses, err := statusArg(f.Statuses)
	if err != nil {
		return nil, err
	}
	args := pgx.NamedArgs{"statuses": statuses, "prefix": textArg(f.Prefix), "since": tsArg(f.Since), "limit": nil}
	if f.Limit > 0 {
		args["limit"] = f.Limit
	}
	var out []*ledger.Record
	err = p.do(ctx, "list", func() error {
		out = nil
		rows, err := p.pool.Query(ctx, `SELECT `+recordColumns+` FROM records
			WHERE `+filterSQL+` AND (@since::timestamptz IS NULL OR `+outcomeSQL+` >= @since::timestamptz)
			ORDER BY `+outcomeSQL+` DESC, seq DESC LIMIT @limit::bigint`, args)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			r, err := scanRecord(rows)
			if err != nil {
				return err
			}
			out = append(out, r)
		}
		return rows.Err()
	})
	return out, err
}

// Purge implements Ledger with ledger.PurgePages: each page is deleted by
// one statement (its own short transaction) that checks the selector
// again. PostgreSQL locks rows, not the ledger: a
// concurrent run waits only if it touches a record of the page being
// deleted, and its attempts go with it (ON DELETE CASCADE).
func (p *Ledger) Purge(ctx context.Context, req ledger.PurgeRequest) (*ledger.PurgeResult, error) {
	if req.Selector.Empty() {
		return nil, ledger.ErrEmptySelector
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
	return ledger.PurgePages(ctx, req, &purger{p: p, args: args, force: req.Force})
}

// purger is PostgreSQL's ledger.Pager over the selector's named arguments.
type purger struct {
	p     *Ledger
	args  pgx.NamedArgs
	force bool
}

func (u *purger) Missing(ctx context.Context, keys []string) ([]string, error) {
	m, err := u.p.missing(ctx, keys)
	return m, u.p.wrap("purge", err)
}

func (u *purger) Page(ctx context.Context, cursor string, n int) ([]string, map[string]struct{}, error) {
	u.args["cursor"], u.args["chunk"] = cursor, n
	keys, live, err := u.p.page(ctx, u.args)
	return keys, live, u.p.wrap("purge", err)
}

func (u *purger) Get(ctx context.Context, key string) (*ledger.Record, error) {
	r, err := getRecord(ctx, u.p.pool, key, false)
	return r, u.p.wrap("purge", err)
}

// Delete removes a page's deletable keys in one statement.
func (u *purger) Delete(ctx context.Context, del []string, more bool) (int, error) {
	u.args["del"], u.args["force"] = del, u.force
	var n int64
	err := u.p.do(ctx, "purge", func() error {
		t, err := u.p.pool.Exec(ctx, `DELETE FROM records WHERE key = ANY(@del::text[]) AND `+selectorSQL+`
			AND (@force::boolean OR NOT `+liveSQL+`)`, u.args)
		n = t.RowsAffected()
		return err
	})
	if err != nil {
		return 0, err
	}
	return int(n), nil
}

// missing returns the keys that have no record, in the order given.
func (p *Ledger) missing(ctx context.Context, keys []string) ([]string, error) {
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
func (p *Ledger) page(ctx context.Context, args pgx.NamedArgs) ([]string, map[string]struct{}, error) {
	rows, err := p.pool.Query(ctx, `SELECT key, `+liveSQL+` FROM records
		WHERE key > @cursor::text AND `+selectorSQL+` ORDER BY key LIMIT @chunk::bigint`, args)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	return ledger.ScanPage(rows)
}

// Vacuum implements Ledger: VACUUM FULL rewrites the ledger's tables and
// gives their free space back. It holds an exclusive lock on them while it
// runs (runs wait for it), and needs the tables' owner (the role that
// created the schema).
func (p *Ledger) Vacuum(ctx context.Context) (*ledger.VacuumResult, error) {
	size := func() (int64, error) {
		var n int64
		err := p.pool.QueryRow(ctx,
			`SELECT pg_total_relation_size('records'::regclass) + pg_total_relation_size('attempts'::regclass)`).Scan(&n)
		return n, err
	}
	var (
		r   ledger.VacuumResult
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
		return nil, &ledger.StoreError{Op: "compact", Path: p.desc, Err: errors.New("only the owner of the ledger's tables may compact them"),
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
