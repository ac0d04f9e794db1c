package sqlite

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/idemhq/idem/internal/ledger"
)

// Backup writes a consistent copy of the ledger to dest, a new file (0600),
// while runs go on: VACUUM INTO reads one snapshot and writes a compact
// database with no -wal, which is a ledger as it is. It fails, with a
// *StoreError, when dest exists (a backup never overwrites) or cannot be
// written; a dest left half-written by a failure is removed.
func (s *Ledger) Backup(ctx context.Context, dest string) error {
	abs, err := filepath.Abs(dest)
	if err != nil {
		return &ledger.StoreError{Op: "backup", Path: dest, Err: err}
	}
	// VACUUM INTO writes into an empty file: make it first, private.
	f, err := os.OpenFile(abs, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return &ledger.StoreError{Op: "backup", Path: abs, Err: errors.New("the file exists"),
			Hint: "name a new file: a backup never overwrites one"}
	}
	if err != nil {
		return &ledger.StoreError{Op: "backup", Path: abs, Err: err, Hint: permHint(err)}
	}
	f.Close() // dest is not the ledger: closing it drops none of SQLite's locks
	if _, err := s.conn.ExecContext(ctx, `VACUUM INTO ?`, abs); err != nil {
		os.Remove(abs)
		return storeErr("backup", s.path, err)
	}
	return nil
}
