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

func (noFinder) Alive(p Process) bool {
	return p.PID > 0 && syscall.Kill(p.PID, 0) == nil
}

func (n noFinder) Signal(p Process, sig syscall.Signal) bool {
	return n.Alive(p) && syscall.Kill(p.PID, sig) == nil
}

// Lock is always free here: there is no lock that every process of a run
// inherits and that another PID namespace can test.
func Lock(path, key string, trusted ...int) (*os.File, bool, error) { return nil, false, nil }

// Holding finds nothing here: there is no lock to hold.
func (noFinder) Holding(string, string) ([]Process, error) { return nil, nil }

// Owner finds pid only when it is in this process's own namespace (pidns
// 0: no namespaces here) and alive; its start time cannot be checked.
func (n noFinder) Owner(_, pidns uint64, pid int, start uint64) (Process, bool) {
	p := Process{PID: pid}
	return p, pidns == 0 && n.Alive(p)
}
