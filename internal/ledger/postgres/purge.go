package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/internal/ledger"
)

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
	r, err := u.p.getRecord(ctx, u.p.db, key, false)
	return r, u.p.wrap("purge", err)
}

// Delete removes a page's deletable keys in one statement.
func (u *purger) Delete(ctx context.Context, del []string, more bool) (int, error) {
	u.args["del"], u.args["force"] = del, u.force
	var n int64
	err := u.p.do(ctx, "purge", func() error {
		return u.p.db.QueryRow(ctx, u.p.q(`WITH d AS (DELETE FROM {schema}.records WHERE key = ANY(@del::text[]) AND `+selectorSQL+`
			AND (@force::boolean OR NOT `+liveSQL+`) RETURNING key, status, finished, `+ledger.CounterColumns+`),
			t AS (`+addTotalsSQL(`count(*)`, `0`)+`),
			s AS (`+keepSuccessesSQL+`)
			SELECT count(*) FROM d`), u.args).Scan(&n)
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
	rows, err := p.db.Query(ctx, p.q(`SELECT u.k FROM unnest($1::text[]) WITH ORDINALITY AS u(k, i)
		WHERE NOT EXISTS (SELECT 1 FROM {schema}.records r WHERE r.key = u.k) GROUP BY u.k ORDER BY min(u.i)`), keys)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// purgePageSQL reads one page of purge candidates, in key order.
const purgePageSQL = `SELECT key, ` + liveSQL + ` FROM {schema}.records
	WHERE key > @cursor::text AND ` + selectorSQL + ` ORDER BY key LIMIT @chunk::bigint`

// page reads one page of purge candidates: their keys in order, and which
// of them are live.
func (p *Ledger) page(ctx context.Context, args pgx.NamedArgs) ([]string, map[string]struct{}, error) {
	rows, err := p.db.Query(ctx, p.q(purgePageSQL), args)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	return ledger.ScanPage(rows)
}

// CheckVacuum returns the error Vacuum would give for a role that does
// not own the ledger's tables (VACUUM skips those with a mere warning),
// so that purge --vacuum refuses before it removes anything.
func (p *Ledger) CheckVacuum(ctx context.Context) error {
	var owner bool
	if err := p.db.QueryRow(ctx, p.q(`SELECT bool_and(pg_has_role(relowner, 'USAGE')) FROM pg_class
		WHERE oid IN ('{schema}.records'::regclass, '{schema}.attempts'::regclass)`)).Scan(&owner); err != nil {
		return p.wrap("compact", err)
	}
	if !owner {
		return &ledger.StoreError{Op: "compact", Path: p.desc, Err: errors.New("only the owner of the ledger's tables may compact them"),
			Hint: "run it as the role that created the ledger's schema, or purge without --vacuum"}
	}
	return nil
}

// Vacuum implements Ledger: VACUUM FULL rewrites the ledger's tables and
// gives their free space back. It holds an exclusive lock on them while it
// runs (runs wait for it), and needs the tables' owner (the role that
// created the schema).
func (p *Ledger) Vacuum(ctx context.Context) (*ledger.VacuumResult, error) {
	size := func() (int64, error) {
		var n int64
		err := p.db.QueryRow(ctx,
			p.q(`SELECT pg_total_relation_size('{schema}.records'::regclass) + pg_total_relation_size('{schema}.attempts'::regclass)`)).Scan(&n)
		return n, err
	}
	var (
		r   ledger.VacuumResult
		err error
	)
	if r.Before, err = size(); err != nil {
		return nil, p.wrap("compact", err)
	}
	if err := p.CheckVacuum(ctx); err != nil {
		return nil, err
	}
	if err := p.do(ctx, "compact", func() error {
		// Unpinned: VACUUM refuses to run in a transaction or a pipeline,
		// and names nothing search_path resolves.
		_, err := p.pool.Exec(ctx, p.q(`VACUUM (FULL, ANALYZE) {schema}.records, {schema}.attempts`))
		return err
	}); err != nil {
		return nil, err
	}
	if r.After, err = size(); err != nil {
		return nil, p.wrap("compact", err)
	}
	return &r, nil
}

// keepSuccessesSQL raises each group's kept last success to the newest
// among the rows of CTE d (records being removed), so that purge does not
// take a group out of the metrics; the group is ledger.KeptSuccesses'.
const keepSuccessesSQL = `INSERT INTO {schema}.last_success AS l (grp, finished)
	SELECT split_part(key, '` + ledger.KeptGroupSep + `', 1), max(finished) FROM d WHERE status = 'succeeded' GROUP BY 1
	ON CONFLICT (grp) DO UPDATE SET finished = greatest(l.finished, excluded.finished)`

// addTotalsSQL adds the counters of the rows of CTE d (records being
// removed) to one of the totals' shards, picked at random, with the SQL
// expressions purged and expired for how many went by each way.
func addTotalsSQL(purged, expired string) string {
	return `INSERT INTO {schema}.totals AS t (shard, ` + ledger.CounterColumns + `, purged, expired)
		SELECT floor(random() * 16)::int, ` + ledger.SumCountersSQL("") + `, ` + purged + `, ` + expired + ` FROM d
		ON CONFLICT (shard) DO UPDATE SET replays = t.replays + excluded.replays,
			runs_succeeded = t.runs_succeeded + excluded.runs_succeeded, runs_failed = t.runs_failed + excluded.runs_failed,
			runs_retryable = t.runs_retryable + excluded.runs_retryable, att_success = t.att_success + excluded.att_success,
			att_transient = t.att_transient + excluded.att_transient, att_permanent = t.att_permanent + excluded.att_permanent,
			att_abandoned = t.att_abandoned + excluded.att_abandoned, att_interrupted = t.att_interrupted + excluded.att_interrupted,
			att_timeout = t.att_timeout + excluded.att_timeout, purged = t.purged + excluded.purged, expired = t.expired + excluded.expired`
}
