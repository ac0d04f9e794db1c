//go:build linux && !idem_nosplice

package runner

import (
	"io"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// spliceOut moves what remains in the pipe r to w with splice(2), until the
// pipe's end. It handles only a w that is a regular file or a character
// device (/dev/null) that splice accepts; otherwise, or when the first
// splice is refused (EINVAL: a terminal, a file opened O_APPEND), handled
// is false and nothing was moved. An error once data moved is w's (a full
// disk) or the pipe's.
func spliceOut(r io.Reader, w io.Writer) (n int64, handled bool, err error) {
	src, ok := r.(syscall.Conn)
	f, isFile := w.(*os.File)
	if !ok || !isFile {
		return 0, false, nil
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() && fi.Mode()&os.ModeCharDevice == 0 {
		return 0, false, nil
	}
	rc, err := src.SyscallConn()
	if err != nil {
		return 0, false, nil
	}
	wc, err := f.SyscallConn()
	if err != nil {
		return 0, false, nil
	}
	var serr error
	for {
		var m int64
		rerr := rc.Read(func(in uintptr) bool {
			werr := wc.Write(func(out uintptr) bool {
				m, serr = unix.Splice(int(in), nil, int(out), nil, pipeSize, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
				return true
			})
			if werr != nil {
				m, serr = 0, werr
			}
			return serr != unix.EAGAIN // EAGAIN: the pipe is empty; wait for the child
		})
		switch {
		case rerr != nil:
			return n, true, rerr
		case serr == unix.EINTR:
			continue
		case serr == unix.EINVAL && n == 0:
			return 0, false, nil
		case serr != nil:
			return n, true, serr
		case m == 0:
			return n, true, nil
		}
		n += m
	}
}

// growPipe enlarges the pipe r reads from, when r is one; a refusal (the
// user's pipe buffer quota) leaves it as it was.
func growPipe(r io.Reader) {
	sc, ok := r.(syscall.Conn)
	if !ok {
		return
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return
	}
	rc.Control(func(fd uintptr) {
		unix.FcntlInt(fd, unix.F_SETPIPE_SZ, pipeSize)
	})
}
