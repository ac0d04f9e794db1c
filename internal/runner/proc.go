package runner

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/idemhq/idem/internal/ledger"
)

// Host is what identifies this machine and PID namespace, read from /proc.
// Without /proc the fields stay empty and only lease expiry frees a record.
type Host struct {
	Name   string
	BootID string
	PIDNS  uint64
	// Proc is the /proc mount to read; "/proc" unless a test says otherwise.
	Proc string
}

// LocalHost reads this host's identity.
func LocalHost() Host {
	h := Host{Proc: "/proc"}
	h.Name, _ = os.Hostname()
	if b, err := os.ReadFile("/proc/sys/kernel/random/boot_id"); err == nil {
		h.BootID = strings.TrimSpace(string(b))
	}
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/self/ns/pid", &st); err == nil {
		h.PIDNS = st.Ino
	}
	return h
}

// Self describes the calling process as a ledger owner.
func (h Host) Self() ledger.Owner {
	pid := os.Getpid()
	start, _, _ := h.procStat(pid)
	return ledger.Owner{Host: h.Name, BootID: h.BootID, PIDNS: h.PIDNS, PID: pid, StartTime: start}
}

// procStat returns the start time (field 22, clock ticks since boot) and
// state (field 3) of pid. The comm field may hold spaces and ')': parse
// from the last ')'.
func (h Host) procStat(pid int) (start uint64, state byte, err error) {
	b, err := os.ReadFile(h.Proc + "/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, errors.New("malformed stat")
	}
	fields := strings.Fields(string(b[i+1:]))
	// fields[0] is field 3 (state); field 22 is fields[19].
	if len(fields) < 20 || len(fields[0]) != 1 {
		return 0, 0, errors.New("malformed stat")
	}
	start, err = strconv.ParseUint(fields[19], 10, 64)
	return start, fields[0][0], err
}

// sameHost reports whether o ran on this machine and in this PID namespace,
// so its pid can be checked here.
func (h Host) sameHost(o ledger.Owner) bool {
	return h.BootID != "" && o.BootID == h.BootID && h.PIDNS != 0 && o.PIDNS == h.PIDNS
}

// OwnerDead reports whether o is known to be gone: it ran on this host and
// its pid no longer exists, is a zombie, or belongs to a later process.
// An owner on another host is never known dead (only its lease frees it).
func (h Host) OwnerDead(o ledger.Owner) bool {
	if !h.sameHost(o) || o.PID <= 0 {
		return false
	}
	start, state, err := h.procStat(o.PID)
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	return state == 'Z' || state == 'X' || start != o.StartTime
}

// groupAlive reports whether the abandoned child's process group may still
// hold processes that belong to it. A group whose leader pid lives on with
// another start time was reused by someone else: leave it alone.
func (h Host) groupAlive(o ledger.Owner) bool {
	if !h.sameHost(o) || o.ChildPGID <= 1 {
		return false
	}
	if start, _, err := h.procStat(o.ChildPGID); err == nil && o.ChildStart != 0 && start != o.ChildStart {
		return false
	}
	return syscall.Kill(-o.ChildPGID, 0) == nil
}
