package runner

import (
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// cloexecEach marks close-on-exec each descriptor above stderr that dir
// (/proc/self/fd, /dev/fd) lists.
func cloexecEach(dir string) {
	names, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range names {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			unix.CloseOnExec(fd)
		}
	}
}
