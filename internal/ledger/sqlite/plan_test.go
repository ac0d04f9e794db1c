package sqlite

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/ledger"
)

// plan returns SQLite's EXPLAIN QUERY PLAN of q, one step a line.
func plan(t *testing.T, l *Ledger, q string, args []any) string {
	t.Helper()
	rows, err := l.conn.QueryContext(context.Background(), `EXPLAIN QUERY PLAN `+q, args...)
	if err != nil {
		t.Fatalf("explain %s: %v", q, err)
	}
	defer rows.Close()
	var steps []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		steps = append(steps, detail)
	}
	return strings.Join(steps, "\n")
}

// TestListingPlans: every page of a listing is an index range that
// starts at the cursor, and needs no sort, whatever the filter; a prefix
// is a range of keys (sorted: it is few records) unless it is dense.
func TestListingPlans(t *testing.T) {
	l, _ := newLedger(t)
	after := &ledger.Cursor{Outcome: time.Now(), Seq: 10}
	failed := []ledger.Status{ledger.StatusFailed}
	for _, tc := range []struct {
		name  string
		f     ledger.ListFilter
		dense bool
		want  []string // each page part's plan, a line each
	}{
		{"all", ledger.ListFilter{}, false, []string{
			"SCAN records USING INDEX records_outcome",
			"SEARCH records USING INDEX records_outcome (<expr>=? AND rowid<?)",
			"SEARCH records USING INDEX records_outcome (<expr><?)"}},
		{"status", ledger.ListFilter{Statuses: failed}, false, []string{
			"SEARCH records USING INDEX records_status_outcome (status=?)",
			"SEARCH records USING INDEX records_status_outcome (status=? AND <expr>=? AND rowid<?)",
			"SEARCH records USING INDEX records_status_outcome (status=? AND <expr><?)"}},
		{"since", ledger.ListFilter{Since: time.Now()}, false, []string{
			"SEARCH records USING INDEX records_outcome (<expr>>?)",
			"SEARCH records USING INDEX records_outcome (<expr>=? AND rowid<?)",
			"SEARCH records USING INDEX records_outcome (<expr>>? AND <expr><?)"}},
		{"sparse prefix", ledger.ListFilter{Prefix: "evt:"}, false, []string{
			"SEARCH records USING INDEX sqlite_autoindex_records_1 (key>? AND key<?)\nUSE TEMP B-TREE FOR ORDER BY",
			"SEARCH records USING INDEX records_outcome (<expr>=? AND rowid<?)",
			"SEARCH records USING INDEX sqlite_autoindex_records_1 (key>? AND key<?)\nUSE TEMP B-TREE FOR ORDER BY"}},
		{"dense prefix", ledger.ListFilter{Prefix: "evt:"}, true, []string{
			"SCAN records USING INDEX records_outcome",
			"SEARCH records USING INDEX records_outcome (<expr>=? AND rowid<?)",
			"SEARCH records USING INDEX records_outcome (<expr><?)"}},
		{"status and sparse prefix", ledger.ListFilter{Statuses: failed, Prefix: "evt:"}, false, []string{
			"SEARCH records USING INDEX sqlite_autoindex_records_1 (key>? AND key<?)\nUSE TEMP B-TREE FOR ORDER BY",
			"SEARCH records USING INDEX records_status_outcome (status=? AND <expr>=? AND rowid<?)",
			"SEARCH records USING INDEX sqlite_autoindex_records_1 (key>? AND key<?)\nUSE TEMP B-TREE FOR ORDER BY"}},
		{"status and dense prefix", ledger.ListFilter{Statuses: failed, Prefix: "evt:"}, true, []string{
			"SEARCH records USING INDEX records_status_outcome (status=?)",
			"SEARCH records USING INDEX records_status_outcome (status=? AND <expr>=? AND rowid<?)",
			"SEARCH records USING INDEX records_status_outcome (status=? AND <expr><?)"}},
	} {
		var got []string
		for _, p := range []struct {
			after *ledger.Cursor
			part  pagePart
		}{{nil, partOlder}, {after, partTies}, {after, partOlder}} {
			q, args, err := pageQuery(tc.f, p.after, 10, p.part, tc.dense)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, plan(t, l, q, args))
		}
		for i := range tc.want {
			if got[i] != tc.want[i] {
				t.Errorf("%s, part %d: plan\n%s\nwant\n%s", tc.name, i, got[i], tc.want[i])
			}
		}
	}
}

// TestPurgePlans: a purge page reads the selector's own index, never the
// whole ledger: --expired and --older-than their index, a prefix its range
// of keys, a rare status the status index, a common one the keys in order
// (most match).
func TestPurgePlans(t *testing.T) {
	ctx := context.Background()
	l, _ := newLedger(t)
	// Succeeded records enough to make that status dense.
	if _, err := l.conn.ExecContext(ctx, `WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ?)
		INSERT INTO records (key, fingerprint, command, status, attempts, max_attempts, token, created_ms, started_ms, updated_ms, finished_ms)
		SELECT printf('fill-%08d', i), 'fp', '[]', 'succeeded', 1, 1, i, 1, 1, 1, 1 FROM s`, probeRows(10)); err != nil {
		t.Fatal(err)
	}
	failed := []ledger.Status{ledger.StatusFailed}
	for _, tc := range []struct {
		sel  ledger.Selector
		want string
	}{
		{ledger.Selector{Statuses: []ledger.Status{ledger.StatusSucceeded}}, "SEARCH records USING INDEX sqlite_autoindex_records_1 (key>?)"},
		{ledger.Selector{Expired: true}, "SEARCH records USING INDEX records_expires (expires_ms<?)\nUSE TEMP B-TREE FOR ORDER BY"},
		{ledger.Selector{OlderThan: time.Hour}, "SEARCH records USING INDEX records_outcome (<expr><?)\nUSE TEMP B-TREE FOR ORDER BY"},
		{ledger.Selector{Statuses: failed}, "SEARCH records USING INDEX records_status_outcome (status=?)\nUSE TEMP B-TREE FOR ORDER BY"},
		{ledger.Selector{Prefix: "evt:"}, "SEARCH records USING INDEX sqlite_autoindex_records_1 (key>? AND key<?)"},
		{ledger.Selector{Prefix: "evt:", Statuses: failed}, "SEARCH records USING INDEX sqlite_autoindex_records_1 (key>? AND key<?)"},
		{ledger.Selector{Keys: []string{"evt:a:1234"}}, "SEARCH records USING INDEX sqlite_autoindex_records_1 (key=?)\nLIST SUBQUERY 1\nSCAN json_each VIRTUAL TABLE INDEX 1:"},
	} {
		p, err := l.newPurger(ctx, ledger.PurgeRequest{Selector: tc.sel, Chunk: 10})
		if err != nil {
			t.Fatal(err)
		}
		q, args := p.pageQuery("", 10)
		if got := plan(t, l, q, args); got != tc.want {
			t.Errorf("purge %+v: plan\n%s\nwant\n%s", tc.sel, got, tc.want)
		}
	}
}
