package sqlite

import (
	"errors"

	"golang.org/x/sys/unix"
)

// locksRefused asks the file system whether it takes locks on the file at
// path at all: SQLite reads a refused lock (ENOLCK, an NFS mount without a
// lock manager) as a busy one, so a ledger that stays busy is asked once,
// on the way to the error. It returns the refusal, or nil (the file locks;
// or it cannot be opened, which the busy error does not explain either).
func locksRefused(path string) error {
	// Never through a link, and never waiting on a FIFO put at the path.
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer unix.Close(fd)
	// SQLite's pending byte: a test of it conflicts with no holder's
	// purpose, and F_GETLK changes nothing.
	lk := unix.Flock_t{Type: unix.F_RDLCK, Whence: 0, Start: 0x40000000, Len: 1}
	if err := unix.FcntlFlock(uintptr(fd), unix.F_GETLK, &lk); errors.Is(err, unix.ENOLCK) || errors.Is(err, unix.EOPNOTSUPP) {
		return err
	}
	return nil
}
