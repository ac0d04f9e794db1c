package sqlite

import (
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// heldFile is the identity of the file this process holds open under
// path (as the kernel names it: path, or path " (deleted)" once deleted),
// read from its descriptors in /proc; ok is false when it holds none, and
// readable false when the descriptors could not be read.
func heldFile(path string) (id fileID, ok, readable bool) {
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return fileID{}, false, false
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return fileID{}, false, false
	}
	buf := make([]byte, len(path)+len(" (deleted)")+1)
	for _, name := range names {
		n, err := unix.Readlink("/proc/self/fd/"+name, buf)
		if err != nil || n == len(buf) {
			continue // gone, or a longer name than either
		}
		if got := string(buf[:n]); got != path && got != path+" (deleted)" {
			continue
		}
		fd, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		var st unix.Stat_t
		if unix.Fstat(fd, &st) == nil {
			return idOf(&st), true, true
		}
	}
	return fileID{}, false, true
}
