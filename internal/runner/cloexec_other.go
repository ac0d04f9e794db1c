//go:build !linux

package runner

// keepInherited marks every descriptor above stderr close-on-exec, so that
// what idem inherited from its parent does not reach the command: its
// only descriptor beyond 0-2 is the run lock, fd 3, which it passes on
// itself.
func keepInherited() { cloexecEach("/dev/fd") }
