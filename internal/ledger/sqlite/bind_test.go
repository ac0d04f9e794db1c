package sqlite

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestNewLedgerWALBoundBeforeWrites: the switch of a new ledger to WAL
// mode leaves its -wal made and bound to the main file before anything is
// written to it. SQLite would create the -wal with the first write, and
// another process opening the ledger from then until a later binding (or
// for good, if the first write was cut short by a crash) would find a
// -wal with transactions bound to nothing, and refuse the ledger.
func TestNewLedgerWALBoundBeforeWrites(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", dsn(path, false, false))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s := &Ledger{path: path, db: db, conn: conn, real: path, Now: time.Now}
	defer s.Close()
	if err := s.switchToWAL(ctx, "initialise"); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path + "-wal")
	if err != nil {
		t.Fatalf("no -wal after the switch to WAL mode: %v", err)
	}
	if fi.Size() != 0 {
		t.Errorf("the -wal holds %d bytes before the first write", fi.Size())
	}
	main, err := statID(path)
	if err != nil {
		t.Fatal(err)
	}
	if bound, errno := walBinding(path); errno != 0 || bound != main.String() {
		t.Errorf("the -wal is bound to %q (errno %v); want the main file, %s", bound, errno, main)
	}
}
