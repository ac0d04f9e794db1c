// Package companion checks the executable idem hands an invocation to
// (idem-net, beside idem) before it runs it: idem runs it with the
// invoking user's rights, arguments and environment (a DSN and its
// password among them), so it must be what was installed with idem, not
// a file another user put there or may change, and not idem itself.
package companion

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// ErrSelf is Check's error for a companion that is the executable self:
// idem installed under the companion's name (a link to it, or a copy that
// an exec ran as the companion), which would start itself for ever.
var ErrSelf = errors.New("it is this idem (a copy or a link of it)")

// Check returns nil when the file at path may be run as idem's companion
// by this process, whose executable is self: neither it nor any symbolic
// link on the way to it belongs to another user than root, this process's
// user or the owner of self, group or others may not write it, and it is
// not self. A file another user planted in a shared directory, or may
// rewrite, is refused; so is a missing one (fs.ErrNotExist), which must
// not be executed either: another user could put one there meanwhile.
func Check(path, self string) error {
	me, err := os.Stat(self)
	if err != nil {
		return err
	}
	trusted := func(fi fs.FileInfo) bool {
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return true // no owners to compare (not a Unix file system)
		}
		mine, _ := me.Sys().(*syscall.Stat_t)
		return st.Uid == 0 || int(st.Uid) == os.Geteuid() || mine != nil && st.Uid == mine.Uid
	}
	p := path
	var fi fs.FileInfo
	for hops := 0; ; hops++ {
		if fi, err = os.Lstat(p); err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			break
		}
		if !trusted(fi) {
			return fmt.Errorf("%s is a symbolic link another user made (uid %d)", p, owner(fi))
		}
		if hops == maxHops {
			return errors.New("too many symbolic links lead to it")
		}
		target, err := os.Readlink(p)
		if err != nil {
			return err
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(p), target)
		}
		p = target
	}
	switch {
	case os.SameFile(fi, me):
		return ErrSelf
	case !fi.Mode().IsRegular():
		return errors.New("it is not a regular file")
	case !trusted(fi):
		return fmt.Errorf("it belongs to another user (uid %d)", owner(fi))
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("group or others may write it (mode %04o)", fi.Mode().Perm())
	}
	return nil
}

// maxHops is how many symbolic links Check follows, as the kernel does.
const maxHops = 40

func owner(fi fs.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int64(st.Uid)
	}
	return -1
}
