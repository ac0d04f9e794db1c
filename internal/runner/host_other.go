//go:build !linux && !darwin

package runner

import "errors"

// hostIdentity knows no boot identity here (FreeBSD: x/sys has no
// kinfo_proc to read a start time with), so no owner is ever judged dead
// by its pid: only its lease frees a key.
func hostIdentity() (bootID string, pidns uint64) { return "", 0 }

// nativeStat cannot read a process here.
func nativeStat(pid int) (procStat, error) {
	return procStat{}, errors.New("cannot read another process here")
}
