package sqlite

import (
	"context"
	"errors"
	"fmt"

	msqlite "modernc.org/sqlite"

	"github.com/idemhq/idem/internal/ledger"
)

// isReadFault reports an error that a failed read of the ledger's files
// gives: SQLITE_IOERR_READ and _SHORT_READ, or SQLITE_CORRUPT.
func isReadFault(err error) bool {
	var e *msqlite.Error
	if !errors.As(err, &e) {
		return false
	}
	switch e.Code() {
	case 266, 522, 11: // IOERR_READ, IOERR_SHORT_READ, CORRUPT
		return true
	}
	return e.Code()&0xff == 11
}

// wrap turns driver errors into *StoreError and passes contract errors on.
func (s *Ledger) wrap(op string, err error) error {
	var mismatch *ledger.MismatchError
	switch {
	case err == nil, errors.Is(err, ledger.ErrNotFound), errors.Is(err, ledger.ErrLeaseLost), errors.As(err, &mismatch),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.Is(err, errShmReplaced):
		return &ledger.StoreError{Op: op, Path: s.path, Err: err, Hint: filesChangedHint}
	}
	return storeErr(op, s.path, err)
}

func storeErr(op, path string, err error) error {
	se := &ledger.StoreError{Op: op, Path: path, Err: err}
	var e *msqlite.Error
	if errors.As(err, &e) {
		switch e.Code() & 0xff {
		case 26: // SQLITE_NOTADB
			return notLedger(path)
		case 11: // SQLITE_CORRUPT
			se.Err = errors.New("the database is corrupt")
			se.Hint = corruptHint
		case 15: // SQLITE_PROTOCOL: a lock request (fcntl) failed
			se.Err = fmt.Errorf("the file system refused the locks SQLite needs (SQLite code %d, locking protocol)", e.Code())
			se.Hint = lockHint
		case 10: // SQLITE_IOERR: read, write, fsync, shm... (ENOSPC on -shm, EIO)
			se.Err = fmt.Errorf("I/O error on the ledger's files (SQLite code %d)", e.Code())
			se.Hint = "check free space and the health of the disk that holds the ledger"
			switch e.Code() {
			case 2058, 2314, 3594, 3850: // IOERR_UNLOCK, _RDLOCK, _CHECKRESERVEDLOCK, _LOCK
				se.Err = fmt.Errorf("a lock on the ledger's files failed (SQLite code %d)", e.Code())
				se.Hint = lockHint
			case 4618, 4874, 5386: // IOERR_SHMOPEN, _SHMSIZE, _SHMMAP
				se.Err = shmError{e}
			}
		case 13: // SQLITE_FULL
			se.Err = errors.New("disk full")
			se.Hint = "free space on the ledger's file system"
		case 8, 3, 23: // READONLY, PERM, AUTH
			switch e.Code() {
			case 1544: // SQLITE_READONLY_DIRECTORY
				se.Err = errors.New("cannot create the ledger's -wal and -shm files: its directory is not writable")
			case 8, 264, 520, 776, 1032, 1288: // SQLITE_READONLY and its file-level variants
				se.Err = fmt.Errorf("the ledger is read-only (SQLite code %d)", e.Code())
			}
			se.Hint = "check the permissions of the ledger file and its directory"
		case 14: // CANTOPEN
			se.Hint = "check that the ledger's directory exists and is writable"
		case 5, 6: // BUSY, LOCKED
			se.Err = errStayedLocked
			se.Hint = "retry; if it persists, look for a stuck process holding the ledger"
			if err := locksRefused(path); err != nil {
				// SQLite takes a refused lock (ENOLCK) for a busy one
				// and retries it until its timeout.
				se.Err = fmt.Errorf("the file system refused a lock on the ledger: %w", err)
				se.Hint = lockHint
			}
		}
	}
	return se
}

// errStayedLocked is a wait for the ledger's locks that ran out.
var errStayedLocked = errors.New("the ledger stayed locked by another process")

// shmError is SQLite's failure to make, grow or map the ledger's -shm,
// kept reachable for isShmFault.
type shmError struct{ err *msqlite.Error }

func (e shmError) Error() string {
	return fmt.Sprintf("could not make or map the ledger's -shm file (SQLite code %d)", e.err.Code())
}

func (e shmError) Unwrap() error { return e.err }

// isShmFault reports whether err is SQLite's failure to make, grow or map
// the ledger's -shm (see shmError).
func isShmFault(err error) bool {
	var e shmError
	return errors.As(err, &e)
}

// lockHint is for lock requests (fcntl) that fail.
const lockHint = ledger.LocksRefusedHint

func isBusy(err error) bool {
	var e *msqlite.Error
	return errors.As(err, &e) && (e.Code()&0xff == 5 || e.Code()&0xff == 6)
}
