package sqlite_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemhq/idem/internal/ledger"
	"github.com/idemhq/idem/internal/ledger/sqlite"
)

// TestCheckProblemOnEach: SQLite's integrity_check reports every damaged
// page of every b-tree in one row, its lines joined by newlines; Check
// gives each as a problem of its own, without SQLite's "*** in database
// main ***" heading, and counts them all.
func TestCheckProblemOnEach(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	db := rawDB(t, path)
	execAll(t, db, `CREATE TABLE filler (body BLOB)`)
	for range 40 {
		execAll(t, db, `INSERT INTO filler (body) VALUES (randomblob(3000))`)
	}
	execAll(t, db, `PRAGMA wal_checkpoint(TRUNCATE)`)
	var leaves []int64
	rows, err := db.Query(`SELECT pageno FROM dbstat WHERE name = 'filler' AND pagetype = 'leaf' ORDER BY pageno LIMIT 4`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var p int64
		if err := rows.Scan(&p); err != nil {
			t.Fatal(err)
		}
		leaves = append(leaves, p)
	}
	if err := errors.Join(rows.Err(), rows.Close(), db.Close()); err != nil || len(leaves) < 4 {
		t.Fatalf("the filler's leaves: %v, %v", leaves, err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range leaves {
		// A leaf's header: its cell count and the start of its cell
		// content, both out of range, so that each page is a problem.
		copy(b[(p-1)*4096+3:], []byte{0xff, 0xff, 0x00, 0x01})
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	l, err = sqlite.OpenWith(context.Background(), path, ledger.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	r, err := l.Check(context.Background())
	if r == nil || err == nil {
		t.Fatalf("check of a ledger with %d damaged pages: %v, %v; want its problems and an error", len(leaves), r, err)
	}
	for _, p := range r.Problems {
		if strings.Contains(p, "\n") || strings.HasPrefix(p, "***") || p == "" {
			t.Errorf("problem %q: want one problem, no heading", p)
		}
	}
	for _, page := range leaves {
		if !strings.Contains(strings.Join(r.Problems, "|"), fmt.Sprintf("page %d:", page)) {
			t.Errorf("problems %q: none names page %d", r.Problems, page)
		}
	}
	// SQLite may stop at a page it cannot read, and Check then says so
	// instead of counting.
	if want := fmt.Sprintf("found %d problems", len(r.Problems)); !strings.Contains(err.Error(), want) &&
		!strings.Contains(err.Error(), "SQLite reports it corrupt") {
		t.Errorf("check: %v; want %q", err, want)
	}
}

// TestCheckRowsRunsNeed: a ledger whose pages are sound but that lacks a
// row every new run reads (as a salvage of a damaged ledger can), or
// whose token counter is behind a token handed out, fails the check,
// saying what is wrong; the sound ledger passes.
func TestCheckRowsRunsNeed(t *testing.T) {
	dir := t.TempDir()
	pristine := filepath.Join(dir, "pristine.db")
	l, err := sqlite.Open(context.Background(), pristine)
	if err != nil {
		t.Fatal(err)
	}
	reserveNew(t, l, "evt:check-rows")
	l.Close()
	execAll(t, rawDB(t, pristine), `PRAGMA wal_checkpoint(TRUNCATE)`)
	b, err := os.ReadFile(pristine)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, change, want string }{
		{"sound", ``, ""},
		{"no token row", `DELETE FROM counters WHERE name = 'token'`, "table counters has 0 rows runs can read (of 0) where runs need 1"},
		{"no token mark", `DELETE FROM token_mark`, "table token_mark has 0 rows runs can read (of 0) where runs need 1"},
		{"no run guard", `DELETE FROM run_guard`, "table run_guard has 0 rows runs can read (of 0) where runs need 1"},
		{"counter a blob", `UPDATE counters SET value = CAST('1' AS BLOB) WHERE name = 'token'`, "table counters has 0 rows runs can read (of 1)"},
		{"counter text", `UPDATE counters SET value = 'x' WHERE name = 'token'`, "table counters has 0 rows runs can read (of 1)"},
		{"run guard's singleton 2", `PRAGMA ignore_check_constraints = 1; UPDATE run_guard SET singleton = 2`, "table run_guard has 0 rows runs can read (of 1)"},
		{"two token marks", `PRAGMA ignore_check_constraints = 1; INSERT INTO token_mark SELECT 2, mark, boot_id FROM token_mark`, "table token_mark has 1 rows runs can read (of 2)"},
		{"counter behind", `UPDATE counters SET value = 0 WHERE name = 'token'`, "the token counter is behind tokens already handed out"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".db")
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			if tc.change != "" {
				db := rawDB(t, path)
				execAll(t, db, tc.change, `PRAGMA wal_checkpoint(TRUNCATE)`)
				db.Close()
			}
			l, err := sqlite.OpenWith(context.Background(), path, ledger.Options{ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			r, err := l.Check(context.Background())
			if tc.want == "" {
				if err != nil || r == nil || len(r.Problems) != 0 {
					t.Fatalf("check of a sound ledger: %v, %v", r, err)
				}
				return
			}
			if err == nil || r == nil || len(r.Problems) != 1 || !strings.Contains(r.Problems[0], tc.want) {
				t.Fatalf("check: %v, %v; want one problem, %q", r, err, tc.want)
			}
		})
	}
}
