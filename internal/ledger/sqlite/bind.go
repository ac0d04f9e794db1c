package sqlite

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/idemhq/idem/internal/ledger"
)

// The ledger's files are bound together so that SQLite never replays a
// -wal onto a file it does not belong to (a ledger moved away and another
// database, or a restored copy, put at its path, with the old -wal left
// beside it). The -wal carries, in an extended attribute, the identity
// (device and inode) of the main file it was made for, set before anything
// is written to it (createWAL, bindWAL); an open that finds a -wal with
// frames bound to another file, or to none, refuses the ledger before
// SQLite reads it (checkJournal). After the open only path-based system
// calls are used (stat, getxattr, setxattr): a descriptor of the ledger's
// files closed then would drop SQLite's locks. Where the file system has
// no extended attributes the binding cannot be made, and checkJournal
// relies on the files' headers alone.
const walBindAttr = "user.idem.main"

// fileID is a file's device and inode.
type fileID struct{ dev, ino uint64 }

func (id fileID) String() string { return fmt.Sprintf("%d:%d", id.dev, id.ino) }

func statID(path string) (fileID, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return fileID{}, err
	}
	return idOf(&st), nil
}

// idOf is the identity in a stat.
func idOf(st *unix.Stat_t) fileID { return fileID{dev: uint64(st.Dev), ino: st.Ino} }

// walBinding reads the identity the -wal beside real is bound to; errno
// is getxattr's error (ENODATA: no binding, ENOENT: no -wal, ENOTSUP: the
// file system keeps no extended attributes), 0 when it was read.
func walBinding(real string) (string, unix.Errno) {
	buf := make([]byte, 64)
	n, err := unix.Getxattr(real+"-wal", walBindAttr, buf)
	if err != nil {
		var errno unix.Errno
		if !errors.As(err, &errno) {
			errno = unix.EIO
		}
		return "", errno
	}
	return string(buf[:n]), 0
}

// bindWAL binds the -wal beside real to real's identity, when it is not
// bound yet; errors are ignored (a file system without extended
// attributes).
func bindWAL(real string) {
	if _, errno := walBinding(real); errno != errNoAttr {
		return
	}
	id, err := statID(real)
	if err != nil {
		return
	}
	unix.Setxattr(real+"-wal", walBindAttr, []byte(id.String()), 0)
}

// noteFiles remembers the identity of the ledger's files as this
// connection uses them, for checkFiles and shmChanged; shm is the -shm as
// it was before SQLite opened it.
func (s *Ledger) noteFiles(real string, shm fileInfo) {
	s.real = real
	s.mainID, _ = statID(real)
	s.walID, _ = statID(real + "-wal")
	if s.replayOnly == nil { // else it has no -shm
		s.watchShm = true
		s.shmID, s.shmKnown = heldShm(real+"-shm", shm)
	}
}

// heldShm is the identity of the -shm at path that this process's SQLite
// opened, given the file at path before it did; ok is false when it is
// not known yet. The same file at the path before and after is the one
// it opened (a file deleted meanwhile keeps its inode number while SQLite
// holds it open, so no other file can take it). Else, where the
// process's descriptors can be read, the descriptor SQLite holds says,
// and none means SQLite has not opened the -shm yet (a ledger switched to
// WAL mode during the open maps it at its first transaction). Elsewhere
// it is the file at the path now.
func heldShm(path string, before fileInfo) (fileID, bool) {
	now, err := statID(path)
	if err == nil && before.exists && now == idOf(&before.st) {
		return now, true
	}
	// The kernel names a descriptor's file by its path with every link
	// resolved, directories included (a ledger reached through a linked
	// directory).
	dir, derr := filepath.EvalSymlinks(filepath.Dir(path))
	if derr == nil {
		if id, ok, readable := heldFile(filepath.Join(dir, filepath.Base(path))); readable {
			return id, ok
		}
	}
	return now, err == nil
}

// shmChanged reports whether the -shm at the ledger's path is not the
// one this connection shares with the processes it knew, or is gone. If
// the -shm was deleted while in use, the next process to open the ledger
// made a new one, and those that opened it after share that one: each
// side then indexes the same -wal in its own -shm, and a write or a
// checkpoint from this side could overwrite what the other side committed
// there. So such a connection writes nothing more (errShmReplaced). A
// -shm that is gone counts too: one may have been made and deleted in
// turn. A stat that fails otherwise tells nothing.
//
// It narrows what deleting a -shm in use can break to the moments around
// the deletion, and only on this side: SQLite's WAL rests on every
// process sharing one -shm, and a process that made a new one cannot
// tell that another still uses the old.
func (s *Ledger) shmChanged() bool {
	if !s.watchShm {
		return false
	}
	id, err := statID(s.real + "-shm")
	if !s.shmKnown {
		// Called inside a transaction, which maps the -shm: the one SQLite
		// holds, or, if that cannot be learnt, the one at the path.
		if s.shmID, s.shmKnown = heldShm(s.real+"-shm", fileInfo{}); !s.shmKnown {
			s.shmID, s.shmKnown = id, err == nil
		}
	}
	if errors.Is(err, fs.ErrNotExist) {
		return true
	}
	return err == nil && id != s.shmID
}

// shmReplaced is shmChanged for a caller that does not hold s.mu (the
// -wal's trim, Vacuum, Close): it may learn the -shm, as writes do.
func (s *Ledger) shmReplaced() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.shmChanged()
}

// filesChangedHint is the hint of ledger.ErrFilesChanged.
const filesChangedHint = "keep the ledger's files in place while idem runs; this key runs again on its next run"

// errShmReplaced is a write refused because shmChanged: nothing was
// written. It is a ledger.ErrFilesChanged, which the runner does not
// retry.
var errShmReplaced error = shmReplacedError{}

type shmReplacedError struct{}

func (shmReplacedError) Error() string {
	return "the ledger's -shm was deleted or replaced while this run used it: " +
		"this run writes nothing more, which could overwrite what other runs recorded"
}

func (shmReplacedError) Is(target error) bool { return target == ledger.ErrFilesChanged }

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
		Hint: filesChangedHint}
}
