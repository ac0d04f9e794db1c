package postgres_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/internal/ledger"
	"github.com/idemhq/idem/internal/ledger/ledgertest"
	"github.com/idemhq/idem/internal/ledger/postgres"
)

// explain returns the plan of q in schema, with sequential scans off
// (a test's small tables would always be scanned whole otherwise).
func explain(t *testing.T, schema, q string, args pgx.NamedArgs) string {
	t.Helper()
	ctx := context.Background()
	c := adminConn(t)
	if _, err := c.Exec(ctx, `SET search_path = `+pgx.Identifier{schema}.Sanitize()+`; SET enable_seqscan = off`); err != nil {
		t.Fatal(err)
	}
	rows, err := c.Query(ctx, `EXPLAIN (COSTS OFF) `+q, args)
	if err != nil {
		t.Fatalf("explain %s: %v", q, err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}

// TestPostgresListingPlans: a page of a listing is an index scan whose
// index condition starts at the cursor (the status index for one status),
// and nothing reads the table whole.
func TestPostgresListingPlans(t *testing.T) {
	dsn, schema := ledgertest.PostgresDSN(t), freshSchema(t)
	openLedger(t, dsn, schema)
	after := &ledger.Cursor{Outcome: time.Now(), Seq: 10}
	failed := []ledger.Status{ledger.StatusFailed}
	for _, tc := range []struct {
		name  string
		f     ledger.ListFilter
		after *ledger.Cursor
		want  []string
	}{
		{"all, first page", ledger.ListFilter{}, nil, []string{"Index Scan Backward using records_outcome"}},
		{"all, next page", ledger.ListFilter{}, after, []string{"Index Scan Backward using records_outcome",
			"Index Cond: (ROW(COALESCE(finished, created), seq) < ROW("}},
		{"status, next page", ledger.ListFilter{Statuses: failed}, after, []string{"Index Scan Backward using records_status_outcome",
			"Index Cond: ((status = 'failed'::text) AND (ROW(COALESCE(finished, created), seq) < ROW("}},
		{"prefix", ledger.ListFilter{Prefix: "evt:"}, after, []string{"Index Cond: ((key >= 'evt:'::text)"}},
		{"status and prefix", ledger.ListFilter{Statuses: failed, Prefix: "evt:"}, after, []string{"Index Cond: ((status = 'failed'::text)"}},
		{"since", ledger.ListFilter{Since: time.Now()}, nil, []string{"Index Scan Backward using records_outcome",
			"Index Cond: (COALESCE(finished, created) >= "}},
	} {
		q, args, err := postgres.PageQuery(schema, tc.f, tc.after, 10)
		if err != nil {
			t.Fatal(err)
		}
		p := explain(t, schema, q, args)
		for _, w := range append(tc.want, "") {
			if w == "" {
				if strings.Contains(p, "Seq Scan") {
					t.Errorf("%s: a sequential scan:\n%s", tc.name, p)
				}
			} else if !strings.Contains(p, w) {
				t.Errorf("%s: plan\n%s\nwant %q", tc.name, p, w)
			}
		}
	}
}

// TestPostgresPurgePlans: a purge page reads an index that its selector
// bounds (--expired: records_expires, not the primary key from the
// start).
func TestPostgresPurgePlans(t *testing.T) {
	dsn, schema := ledgertest.PostgresDSN(t), freshSchema(t)
	openLedger(t, dsn, schema)
	failed := []ledger.Status{ledger.StatusFailed}
	for _, tc := range []struct {
		sel  ledger.Selector
		want string
	}{
		{ledger.Selector{Expired: true}, "Index Cond: (expires <= "},
		{ledger.Selector{Statuses: failed}, "Index Cond: (status = ANY ('{failed}'::text[]))"},
		{ledger.Selector{Prefix: "evt:"}, "(key >= 'evt:'::text) AND (key < 'evt;'::text))"},
		{ledger.Selector{Prefix: "evt:", Statuses: failed}, "(key >= 'evt:'::text) AND (key < 'evt;'::text))"},
	} {
		args := pgx.NamedArgs{"now": time.Now(), "statuses": nil, "prefix": nil, "keys": nil, "before": nil,
			"expired": tc.sel.Expired, "cursor": "", "chunk": 10}
		if len(tc.sel.Statuses) > 0 {
			args["statuses"] = []string{"failed"}
		}
		if tc.sel.Prefix != "" {
			args["prefix"] = tc.sel.Prefix
		}
		p := explain(t, schema, postgres.PurgePageSQL(schema), args)
		if !strings.Contains(p, tc.want) || strings.Contains(p, "Seq Scan") {
			t.Errorf("purge %+v: plan\n%s\nwant %q and no sequential scan", tc.sel, p, tc.want)
		}
	}
}
