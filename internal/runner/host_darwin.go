package runner

import (
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// hostIdentity names this boot by kern.boottime, the time the kernel
// started (seconds and microseconds): it changes at every boot. macOS has
// no PID namespaces; 1 stands for the one namespace there is, so that an
// owner recorded on this host is checked by its pid.
func hostIdentity() (bootID string, pidns uint64) {
	tv, err := unix.SysctlTimeval("kern.boottime")
	if err != nil {
		return "", 0
	}
	return fmt.Sprintf("darwin-boottime:%d.%06d", tv.Sec, tv.Usec), 1
}

// szomb is p_stat's zombie state (SZOMB, sys/proc.h).
const szomb = 5

// nativeStat reads pid's kinfo_proc (sysctl kern.proc.pid.PID): its state,
// its process group and its start time, in microseconds since the epoch.
func nativeStat(pid int) (procStat, error) {
	kp, err := unix.SysctlKinfoProc("kern.proc.pid", pid)
	if err != nil || int(kp.Proc.P_pid) != pid {
		// No such pid gives an empty answer, which x/sys reports as EIO.
		if kerr := syscall.Kill(pid, 0); kerr == syscall.ESRCH {
			return procStat{}, fmt.Errorf("pid %d: %w", pid, os.ErrNotExist)
		}
		if err == nil {
			err = fmt.Errorf("kern.proc.pid.%d named pid %d", pid, kp.Proc.P_pid)
		}
		return procStat{}, err
	}
	st := procStat{state: 'R', pgrp: int(kp.Eproc.Pgid),
		start: uint64(kp.Proc.P_starttime.Sec)*1e6 + uint64(kp.Proc.P_starttime.Usec)}
	if kp.Proc.P_stat == szomb {
		st.state = 'Z'
	}
	return st, nil
}
