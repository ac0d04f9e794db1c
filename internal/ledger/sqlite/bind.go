package sqlite

import (
	"errors"
	"fmt"
	"io/fs"

	"golang.org/x/sys/unix"

	"github.com/idemhq/idem/internal/ledger"
)

// The ledger's files are bound together so that SQLite never replays a
// -wal onto a file it does not belong to (a ledger moved away and another
// database, or a restored copy, put at its path, with the old -wal left
// beside it). The -wal carries, in an extended attribute, the identity
// (device and inode) of the main file it was made for; an open that finds
// a -wal bound to another file refuses the ledger before SQLite reads it.
// Only path-based system calls are used (stat, getxattr, setxattr): no
// descriptor of the ledger's files is opened, so none is closed, and
// SQLite's locks are safe. Where the file system has no extended
// attributes the check cannot be made, and is skipped.
//
// What this does not see: a file written over in place (cp onto an
// existing ledger keeps its inode). The documented restore removes the
// -wal first (see idem backup --help).
const walBindAttr = "user.idem.main"

// fileID is a file's device and inode.
type fileID struct{ dev, ino uint64 }

func (id fileID) String() string { return fmt.Sprintf("%d:%d", id.dev, id.ino) }

func statID(path string) (fileID, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return fileID{}, err
	}
	return fileID{dev: uint64(st.Dev), ino: st.Ino}, nil
}

// walBinding reads the identity the -wal beside real is bound to; ok false
// when there is no -wal or no binding to read.
func walBinding(real string) (string, bool) {
	buf := make([]byte, 64)
	n, err := unix.Getxattr(real+"-wal", walBindAttr, buf)
	if err != nil {
		return "", false
	}
	return string(buf[:n]), true
}

// checkWAL refuses a ledger whose -wal is bound to another main file.
func checkWAL(path, real string) error {
	bound, ok := walBinding(real)
	if !ok {
		return nil
	}
	id, err := statID(real)
	if err != nil || bound == id.String() {
		return nil
	}
	return &ledger.StoreError{Op: "open", Path: path,
		Err:  errors.New("the -wal beside the ledger belongs to another file: the ledger was moved, replaced or restored while its -wal stayed; SQLite would replay it onto this file"),
		Hint: "if the ledger was restored from a backup, remove its -wal and -shm (with no idem running); else put back the file the -wal belongs to"}
}

// bindWAL binds the -wal beside real to real's identity, when it is not
// bound yet; errors are ignored (a file system without extended
// attributes).
func (s *Ledger) bindWAL(real string) {
	if _, ok := walBinding(real); ok {
		return
	}
	id, err := statID(real)
	if err != nil {
		return
	}
	unix.Setxattr(real+"-wal", walBindAttr, []byte(id.String()), 0)
}

// noteFiles remembers the identity of the ledger's files as this
// connection uses them, for checkFiles.
func (s *Ledger) noteFiles(real string) {
	s.real = real
	s.mainID, _ = statID(real)
	s.walID, _ = statID(real + "-wal")
}

// checkFiles reports whether the ledger's files at its path are still the
// ones this connection writes to: after a commit, a deleted, moved or
// replaced main file or -wal means the commit is in a file no later run
// reads: ledger.ErrFilesChanged. (The -wal is not deleted while this
// connection is open, and a checkpoint keeps its inode.) A stat that
// fails otherwise tells nothing.
func (s *Ledger) checkFiles(op string) error {
	if s.real == "" {
		return nil
	}
	changed := false
	main, err := statID(s.real)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		changed = true
	case err == nil:
		changed = main != s.mainID
	}
	if s.walID != (fileID{}) {
		wal, err := statID(s.real + "-wal")
		switch {
		case errors.Is(err, fs.ErrNotExist):
			changed = true
		case err == nil:
			changed = changed || wal != s.walID
		}
	}
	if !changed {
		return nil
	}
	return &ledger.StoreError{Op: op, Path: s.path, Err: ledger.ErrFilesChanged,
		Hint: "keep the ledger's files in place while idem runs; this key runs again on its next run"}
}
