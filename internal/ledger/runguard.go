package ledger

import "context"

// RunGuard is what a ledger keeps so that nothing else on a host can pass
// for one of its runs, or take its run lock away. A backend that keeps it
// implements RunGuarder; one that does not (PostgreSQL, whose run lock is
// per host in the state directory) gives neither check.
type RunGuard struct {
	// Secret keys the tag every run marker (procs.Env) carries: only who
	// can read the ledger can make one that idem takes for its own run's.
	Secret []byte
	// LockDev and LockIno are the device and inode of the run lock file
	// the ledger is bound to; both 0: not bound yet.
	LockDev, LockIno uint64
	// File names the ledger file this guard was read from (its device and
	// inode), which the run lock file carries once bound: a lock file
	// under another name (moved, or reached through another mount) is
	// still this ledger's when it carries File, and a copy of the ledger,
	// whose guard records the original's lock, is another file. "": none.
	File string
}

// RunGuarder is a ledger that keeps a RunGuard.
type RunGuarder interface {
	// RunGuard reads the ledger's guard.
	RunGuard(ctx context.Context) (RunGuard, error)
	// BindRunLock binds the ledger to the run lock file dev/ino if it is
	// still bound to oldDev/oldIno (both 0: to none), and reports whether
	// it did. False: another run bound another file since the caller read
	// the guard; RunGuard reads which.
	BindRunLock(ctx context.Context, oldDev, oldIno, dev, ino uint64) (bool, error)
}
