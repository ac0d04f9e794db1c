//go:build linux || freebsd

package runner

import "syscall"

// setParentDeath has the kernel SIGKILL the child when idem dies (Linux's
// PR_SET_PDEATHSIG, FreeBSD's PROC_PDEATHSIG_CTL): an idem killed before it
// recorded its child leaves no command running. Grandchildren are not
// covered; a takeover finds them (procs).
func setParentDeath(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
