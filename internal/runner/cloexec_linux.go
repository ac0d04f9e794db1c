package runner

import (
	"math"

	"golang.org/x/sys/unix"
)

// keepInherited marks every descriptor above stderr close-on-exec, so that
// what idem inherited from its parent does not reach the command: its
// only descriptor beyond 0-2 is the run lock, fd 3, which it passes on
// itself. One close_range(2) call; before Linux 5.11, one fcntl(2) per
// open descriptor.
func keepInherited() {
	if unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC) != nil {
		cloexecEach("/proc/self/fd")
	}
}
