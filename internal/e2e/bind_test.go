package e2e

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"
)

// TestLedgerForeignFileKeepsItsData: the ledger is moved away and another
// SQLite database put at its path, with idem's -wal left beside it. idem
// refuses it (74) before SQLite can replay the -wal onto it; the other
// database keeps its data.
func TestLedgerForeignFileKeepsItsData(t *testing.T) {
	g := newLeaseRig(t)
	g.run("run", "--key", "bind:first", "--", "echoargs", "x").expect(0)
	if fi, err := os.Stat(g.ledger + "-wal"); err != nil || fi.Size() == 0 {
		t.Fatalf("no -wal left by the run: %v %v", fi, err)
	}
	if err := os.Rename(g.ledger, g.path("moved.db")); err != nil {
		t.Fatal(err)
	}
	os.Remove(g.ledger + "-shm")
	// Made elsewhere, then moved into place: SQLite opening it at the
	// ledger's path in rollback mode would itself remove the -wal.
	execSQL(t, g.path("customers.db"), `CREATE TABLE customers (name TEXT)`, `INSERT INTO customers VALUES ('ada'), ('bob')`)
	if err := os.Rename(g.path("customers.db"), g.ledger); err != nil {
		t.Fatal(err)
	}

	before, err := os.ReadFile(g.ledger)
	if err != nil {
		t.Fatal(err)
	}
	p := g.run("run", "--key", "bind:second", "--", "echoargs", "y").expect(74)
	if !strings.Contains(p.stderr, "SQLite would replay it onto this file") || !strings.Contains(p.stderr, "never fold them in") {
		t.Errorf("no word of the -wal: %v", p)
	}
	// (Opening it with SQLite to look would itself replay the -wal.)
	if after, err := os.ReadFile(g.ledger); err != nil || !bytes.Equal(before, after) {
		t.Fatalf("the other database was changed: %v", err)
	}
	os.Remove(g.ledger + "-wal")
	os.Remove(g.ledger + "-shm")
	db := openDB(t, g.ledger)
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM customers`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("the other database lost its data: %d rows, %v", n, err)
	}
}

// TestLedgerMovedDuringRun: the ledger's main file, or only its -wal, is
// moved away while a run's command runs: the outcome would go to a file
// that is no longer the ledger, so idem exits 74 saying so, not 0.
func TestLedgerMovedDuringRun(t *testing.T) {
	timed(t)
	for _, suffix := range []string{"", "-wal"} {
		t.Run("moved"+suffix, func(t *testing.T) {
			g := newLeaseRig(t)
			g.run("run", "--key", "bind:warm", "--", "echoargs", "x").expect(0)
			ready := g.path("ready")
			p := g.start("run", "--key", "bind:moved", "--", "sleeper", "1s", ready)
			waitForFile(t, ready)
			time.Sleep(100 * time.Millisecond)
			if err := os.Rename(g.ledger+suffix, g.path("elsewhere"+suffix)); err != nil {
				t.Fatal(err)
			}
			p.wait().expect(74)
			if !strings.Contains(p.stderr, "no longer the ledger") {
				t.Errorf("no word of the moved file: %v", p)
			}
		})
	}
}
