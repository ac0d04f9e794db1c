//go:build !linux && !freebsd

package runner

import "syscall"

// setParentDeath does nothing where the kernel cannot signal a child when
// its parent dies (macOS): a child left behind by an idem that was killed
// runs on, holding the key's run lock, until a later run of the key finds
// and stops it as a takeover does.
func setParentDeath(*syscall.SysProcAttr) {}
