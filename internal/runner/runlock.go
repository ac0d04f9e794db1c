package runner

import (
	"context"
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

// lockTries bounds how often takeLock stops what it finds and tries again.
const lockTries = 20

// takeLock takes the key's run lock before the first attempt, without
// waiting. Held: the earlier run's processes that the scan finds are
// stopped and the lock tried again; held while the scan finds nothing
// (processes in another PID namespace, or that cleared their
// environment): *HeldError.
func (inv *invocation) takeLock(ctx context.Context) error {
	r := inv.r
	if r.LockPath == "" {
		return nil
	}
	for try := 0; ; try++ {
		f, held, err := procs.Lock(r.LockPath, inv.o.Key)
		if err != nil {
			return &ledger.StoreError{Op: "take the run lock", Path: r.LockPath, Err: err,
				Hint: "check the permissions of the directory beside the ledger"}
		}
		if !held {
			inv.lock = f
			return nil
		}
		n, err := r.stopRun(ctx, inv.id(inv.n), nil, inv.o.KillGrace, inv)
		if err != nil {
			return err
		}
		if inv.signalled != 0 {
			return &InterruptedError{Key: inv.o.Key, Signal: inv.signalled}
		}
		if try >= lockTries || n == 0 && try > 0 {
			return &HeldError{Key: inv.o.Key, LockPath: r.LockPath}
		}
		if n == 0 {
			// The last holder may be exiting: look once more.
			<-r.Clock.After(groupPoll)
		}
	}
}
