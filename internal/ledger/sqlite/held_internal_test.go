//go:build linux

package sqlite

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/idemhq/idem/internal/ledger"
)

// TestHeldShm: the -shm a connection maps is known by the descriptor
// SQLite holds, not by whatever file is at the path: deleted and made
// again, even during the open, the path names another file, and every
// write is then refused.
func TestHeldShm(t *testing.T) {
	l, path := newLedger(t)
	shm := path + "-shm"
	mapped, err := statID(shm)
	if err != nil {
		t.Fatal(err)
	}
	if !l.shmKnown || l.shmID != mapped || l.shmChanged() {
		t.Fatalf("after open: watching %v, changed %v; want %v, unchanged", l.shmID, l.shmChanged(), mapped)
	}
	if err := os.Remove(shm); err != nil {
		t.Fatal(err)
	}
	if !l.shmChanged() {
		t.Errorf("with the -shm deleted: unchanged; want changed")
	}
	if err := os.WriteFile(shm, make([]byte, 32<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	other, err := statID(shm)
	if err != nil {
		t.Fatal(err)
	}
	// As if the file at the path had been swapped during the open.
	if got, ok := heldShm(shm, fileInfo{}); !ok || got != mapped {
		t.Errorf("heldShm with another file at the path: %v; want the mapped %v (the path's is %v)", got, mapped, other)
	}
	if !l.shmChanged() {
		t.Errorf("with another -shm at the path: unchanged; want changed")
	}
	before := tokenCounter(t, l)
	err = l.write(context.Background(), "test", bump)
	if !errors.Is(err, ledger.ErrFilesChanged) || tokenCounter(t, l) != before {
		t.Errorf("a write with another -shm at the path: %v; want refused", err)
	}
	if _, err := l.Vacuum(context.Background()); !errors.Is(err, ledger.ErrFilesChanged) {
		t.Errorf("a vacuum with another -shm at the path: %v; want refused", err)
	}
	// The ledger's last connection: closing it would checkpoint what its
	// index knows and delete the -wal.
	l.Close()
	if _, err := os.Stat(path + "-wal"); err != nil {
		t.Errorf("after the close of a connection whose -shm was replaced: %v; want the -wal left", err)
	}
}
