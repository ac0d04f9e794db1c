package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/idemhq/idem/internal/ledger"
)

// Backup writes a consistent copy of the ledger to dest, a new file (0600),
// while runs go on: VACUUM INTO reads one snapshot and writes a compact
// database with no -wal, which is a ledger as it is (in rollback mode,
// which the open of a restored ledger switches back to WAL). The copy's
// token mark says it is a backup, so that a ledger restored from it never
// hands out a token again (see raiseMark); the copy is synced, with its
// directory entry. It fails, with a *StoreError, when dest exists (a
// backup never overwrites) or cannot be written; a dest left half-written
// by a failure is removed.
func (s *Ledger) Backup(ctx context.Context, dest string) error {
	abs, err := filepath.Abs(dest)
	if err != nil {
		return &ledger.StoreError{Op: "backup", Path: dest, Err: err}
	}
	// VACUUM INTO writes into an empty file: make it first, private.
	f, err := os.OpenFile(abs, os.O_RDWR|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
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
	if err := markBackup(ctx, abs); err != nil {
		os.Remove(abs)
		return err
	}
	return nil
}

// markBackup sets the token mark of the backup at abs to restoredBoot and
// syncs the file and its directory entry.
func markBackup(ctx context.Context, abs string) error {
	db, err := sql.Open("sqlite", dsn(abs, false, false)+"&_pragma=synchronous(FULL)")
	if err == nil {
		_, err = db.ExecContext(ctx, `UPDATE token_mark SET boot_id = ?`, restoredBoot)
		if cerr := db.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return storeErr("backup", abs, err)
	}
	f, err := os.Open(abs) // the backup's own connection is closed: no lock to drop
	if err == nil {
		err = f.Sync()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err == nil {
		err = syncDir(abs)
	}
	if err != nil {
		return &ledger.StoreError{Op: "backup", Path: abs, Err: err, Hint: "check the health of the disk that holds the backup"}
	}
	return nil
}
