//go:build linux && !idem_noprocs

package procs

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// New returns this platform's Finder: on Linux, a scan of /proc. It finds
// and signals only processes of idem's own effective uid and of the
// trusted uids (the ledger's owner): another user can put any
// environment on its processes, and must not make idem signal or wait on
// them.
func New(trusted ...int) Finder {
	return procFinder{root: "/proc", uids: append([]int{os.Geteuid()}, trusted...)}
}

type procFinder struct {
	root string
	uids []int // the uids whose processes it finds
}

// trusts reports whether a file or process of uid is idem's own or the
// ledger owner's.
func trusts(uids []int, uid uint32) bool {
	for _, u := range uids {
		if u >= 0 && uint32(u) == uid {
			return true
		}
	}
	return false
}

// owned reports whether /proc/PID (whose owner is the process's
// effective uid) is a trusted uid's.
func (f procFinder) owned(pid string) bool {
	var st syscall.Stat_t
	return syscall.Stat(f.root+"/"+pid, &st) == nil && trusts(f.uids, st.Uid)
}

var envPrefix = []byte(Env + "=")

// Find reads /proc/PID/environ of every process it may read (all of them
// as root; the caller's own otherwise) and keeps those whose Env names an
// earlier run of the key. A process's environ is what it was started with:
// a process that cleared its environment before exec'ing is not found by
// it (the run lock still tells it runs).
func (f procFinder) Find(before Run, secret []byte) ([]Process, error) {
	return f.scan(func(env []byte) (Run, bool) { return earlier(env, before, secret) })
}

// Runs is Find for every run of the ledger whose identity is ledgerID.
func (f procFinder) Runs(ledgerID string, secret []byte) ([]Process, error) {
	return f.scan(func(env []byte) (Run, bool) {
		return matching(env, func(r Run) bool { return r.Ledger == ledgerID && r.Signed(secret) })
	})
}

// scan returns the living processes of trusted uids, the caller
// excluded, for whose environ match returns a run.
func (f procFinder) scan(match func(environ []byte) (Run, bool)) ([]Process, error) {
	pids, err := f.others()
	if err != nil {
		return nil, err
	}
	var found []Process
	for _, pid := range pids {
		name := strconv.Itoa(pid)
		env, err := os.ReadFile(f.root + "/" + name + "/environ")
		if err != nil || !bytes.Contains(env, envPrefix) {
			continue
		}
		run, ok := match(env)
		if !ok || !f.owned(name) {
			continue
		}
		st, err := f.stat(pid)
		if err != nil || st.Gone() {
			continue
		}
		found = append(found, Process{PID: pid, Start: st.Start, Run: run})
	}
	return found, nil
}

// earlier returns the run in environ's Env that is Before before and
// carries secret's tag.
func earlier(environ []byte, before Run, secret []byte) (Run, bool) {
	return matching(environ, func(r Run) bool { return r.Before(before) && r.Signed(secret) })
}

// matching returns the first run in environ's Env that ok accepts.
func matching(environ []byte, ok func(Run) bool) (Run, bool) {
	for _, kv := range bytes.Split(environ, []byte{0}) {
		v, found := bytes.CutPrefix(kv, envPrefix)
		if !found {
			continue
		}
		for _, r := range runsIn(string(v)) {
			if ok(r) {
				return r, true
			}
		}
	}
	return Run{}, false
}

func (f procFinder) Owner(here, pidns uint64, pid int, start uint64) (Process, bool) {
	p := Process{PID: pid, Start: start}
	if pid <= 0 {
		return p, false
	}
	if pidns == 0 || pidns == here {
		return p, f.Alive(p)
	}
	// Another namespace: visible only when it is below this one. Look for
	// a process in it whose innermost pid (NSpid's last) is pid.
	d, err := os.Open(f.root)
	if err != nil {
		return p, false
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	for _, name := range names {
		host, err := strconv.Atoi(name)
		if err != nil || f.nsOf(name) != pidns {
			continue
		}
		if inner, ok := f.innerPID(name); ok && inner == pid {
			q := Process{PID: host, Start: start}
			return q, f.Alive(q)
		}
	}
	return p, false
}

// nsOf is the inode of /proc/PID/ns/pid, 0 if it cannot be read.
func (f procFinder) nsOf(pid string) uint64 {
	var st syscall.Stat_t
	if syscall.Stat(f.root+"/"+pid+"/ns/pid", &st) != nil {
		return 0
	}
	return st.Ino
}

// innerPID is the last pid of /proc/PID/status's NSpid line: the process's
// pid in its own namespace.
func (f procFinder) innerPID(pid string) (int, bool) {
	b, err := os.ReadFile(f.root + "/" + pid + "/status")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "NSpid:"); ok {
			fs := strings.Fields(rest)
			if len(fs) == 0 {
				return 0, false
			}
			n, err := strconv.Atoi(fs[len(fs)-1])
			return n, err == nil
		}
	}
	return 0, false
}

func (f procFinder) Alive(p Process) bool {
	st, err := f.stat(p.PID)
	return err == nil && !st.Gone() && (p.Start == 0 || st.Start == p.Start)
}

// Signal opens a pidfd first and checks the start time through it, so that
// a pid reused between the check and the signal is never signalled; a
// process of an untrusted uid is never signalled.
func (f procFinder) Signal(p Process, sig syscall.Signal) bool {
	if !f.owned(strconv.Itoa(p.PID)) {
		return false
	}
	fd, err := unix.PidfdOpen(p.PID, 0)
	if err != nil {
		if errors.Is(err, unix.ENOSYS) && f.Alive(p) {
			return syscall.Kill(p.PID, sig) == nil // kernels before 5.3
		}
		return false
	}
	defer unix.Close(fd)
	if !f.Alive(p) {
		return false
	}
	return unix.PidfdSendSignal(fd, sig, nil, 0) == nil
}

// stat reads /proc/PID/stat under the finder's root.
func (f procFinder) stat(pid int) (Stat, error) {
	b, err := os.ReadFile(f.root + "/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Stat{}, err
	}
	return ParseStat(b)
}

// Holding returns the processes, the caller excluded, that hold key's byte
// of the run lock file dev/ino through a description of their own: a
// run's processes after idem closed its copy of that description (ones
// that cleared their environment, which Find cannot see, included). It
// reads /proc/PID/fd and the lock lines of /proc/PID/fdinfo, which list
// the locks taken through that fd's description. The file is named by its
// identity, not its path: it may have been deleted since it was opened.
func (f procFinder) Holding(dev, ino uint64, key string) ([]Process, error) {
	off := strconv.FormatInt(keyOffset(key), 10)
	want := ":" + strconv.FormatUint(ino, 10)
	return f.living(func(name string) bool { return f.owned(name) && f.holds(name, dev, ino, want, off) })
}

// living returns the living processes, the caller excluded, that keep
// says to keep (by their /proc entry's name).
func (f procFinder) living(keep func(name string) bool) ([]Process, error) {
	pids, err := f.others()
	if err != nil {
		return nil, err
	}
	var found []Process
	for _, pid := range pids {
		if !keep(strconv.Itoa(pid)) {
			continue
		}
		if st, err := f.stat(pid); err == nil && !st.Gone() {
			found = append(found, Process{PID: pid, Start: st.Start})
		}
	}
	return found, nil
}

// others lists the pids under /proc, the caller's own excluded.
func (f procFinder) others() ([]int, error) {
	d, err := os.Open(f.root)
	if err != nil {
		return nil, err
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return nil, err
	}
	self := os.Getpid()
	pids := make([]int, 0, len(names))
	for _, name := range names {
		if pid, err := strconv.Atoi(name); err == nil && pid != self {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// fdOf returns the path under /proc of an fd of process pid on the file
// dev/ino.
func (f procFinder) fdOf(pid string, dev, ino uint64) (string, bool) {
	dir := f.root + "/" + pid + "/fd"
	fds, err := os.ReadDir(dir)
	if err != nil {
		return "", false
	}
	for _, fd := range fds {
		var st syscall.Stat_t
		if syscall.Stat(dir+"/"+fd.Name(), &st) == nil && st.Dev == dev && st.Ino == ino {
			return dir + "/" + fd.Name(), true
		}
	}
	return "", false
}

// Reopen opens the run lock file dev/ino through a process of a trusted
// uid that has it open, when its path no longer leads to it (deleted,
// moved, or another file put in its place): the file lives on while a
// run's processes hold it, and runs that lock on it still see their
// locks. The file must be the ledger's: carry its mark (a lock file
// moved, or opened through another mount of its directory, still does),
// or, where the file system keeps no mark, still be named path (or path
// "(deleted)") by the kernel. A copy of a ledger records the original's
// lock file, which carries the original's mark and name, not the copy's.
// Nil, nil: no such process (the file is gone).
func (f procFinder) Reopen(path string, dev, ino uint64, mark string) (*LockFile, error) {
	pids, err := f.others()
	if err != nil {
		return nil, err
	}
	names := lockNames(path)
	for _, pid := range pids {
		name := strconv.Itoa(pid)
		if !f.owned(name) {
			continue
		}
		fd, ok := f.fdOf(name, dev, ino)
		if !ok {
			continue
		}
		// The ledger's run lock, by its name: a process's file with the
		// recorded device and inode under another name is another
		// ledger's (a copy of this ledger records the original's) or
		// another file, and not to be locked on.
		if !hasMark(fd, mark) {
			if l, err := os.Readlink(fd); err != nil || !slices.Contains(names, strings.TrimSuffix(l, " (deleted)")) {
				continue
			}
		}
		file, err := os.OpenFile(fd, os.O_RDWR, 0)
		if err != nil {
			continue // gone meanwhile, or not ours to open
		}
		var st syscall.Stat_t
		if syscall.Fstat(int(file.Fd()), &st) != nil || st.Dev != dev || st.Ino != ino ||
			!trusts(f.uids, st.Uid) || st.Mode&syscall.S_IFMT != syscall.S_IFREG {
			file.Close() // the fd was reused for another file meanwhile
			continue
		}
		return &LockFile{path: path, f: file, Dev: st.Dev, Ino: st.Ino, Mtime: st.Mtim.Sec}, nil
	}
	return nil, nil
}

// lockNames are the names the kernel may give the run lock at path: path,
// and path with its directory's links resolved (the kernel names a file
// by its real path).
func lockNames(path string) []string {
	names := []string{path}
	if dir, err := filepath.EvalSymlinks(filepath.Dir(path)); err == nil {
		if real := filepath.Join(dir, filepath.Base(path)); real != path {
			names = append(names, real)
		}
	}
	return names
}

// holds reports whether process pid has an fd on the file dev/ino through
// which it holds the byte off (an OFD write lock: "lock: N: OFDLCK
// ADVISORY WRITE -1 MAJ:MIN:INO OFF OFF").
func (f procFinder) holds(pid string, dev, ino uint64, want, off string) bool {
	dir := f.root + "/" + pid + "/fd"
	fds, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, fd := range fds {
		var st syscall.Stat_t
		if syscall.Stat(dir+"/"+fd.Name(), &st) != nil || st.Dev != dev || st.Ino != ino {
			continue
		}
		info, err := os.ReadFile(f.root + "/" + pid + "/fdinfo/" + fd.Name())
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(info), "\n") {
			fs := strings.Fields(line)
			if len(fs) >= 8 && fs[0] == "lock:" && fs[2] == "OFDLCK" && strings.HasSuffix(fs[len(fs)-3], want) &&
				fs[len(fs)-2] == off && fs[len(fs)-1] == off {
				return true
			}
		}
	}
	return false
}

// LockFile is the run lock file as one invocation opened it: every
// attempt's description is opened through it (Lock), so that all are of
// this one file, whatever happens to its path meanwhile (a cleaner that
// deletes it, another file put in its place).
type LockFile struct {
	path string
	f    *os.File // never locked, never given to a child
	// Dev and Ino identify the file.
	Dev, Ino uint64
	// Mtime is its modification time when opened (Unix seconds).
	Mtime int64
}

// OpenLock opens the run lock file at path, creating it (mode 0600) when
// create; a missing file is then an error that wraps fs.ErrNotExist.
// The file is opened without following a symlink, and one owned by
// neither idem's effective uid nor a trusted uid (the ledger's owner),
// that is no regular file, or that has another name (a hard link), is
// refused (*ForeignLockError): another user
// must not hand idem's command a file of its choosing as fd 3, nor keep
// idem's keys busy with a lock of its own.
func OpenLock(path string, create bool, trusted ...int) (*LockFile, error) {
	flags := os.O_RDWR | syscall.O_NOFOLLOW
	if create {
		flags |= os.O_CREATE
	}
	f, err := os.OpenFile(path, flags, 0o600)
	if errors.Is(err, syscall.ELOOP) {
		return nil, &ForeignLockError{Path: path, UID: -1}
	}
	if err != nil {
		return nil, err
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, err
	}
	if !trusts(append([]int{os.Geteuid()}, trusted...), st.Uid) || st.Mode&syscall.S_IFMT != syscall.S_IFREG || st.Nlink > 1 {
		f.Close()
		return nil, &ForeignLockError{Path: path, UID: int(st.Uid), Links: uint64(st.Nlink)}
	}
	return &LockFile{path: path, f: f, Dev: st.Dev, Ino: st.Ino, Mtime: st.Mtim.Sec}, nil
}

// lockMarkAttr is the extended attribute that marks a run lock file as
// a ledger's (Mark).
const lockMarkAttr = "user.idem.ledger"

// Mark records in the file whose ledger it is (mark: the ledger file's
// identity), so that the file is known for the ledger's under any name.
// A file system without extended attributes keeps none: then only its
// name tells.
func (l *LockFile) Mark(mark string) {
	if mark != "" {
		unix.Fsetxattr(int(l.f.Fd()), lockMarkAttr, []byte(mark), 0)
	}
}

// hasMark reports whether the file at name (a /proc fd link, which
// getxattr follows to the open file) carries mark.
func hasMark(name, mark string) bool {
	if mark == "" {
		return false
	}
	buf := make([]byte, 64)
	n, err := unix.Getxattr(name, lockMarkAttr, buf)
	return err == nil && string(buf[:n]) == mark
}

// Touch sets the file's times to now, so that a cleaner that deletes old
// files (systemd-tmpfiles, find -mtime) leaves it alone.
func (l *LockFile) Touch() error { return unix.Futimes(int(l.f.Fd()), nil) }

// Close closes the file; the descriptions Lock returned are the caller's.
func (l *LockFile) Close() error { return l.f.Close() }

// Lock takes the key's run lock without waiting, on a new description of
// the file: an OFD lock on one byte chosen by the key, so that it
// conflicts with the lock of every other run of the key that uses this
// file, and is held for as long as any process keeps the returned file's
// description open (every process of the run inherits it). held reports
// that another description holds it; f is then nil. As every call opens a
// new description, the caller can tell, by locking again after closing
// its copy, whether a process it started still holds the old one.
func (l *LockFile) Lock(key string) (f *os.File, held bool, err error) {
	f, err = os.OpenFile("/proc/self/fd/"+strconv.Itoa(int(l.f.Fd())), os.O_RDWR, 0)
	if err != nil {
		return nil, false, err
	}
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: keyOffset(key), Len: 1}
	if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk); err != nil {
		f.Close()
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES) {
			return nil, true, nil
		}
		return nil, false, err
	}
	return f, false, nil
}

// Lock opens the lock file at path (OpenLock, creating it) and takes key's
// run lock on it (LockFile.Lock).
func Lock(path, key string, trusted ...int) (f *os.File, held bool, err error) {
	l, err := OpenLock(path, true, trusted...)
	if err != nil {
		return nil, false, err
	}
	defer l.Close()
	return l.Lock(key)
}
