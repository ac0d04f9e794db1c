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
