package runner

import (
	"context"
	"errors"
	"fmt"

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

// takeLock takes the key's run lock before the first attempt, without
// waiting. Held: the earlier run's processes that the scans find (by
// their identity, or holding the lock) are stopped and the lock tried
// again; held while the scans find nothing (processes in another PID
// namespace): *HeldError.
func (inv *invocation) takeLock(ctx context.Context) error {
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
	if r.LockPath == "" {
		return false, nil
	}
	for try := 0; ; try++ {
		f, held, err := procs.Lock(r.LockPath, inv.o.Key, r.TrustedUIDs...)
		var foreign *procs.ForeignLockError
		if errors.As(err, &foreign) {
			return false, &ledger.StoreError{Op: "take the run lock", Path: r.LockPath, Err: err,
				Hint: "remove it, or run idem as the ledger's owner ('runuser -u OWNER -- idem ...')"}
		}
		if err != nil {
			return false, &ledger.StoreError{Op: "take the run lock", Path: r.LockPath, Err: err,
				Hint: "check the permissions of the directory beside the ledger"}
		}
		if !held {
			inv.lock = f
			return false, nil
		}
		n, err := r.stopRun(ctx, scan{before: before, secret: inv.guard.Secret, holders: true}, inv.o.KillGrace, inv)
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
