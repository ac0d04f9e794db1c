package postgres

import (
	"context"
	"fmt"
	"strings"
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

// List implements Ledger, over Each.
func (p *Ledger) List(ctx context.Context, f ledger.ListFilter) ([]*ledger.Record, error) {
	return ledger.Collect(ctx, f, p.Each)
}

// Each implements Ledger: ledger.EachPaged over keyset pages, each one
// statement (its own short transaction: no snapshot held against vacuum,
// no pooler connection held) that starts after the last record of the
// page before, in the order of the records_outcome index
// (records_status_outcome's for one status).
func (p *Ledger) Each(ctx context.Context, f ledger.ListFilter, fn func(*ledger.Record) error) error {
	return ledger.EachPaged(ctx, f, p.page1, fn)
}

// page1 reads one page of Each for a filter with at most one status.
func (p *Ledger) page1(ctx context.Context, f ledger.ListFilter, after *ledger.Cursor, n int) ([]*ledger.Record, error) {
	q, args, err := pageQuery(f, after, n)
	if err != nil {
		return nil, err
	}
	var out []*ledger.Record
	err = p.do(ctx, "list", func() error {
		out = make([]*ledger.Record, 0, n)
		rows, err := p.db.Query(ctx, p.q(q), args)
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

// pageQuery is the statement of one page of Each. Conditions that are off
// are left out rather than switched off by NULL arguments, so the plan is
// the index's whatever the server makes of the parameters.
func pageQuery(f ledger.ListFilter, after *ledger.Cursor, n int) (string, pgx.NamedArgs, error) {
	statuses, err := statusArg(f.Statuses)
	if err != nil {
		return "", nil, err
	}
	where := []string{`true`}
	args := pgx.NamedArgs{"n": n}
	switch st := f.Statuses; len(st) {
	case 0:
	case 1:
		where, args["status"] = append(where, `status = @status::text`), string(st[0])
	default:
		where, args["statuses"] = append(where, `status = ANY(@statuses::text[])`), statuses
	}
	if f.Prefix != "" {
		where, args["prefix"] = append(where, `key >= @prefix::text AND starts_with(key, @prefix::text)`), f.Prefix
	}
	if !f.Since.IsZero() {
		where, args["since"] = append(where, outcomeSQL+` >= @since::timestamptz`), f.Since
	}
	if after != nil {
		where = append(where, `(`+outcomeSQL+`, seq) < (@after::timestamptz, @seq::bigint)`)
		args["after"], args["seq"] = after.Outcome, after.Seq
	}
	return `SELECT ` + recordColumns + ` FROM {schema}.records WHERE ` + strings.Join(where, ` AND `) + `
		ORDER BY ` + outcomeSQL + ` DESC, seq DESC LIMIT @n::bigint`, args, nil
}

// Metrics implements Ledger, in one read-only transaction: one pass over
// the records for the counts and counters, one over the succeeded ones
// (by the status index) and the groups purge kept, for the groups.
func (p *Ledger) Metrics(ctx context.Context, req ledger.MetricsRequest) (*ledger.Metrics, error) {
	var m *ledger.Metrics
	err := p.do(ctx, "metrics", func() error {
		return pgx.BeginTxFunc(ctx, p.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
			if err := pin(ctx, tx); err != nil {
				return err
			}
			var now time.Time
			if err := tx.QueryRow(ctx, `SELECT `+epochUS(nowSQL(1)), p.now()).Scan(&usTime{&now}); err != nil {
				return err
			}
			var err error
			m, err = p.metrics(ctx, tx, req, now)
			return err
		})
	})
	return m, err
}

func (p *Ledger) metrics(ctx context.Context, tx pgx.Tx, req ledger.MetricsRequest, now time.Time) (*ledger.Metrics, error) {
	m := &ledger.Metrics{Now: now, Records: map[ledger.Status]int64{}}
	rows, err := tx.Query(ctx, p.q(`SELECT status, coalesce(expires <= $1, false), count(*),
		count(*) FILTER (WHERE status = 'in_progress' AND lease_expires <= $1),
		`+epochUS(`min(started) FILTER (WHERE status = 'in_progress')`)+`,
		`+ledger.SumCountersSQL("")+` FROM {schema}.records GROUP BY 1, 2`), now)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var (
			st       string
			expired  bool
			n, stuck int64
			oldest   time.Time
			c        ledger.Counters
		)
		if err := rows.Scan(append([]any{&st, &expired, &n, &stuck, &usTime{&oldest}}, c.Fields()...)...); err != nil {
			rows.Close()
			return nil, err
		}
		m.Counters.Add(c)
		if expired {
			m.Expired += n
			continue
		}
		m.Records[ledger.Status(st)] += n
		m.Stuck += stuck
		if !oldest.IsZero() && (m.OldestInProgress.IsZero() || oldest.Before(m.OldestInProgress)) {
			m.OldestInProgress = oldest
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var c ledger.Counters
	if err := tx.QueryRow(ctx, p.q(`SELECT `+ledger.SumCountersSQL("")+`, coalesce(sum(purged), 0), coalesce(sum(expired), 0) FROM {schema}.totals`)).
		Scan(append(c.Fields(), &m.Purged, &m.ExpiredRemoved)...); err != nil {
		return nil, err
	}
	m.Counters.Add(c)
	// Groups from the succeeded records, and those purge kept, grouped
	// again by this separator.
	grp := func(col string) string {
		return `CASE WHEN strpos(` + col + `, $1) > 0 THEN left(` + col + `, strpos(` + col + `, $1) - 1) ELSE ` + col + ` END`
	}
	rows, err = tx.Query(ctx, p.q(`SELECT g COLLATE "C", `+epochUS("max(last)")+` FROM (
		SELECT `+grp("key")+` AS g, max(finished) AS last FROM {schema}.records WHERE status = 'succeeded' GROUP BY 1
		UNION ALL SELECT `+grp("grp")+`, finished FROM {schema}.last_success) x
		GROUP BY 1 ORDER BY 1`), req.Sep())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			g    string
			last time.Time
		)
		if err := rows.Scan(&g, &usTime{&last}); err != nil {
			return nil, err
		}
		m.FoldGroups(ledger.GroupSuccess{Group: g, Last: last}, req.Groups())
	}
	return m, rows.Err()
}
