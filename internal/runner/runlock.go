package runner

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"syscall"
	"time"

	"github.com/idemhq/idem/internal/ledger"
	"github.com/idemhq/idem/internal/runner/procs"
)

// HeldError is returned when the key's run lock is held by processes that
// idem cannot see or stop (another PID namespace, such as a container
// sharing the ledger): nothing ran and the reservation was released.
type HeldError struct {
	Key      string
	LockPath string
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("key %q is held by processes of an earlier run that idem cannot see", e.Key)
}

// lockTries bounds how often lockKey stops what it finds and tries again.
const lockTries = 20

// touchAfter is how old the lock file's modification time may grow
// before a run sets it to now: far below any age-based cleaner's (days),
// far above a run's pace, so that most runs pay nothing for it.
const touchAfter = time.Hour

// takeLock takes the key's run lock before the first attempt, without
// waiting. Held: the earlier run's processes that the scans find (by
// their identity, or holding the lock) are stopped and the lock tried
// again; held while the scans find nothing (processes in another PID
// namespace): *HeldError.
func (inv *invocation) takeLock(ctx context.Context) error {
	if err := inv.openLock(ctx); err != nil {
		return err
	}
	held, err := inv.lockKey(ctx, inv.id(inv.n))
	if err == nil && held {
		err = &HeldError{Key: inv.o.Key, LockPath: inv.r.LockPath}
	}
	return err
}

// relock gives the next attempt a description of its own: idem closes its
// copy of the one the attempt that ended inherited and locks the key's
// byte again on a new one. While a process of that attempt keeps the old
// description open (one that cleared its environment, which the scan by
// identity misses), the byte stays held: those processes are found by
// the lock they hold and stopped first. False: one that idem cannot see
// still holds it, and no next attempt starts (the key is left retryable,
// and stays busy to later runs while it holds the lock).
func (inv *invocation) relock(ctx context.Context) (bool, error) {
	if inv.lock == nil {
		return true, nil
	}
	inv.lock.Close()
	inv.lock = nil
	if inv.lockFile == nil {
		return true, nil
	}
	held, err := inv.lockKey(ctx, inv.id(inv.n+1))
	if err == nil && held {
		inv.res.Warnings = append(inv.res.Warnings, fmt.Sprintf(
			"processes of attempt %d that idem cannot see still hold the run lock %s; no further attempt starts", inv.n, inv.r.LockPath))
	}
	return !held && err == nil, err
}

// lockKey takes the key's run lock on a new description (inv.lock),
// stopping the processes of runs before before that hold it; held: the
// lock stays held by processes the scans do not find.
func (inv *invocation) lockKey(ctx context.Context, before procs.Run) (held bool, err error) {
	r := inv.r
	if inv.lockFile == nil {
		return false, nil
	}
	for try := 0; ; try++ {
		f, held, err := inv.lockFile.Lock(inv.o.Key)
		if err != nil {
			return false, lockErr(r.LockPath, err)
		}
		if !held {
			inv.lock = f
			return false, nil
		}
		n, err := r.stopRun(ctx, scan{before: before, secret: inv.guard.Secret, lock: inv.lockFile}, inv.o.KillGrace, inv)
		if err != nil {
			return false, err
		}
		if inv.signalled != 0 {
			return false, &InterruptedError{Key: inv.o.Key, Signal: inv.signalled}
		}
		if try >= lockTries || n == 0 && try > 0 {
			return true, nil
		}
		if n == 0 {
			// The last holder may be exiting: look once more.
			<-r.Clock.After(groupPoll)
		}
	}
}

// lockErr is a *ledger.StoreError for an error of the run lock at path.
func lockErr(path string, err error) error {
	var foreign *procs.ForeignLockError
	if errors.As(err, &foreign) {
		return &ledger.StoreError{Op: "take the run lock", Path: path, Err: err,
			Hint: "remove it, or run idem as the ledger's owner ('runuser -u OWNER -- idem ...')"}
	}
	if errors.Is(err, syscall.ENOLCK) || errors.Is(err, syscall.EOPNOTSUPP) {
		return &ledger.StoreError{Op: "take the run lock", Path: path, Err: err, Hint: ledger.LocksRefusedHint}
	}
	return &ledger.StoreError{Op: "take the run lock", Path: path, Err: err,
		Hint: "check the permissions of the directory beside the ledger"}
}

// bindTries bounds how often openLock reads the guard again after
// another run bound the ledger to another run lock file first.
const bindTries = 3

// openLock opens the run lock file (inv.lockFile; nil: none) the ledger
// is bound to (ledger.RunGuard). A bound file whose path no longer leads
// to it (deleted, or replaced) is not given up while a process here still
// has it open, as a run's leftovers may hold it: idem keeps locking on
// that file (rebind). Otherwise the ledger is bound to the file found, or
// created. The guard the reservation read may be out of date by now:
// another run may have bound the ledger to another file meanwhile, whose
// leftovers a binding over it would hide from every later run. So a
// binding is made only over the file the guard names
// (ledger.RunGuarder.BindRunLock), and when another run's came first,
// openLock reads the guard again and starts over. A file untouched for
// touchAfter gets its times set to now.
func (inv *invocation) openLock(ctx context.Context) error {
	r := inv.r
	if r.LockPath == "" {
		return nil
	}
	for try := 1; ; try++ {
		lf, stale, err := inv.openBoundLock(ctx)
		if err != nil {
			return err
		}
		if !stale {
			if lf != nil && r.Clock.Now().Unix()-lf.Mtime >= int64(touchAfter/time.Second) {
				lf.Touch()
			}
			inv.lockFile = lf
			return nil
		}
		if try == bindTries {
			return &ledger.StoreError{Op: "take the run lock", Path: r.LockPath,
				Err:  errors.New("other runs keep binding the ledger to other run lock files"),
				Hint: "something keeps deleting or replacing the run lock file: find it and stop it (a cleaner of the directory?)"}
		}
		g, err := runGuard(ctx, r.Ledger)
		if err != nil {
			return err
		}
		inv.guard.LockDev, inv.guard.LockIno = g.LockDev, g.LockIno
	}
}

// openBoundLock is one try of openLock: the file to lock on (nil: no
// lock on this platform), or stale: another run bound the ledger to
// another file than the guard names.
func (inv *invocation) openBoundLock(ctx context.Context) (lf *procs.LockFile, stale bool, err error) {
	r, g := inv.r, inv.guard
	gr, guarded := r.Ledger.(ledger.RunGuarder)
	bound := g.LockDev != 0 || g.LockIno != 0
	lf, err = procs.OpenLock(r.LockPath, !bound, r.TrustedUIDs...)
	if err != nil && !(bound && errors.Is(err, fs.ErrNotExist)) {
		return nil, false, lockErr(r.LockPath, err)
	}
	if err == nil && (lf == nil || lf.Dev == 0 && lf.Ino == 0) {
		if lf != nil {
			lf.Close()
		}
		return nil, false, nil // no lock on this platform
	}
	if bound && (lf == nil || lf.Dev != g.LockDev || lf.Ino != g.LockIno) {
		if lf != nil {
			lf.Close()
		}
		return inv.rebind(ctx, gr)
	}
	if !bound && guarded {
		lf.Mark(g.File)
		return inv.bind(ctx, gr, lf)
	}
	return lf, false, nil
}

// bind binds the ledger to lf over the file the guard names, and returns
// lf; stale (lf closed): another run bound another file first.
func (inv *invocation) bind(ctx context.Context, gr ledger.RunGuarder, lf *procs.LockFile) (*procs.LockFile, bool, error) {
	if err := inv.paused(); err != nil {
		// As the claim: no time left for the call, and not the ledger's
		// doing.
		lf.Close()
		return nil, false, err
	}
	cctx, cancel := inv.leaseCtx(ctx)
	ok, err := gr.BindRunLock(cctx, inv.guard.LockDev, inv.guard.LockIno, lf.Dev, lf.Ino)
	cancel()
	if err != nil || !ok {
		lf.Close()
		return nil, err == nil, err
	}
	return lf, false, nil
}

// rebind returns the run lock file to use when the one the ledger is
// bound to is no longer at its path. While a process here still has the
// bound file open (a leftover of any run of any key, which may hold its
// key's byte), idem reopens that file through the process and keeps
// locking on it, so that no run starts beside a leftover it could no
// longer see. Once none has (or idem cannot look: no Finder), the
// ledger is bound to a new file at the path, marked as the ledger's
// (procs.LockFile.Mark), unless another run bound it first (stale).
func (inv *invocation) rebind(ctx context.Context, gr ledger.RunGuarder) (*procs.LockFile, bool, error) {
	r, g := inv.r, inv.guard
	if r.Procs != nil {
		// A holder can fork, its child inheriting the file, and exit
		// while a scan reads /proc (a leftover that daemonizes does just
		// this): the child is neither in the list the scan read nor
		// among the holder's descriptors. Only a second scan, a poll
		// later, that finds none says that no process here has the file.
		for scan := 0; scan < 2; scan++ {
			if scan > 0 {
				<-r.Clock.After(groupPoll)
			}
			old, err := r.Procs.Reopen(r.LockPath, g.LockDev, g.LockIno, g.File)
			if err != nil {
				return nil, false, lockErr(r.LockPath, err)
			}
			if old != nil {
				return old, false, nil
			}
		}
	}
	lf, err := procs.OpenLock(r.LockPath, true, r.TrustedUIDs...)
	if err != nil {
		return nil, false, lockErr(r.LockPath, err)
	}
	lf.Mark(g.File)
	return inv.bind(ctx, gr, lf)
}
