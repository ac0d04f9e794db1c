package sqlite_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/idemhq/idem/internal/ledger"
	"github.com/idemhq/idem/internal/ledger/sqlite"
)

// TestSQLiteExistingCreatesNothing: opened to write with Existing (purge),
// a missing or empty file is ErrNoLedger and stays as it was; a ledger
// that exists opens.
func TestSQLiteExistingCreatesNothing(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	missing, empty, dangling := filepath.Join(dir, "missing.db"), filepath.Join(dir, "empty.db"), filepath.Join(dir, "link.db")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "nowhere.db"), dangling); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{missing, empty, dangling} {
		l, err := sqlite.OpenWith(ctx, path, ledger.Options{Existing: true})
		var se *ledger.StoreError
		if !errors.Is(err, ledger.ErrNoLedger) || !errors.As(err, &se) || se.Path != path {
			if l != nil {
				l.Close()
			}
			t.Fatalf("open %s with Existing: %v, want a *StoreError for the path wrapping ErrNoLedger", filepath.Base(path), err)
		}
	}
	if _, err := os.Lstat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing ledger was created: %v", err)
	}
	if fi, err := os.Stat(empty); err != nil || fi.Size() != 0 {
		t.Errorf("the empty file was written: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "nowhere.db")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the link's target was created: %v", err)
	}
	path := filepath.Join(dir, "ledger.db")
	w, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	l, err := sqlite.OpenWith(ctx, path, ledger.Options{Existing: true})
	if err != nil {
		t.Fatalf("open an existing ledger with Existing: %v", err)
	}
	l.Close()
}
