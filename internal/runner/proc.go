package runner

import (
	"errors"
	"os"
	"os/user"
	"strconv"
	"syscall"

	"github.com/idemhq/idem/internal/ledger"
	"github.com/idemhq/idem/internal/runner/procs"
)

// Host is what identifies this machine and PID namespace: on Linux read
// from /proc, on macOS from sysctl (hostIdentity, nativeStat). Where
// neither can be read (FreeBSD) BootID stays empty and only lease expiry
// frees a record.
type Host struct {
	Name   string
	BootID string
	PIDNS  uint64
	// Proc is the /proc mount to read; when empty, this platform's own
	// source (nativeStat: /proc on Linux, sysctl on macOS). Tests point
	// it at a hand-made tree.
	Proc string
	// Cwd and User are where and as whom this idem runs its command (the
	// child inherits both), kept on the record so that a person can run
	// the command again by hand.
	Cwd, User string
}

// Identity reads this host's name, boot and PID namespace: only what the
// kernel answers, so that it can be read while the ledger is locked. The
// working directory (a stat, which a hung network file system holds) and
// the user's name (which a cgo build asks of the system's directory
// services) are not: either could hold up every run waiting for the lock.
func Identity() Host {
	var h Host
	h.Name, _ = os.Hostname()
	h.BootID, h.PIDNS = hostIdentity()
	return h
}

// UserName names the effective user, by its uid when the password
// database does not know it.
func UserName() string {
	if u, err := user.LookupId(strconv.Itoa(os.Geteuid())); err == nil {
		return u.Username
	}
	return strconv.Itoa(os.Geteuid())
}

// Self describes the calling process as a ledger owner.
func (h Host) Self() ledger.Owner {
	pid := os.Getpid()
	st, _ := h.stat(pid)
	return ledger.Owner{Host: h.Name, BootID: h.BootID, PIDNS: h.PIDNS, PID: pid, StartTime: st.start}
}

func (h Host) proc() string {
	if h.Proc == "" {
		return "/proc"
	}
	return h.Proc
}

// procStat is what idem reads from /proc/PID/stat.
type procStat struct {
	state byte   // field 3: R, S, D, Z, X, T...
	pgrp  int    // field 5
	start uint64 // field 22: clock ticks since boot
}

// gone reports whether the process has exited (a zombie waits only to be
// reaped; it runs nothing).
func (s procStat) gone() bool { return s.state == 'Z' || s.state == 'X' }

// stat reads pid's state, group and start time: from the tree at Proc
// when it is set, else from this platform's source. An error that
// wraps os.ErrNotExist says there is no such process.
func (h Host) stat(pid int) (procStat, error) {
	if h.Proc == "" {
		return nativeStat(pid)
	}
	return h.procfsStat(pid)
}

// procfsStat reads /proc/PID/stat under Proc.
func (h Host) procfsStat(pid int) (procStat, error) {
	b, err := os.ReadFile(h.proc() + "/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	st, err := procs.ParseStat(b)
	return procStat{state: st.State, pgrp: st.Pgrp, start: st.Start}, err
}

// sameHost reports whether o ran on this machine and in this PID namespace,
// so its pid can be checked here.
func (h Host) sameHost(o ledger.Owner) bool {
	return h.BootID != "" && o.BootID == h.BootID && h.PIDNS != 0 && o.PIDNS == h.PIDNS
}

// OwnerDead reports whether o is known to be gone: it ran on this host and
// its pid no longer exists, is a zombie, or belongs to a later process.
// An owner on another host (or in another PID namespace) is never known
// dead: only its lease frees it.
func (h Host) OwnerDead(o ledger.Owner) bool {
	if !h.sameHost(o) || o.PID <= 0 {
		return false
	}
	st, err := h.stat(o.PID)
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	return st.gone() || st.start != o.StartTime
}

// groupLive reports whether process group pgid has a member that has not
// exited. Zombies do not count: orphans are reparented to a PID 1 that may
// never reap them, and kill(-pgid, 0) succeeds as long as one is left.
func (h Host) groupLive(pgid int) bool {
	if pgid <= 1 || syscall.Kill(-pgid, 0) != nil {
		return false
	}
	dir, err := os.ReadDir(h.proc())
	if err != nil {
		return true // cannot tell zombies apart: trust kill
	}
	for _, e := range dir {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := h.stat(pid); err == nil && st.pgrp == pgid && !st.gone() {
			return true
		}
	}
	return false
}
