package runner

import (
	"context"
	"syscall"
	"time"

	"github.com/idemhq/idem/internal/ledger"
	"github.com/idemhq/idem/internal/runner/procs"
)

// stopSignal is the one signal policy for stopping processes, idem's own
// run's and an earlier run's alike: SIGTERM until the kill grace since the
// first signal has passed, SIGKILL after it. Signals to idem meanwhile are
// passed on as they are, again and again, and never shorten the grace:
// whoever wants the processes dead at once sends SIGKILL.
func stopSignal(first, now time.Time, grace time.Duration) syscall.Signal {
	if now.Sub(first) >= grace {
		return syscall.SIGKILL
	}
	return syscall.SIGTERM
}

// scan says which processes stopRun stops.
type scan struct {
	// before: the runs of the key before it (procs.Run.Before: an
	// earlier invocation, or this one's earlier attempt) whose marker
	// carries the tag of secret (the ledger's, procs.Run.Signed).
	before procs.Run
	secret []byte
	// ab is the abandoned owner (nil: none): its idem, when it ran in
	// this PID namespace.
	ab *ledger.Owner
	// lock: the run lock file whose holders of the key's byte are
	// stopped too (procs.Finder.Holding: what is left of a run whose
	// description idem no longer holds a copy of); nil: none.
	lock *procs.LockFile
}

// stopRun stops, on this host, the processes s names and returns once
// none is left, with how many it found: each gets SIGTERM (and SIGCONT,
// so that a stopped one can act on it) when first seen and SIGKILL once
// it has had the kill grace (stopSignal); the scan is repeated until it
// finds nothing. inv, when the caller owns the key, keeps its lease
// meanwhile, and a signal to idem is kept in inv.signalled (the next
// attempt does not start) and ends the loop one kill grace later,
// whatever is still found: a process that keeps being respawned cannot
// keep idem from acting on the signal. Nothing is written to the ledger:
// a taker that dies here forgets nothing, the next scans again.
func (r *Runner) stopRun(ctx context.Context, s scan, grace time.Duration, inv *invocation) (int, error) {
	finder := r.Procs
	if finder == nil {
		finder = pidOnly{*r.host()}
	}
	idem, isIdem := r.abandonedIdem(finder, s.ab, s.before.Key)
	if r.Procs == nil && !isIdem {
		return 0, nil
	}
	seen := map[procs.Process]time.Time{}
	var renew <-chan time.Time
	if inv != nil {
		renew = r.Clock.After(renewEvery(inv.o.Lease))
	}
	var interrupted syscall.Signal
	var interruptedAt time.Time
	for empty := 0; ; {
		found, _ := finder.Find(s.before, s.secret)
		if isIdem && finder.Alive(idem) {
			found = append(found, idem)
		}
		if s.lock != nil {
			held, _ := finder.Holding(s.lock.Dev, s.lock.Ino, s.before.Key)
			found = append(found, held...)
		}
		if interrupted != 0 && r.Clock.Now().Sub(interruptedAt) >= grace {
			break
		}
		// A scan reads the process list first: a process forked meanwhile
		// by one that then exited is in neither. Only a second empty scan
		// says that none is left: a poll later once something was found
		// (what it forks as it dies has time to show), at once when
		// nothing ever was.
		if len(found) == 0 {
			if empty++; empty == 2 {
				break
			}
			if len(seen) == 0 {
				continue
			}
		} else {
			empty = 0
		}
		signalFound(finder, found, seen, r.Clock.Now(), grace)
		select {
		case <-r.Clock.After(groupPoll):
		case s := <-r.Signals:
			if interrupted == 0 {
				interrupted, interruptedAt = toSignal(s), r.Clock.Now()
			}
		case <-renew:
			next, err := inv.keepLease(ctx)
			if err != nil {
				return len(seen), asLeaseLost(err, inv.o.Key, false)
			}
			renew = r.Clock.After(next)
		}
	}
	if interrupted != 0 {
		if inv == nil {
			return len(seen), &InterruptedError{Key: s.before.Key, Signal: interrupted}
		}
		if inv.signalled == 0 {
			inv.signalled = interrupted
		}
	}
	return len(seen), nil
}

// abandonedIdem is the abandoned owner's idem (ab, nil: none), when it
// runs in this PID namespace or one below it, and, where there is a run
// lock (r.Procs), holds key's byte of it, as an owner of the key does
// from its first attempt on. The record names the process by pid and
// start time, which anyone who can write the ledger can set to any
// process's (the start time is in /proc/PID/stat for everyone to read):
// only the lock shows the process is the key's idem. An owner that holds
// no lock has started no command; it finds its lease lost at its claim.
func (r *Runner) abandonedIdem(finder procs.Finder, ab *ledger.Owner, key string) (procs.Process, bool) {
	if ab == nil {
		return procs.Process{}, false
	}
	h := r.host()
	if h.BootID == "" || ab.BootID != h.BootID {
		return procs.Process{}, false
	}
	p, ok := finder.Owner(h.PIDNS, ab.PIDNS, ab.PID, ab.StartTime)
	if !ok || r.Procs == nil {
		return p, ok // pid and start time are all this platform tells
	}
	// The run lock by its own name, as openLock takes it: a link there
	// (which openLock refuses) could lead to another ledger's lock, whose
	// holders are not this key's owners.
	var lk syscall.Stat_t
	if r.LockPath == "" || syscall.Lstat(r.LockPath, &lk) != nil || lk.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return p, false
	}
	holders, _ := r.Procs.Holding(uint64(lk.Dev), lk.Ino, key)
	for _, h := range holders {
		if h.PID == p.PID {
			return p, true
		}
	}
	return p, false
}

// signalFound gives each process a scan found the signal it is due
// (stopSignal, counted from when seen first saw it) and SIGCONT, so that a
// stopped one can act on it.
func signalFound(finder procs.Finder, found []procs.Process, seen map[procs.Process]time.Time, now time.Time, grace time.Duration) {
	for _, p := range found {
		p.Run = procs.Run{}
		first, ok := seen[p]
		if !ok {
			seen[p], first = now, now
		}
		finder.Signal(p, stopSignal(first, now, grace))
		finder.Signal(p, syscall.SIGCONT)
	}
}

// pidOnly is the Finder without Procs: it finds nothing by identity, and
// checks and signals a pid by its start time.
type pidOnly struct{ h Host }

func (pidOnly) Find(procs.Run, []byte) ([]procs.Process, error) { return nil, nil }
func (pidOnly) Runs(string, []byte) ([]procs.Process, error)    { return nil, nil }
func (f pidOnly) Alive(p procs.Process) bool {
	st, err := f.h.stat(p.PID)
	return err == nil && !st.gone() && st.start == p.Start
}
func (f pidOnly) Owner(here, pidns uint64, pid int, start uint64) (procs.Process, bool) {
	p := procs.Process{PID: pid, Start: start}
	return p, pidns == here && f.Alive(p)
}
func (pidOnly) Holding(uint64, uint64, string) ([]procs.Process, error)        { return nil, nil }
func (pidOnly) Reopen(string, uint64, uint64, string) (*procs.LockFile, error) { return nil, nil }
func (f pidOnly) Signal(p procs.Process, sig syscall.Signal) bool {
	return f.Alive(p) && syscall.Kill(p.PID, sig) == nil
}
