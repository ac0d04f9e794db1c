package runner

import (
	"os"
	"strings"
	"syscall"
)

// hostIdentity reads the boot id and the inode of this process's PID
// namespace from /proc; either stays empty when it cannot be read.
func hostIdentity() (bootID string, pidns uint64) {
	if b, err := os.ReadFile("/proc/sys/kernel/random/boot_id"); err == nil {
		bootID = strings.TrimSpace(string(b))
	}
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/self/ns/pid", &st); err == nil {
		pidns = st.Ino
	}
	return bootID, pidns
}

// nativeStat reads /proc/PID/stat; its start time is in clock ticks
// since boot.
func nativeStat(pid int) (procStat, error) {
	return Host{Proc: "/proc"}.procfsStat(pid)
}
