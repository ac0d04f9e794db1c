//go:build !linux || idem_noprocs

package procs

import (
	"os"
	"syscall"
)

// New returns this platform's Finder: without a way to read another
// process's environment it finds nothing, and only the lease and the
// abandoned owner's pid protect a key.
func New(...int) Finder { return noFinder{} }

type noFinder struct{}

func (noFinder) Find(Run, []byte) ([]Process, error) { return nil, nil }

// Runs finds nothing here, as Find.
func (noFinder) Runs(string, []byte) ([]Process, error) { return nil, nil }

func (noFinder) Alive(p Process) bool {
	return p.PID > 0 && syscall.Kill(p.PID, 0) == nil
}

func (n noFinder) Signal(p Process, sig syscall.Signal) bool {
	return n.Alive(p) && syscall.Kill(p.PID, sig) == nil
}

// Lock is always free here: there is no lock that every process of a run
// inherits and that idem can find the holders of (see LockFile).
func Lock(path, key string, trusted ...int) (*os.File, bool, error) { return nil, false, nil }

// LockFile stands for no file here: OpenLock opens nothing and Lock is
// always free. flock(2) locks are per description on macOS and FreeBSD
// too, but without /proc idem could not tell which processes hold one,
// so a held lock would only make the key busy until they end.
type LockFile struct {
	// Dev and Ino are 0: no file.
	Dev, Ino uint64
	Mtime    int64
}

// OpenLock opens nothing here.
func OpenLock(string, bool, ...int) (*LockFile, error) { return nil, nil }

// Touch does nothing here.
func (*LockFile) Touch() error { return nil }

// Mark does nothing here.
func (*LockFile) Mark(string) {}

// Close does nothing here.
func (*LockFile) Close() error { return nil }

// Lock is always free here.
func (*LockFile) Lock(string) (*os.File, bool, error) { return nil, false, nil }

// Holding finds nothing here: there is no lock to hold.
func (noFinder) Holding(uint64, uint64, string) ([]Process, error) { return nil, nil }

// Reopen finds nothing here: there is no lock file.
func (noFinder) Reopen(string, uint64, uint64, string) (*LockFile, error) { return nil, nil }

// Owner finds pid only when it is in this process's own namespace (pidns
// 0: no namespaces here) and alive; its start time cannot be checked.
func (n noFinder) Owner(_, pidns uint64, pid int, start uint64) (Process, bool) {
	p := Process{PID: pid}
	return p, pidns == 0 && n.Alive(p)
}
