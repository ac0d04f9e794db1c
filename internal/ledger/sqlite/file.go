package sqlite

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/idemhq/idem/internal/ledger"
	"github.com/idemhq/idem/internal/shquote"
)

// prepareFile creates a missing directory (0700, when mkdir says so; else
// it is an error) and a missing ledger file (0600) before SQLite opens it,
// so -wal and -shm copy that mode, and returns the file SQLite will open
// (a link's target) and whether it created it. Directories, devices,
// FIFOs and symbolic links that SQLite would follow to a missing file or
// to another user's file are refused.
func prepareFile(abs string, mkdir bool) (real string, created bool, err error) {
	dir := filepath.Dir(abs)
	if err := missingDir(abs); err != nil {
		if !mkdir {
			return "", false, err
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return "", false, &ledger.StoreError{Op: "create directory", Path: dir, Err: err, Hint: permHint(err)}
		}
		if err := os.Chmod(dir, 0o700); err != nil {
			return "", false, &ledger.StoreError{Op: "create directory", Path: dir, Err: err, Hint: permHint(err)}
		}
	}
	fi, err := os.Lstat(abs)
	real = abs
	if err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		if real, fi, err = followLink(abs); err != nil {
			return "", false, err
		}
	}
	switch {
	case err == nil && fi.IsDir():
		return "", false, &ledger.StoreError{Op: "open", Path: abs, Err: errors.New("is a directory"),
			Hint: "point --ledger or IDEM_LEDGER at a file, not a directory"}
	case err == nil && !fi.Mode().IsRegular():
		return "", false, &ledger.StoreError{Op: "open", Path: abs, Err: fmt.Errorf("is %s, not a regular file", fileKind(fi.Mode())),
			Hint: "point --ledger or IDEM_LEDGER at a regular file"}
	case err == nil:
		// SQLite would open a file it may not write read-only, and leave
		// -wal and -shm behind: refuse it first.
		if err := unix.Faccessat(unix.AT_FDCWD, real, unix.R_OK|unix.W_OK, unix.AT_EACCESS); err != nil {
			return "", false, &ledger.StoreError{Op: "open", Path: abs, Err: fmt.Errorf("cannot read and write it: %w", err),
				Hint: "check the permissions of the ledger file and its directory"}
		}
		return real, false, nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", false, &ledger.StoreError{Op: "open", Path: abs, Err: err, Hint: permHint(err)}
	}
	f, err := os.OpenFile(abs, os.O_RDWR|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return abs, false, nil // another process created it first
	}
	if err != nil {
		return "", false, &ledger.StoreError{Op: "create", Path: abs, Err: err, Hint: permHint(err)}
	}
	err = f.Chmod(0o600) // whatever the umask
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", false, &ledger.StoreError{Op: "create", Path: abs, Err: err}
	}
	return abs, true, nil
}

// missingDir is the error for a ledger path whose directory does not
// exist, or nil: a named path there is a typo, since only a run creates a
// ledger, and a run refuses to create that directory.
func missingDir(abs string) error {
	dir := filepath.Dir(abs)
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if fi, err := os.Lstat(dir); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		// mkdir would fail: the name is taken, by the link.
		return &ledger.StoreError{Op: "open", Path: abs, Err: fmt.Errorf("directory %s is a symbolic link to a missing directory", dir),
			Hint: "check the path in --ledger or IDEM_LEDGER, and where the link points"}
	}
	return &ledger.StoreError{Op: "open", Path: abs, Err: fmt.Errorf("directory %s does not exist", dir),
		Hint: "check the path in --ledger or IDEM_LEDGER; to start a ledger there, create the directory first (mkdir -p -m 700 " + shquote.Word(dir) + ")"}
}

// checkFile is prepareFile for a read-only open: it creates nothing, and
// the file needs only read permission. A missing or empty file is no
// ledger (ledger.ErrNoLedger).
func checkFile(abs string) (real string, err error) {
	fi, err := os.Lstat(abs)
	real = abs
	if err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		real, fi, err = followLink(abs)
		var se *ledger.StoreError
		if errors.As(err, &se) && errors.Is(se.Err, errMissingTarget) {
			return "", noLedger(abs)
		}
		if err != nil {
			return "", err
		}
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", noLedger(abs)
	case err != nil:
		return "", &ledger.StoreError{Op: "open", Path: abs, Err: err, Hint: permHint(err)}
	case fi.IsDir():
		return "", &ledger.StoreError{Op: "open", Path: abs, Err: errors.New("is a directory"),
			Hint: "point --ledger or IDEM_LEDGER at a file, not a directory"}
	case !fi.Mode().IsRegular():
		return "", &ledger.StoreError{Op: "open", Path: abs, Err: fmt.Errorf("is %s, not a regular file", fileKind(fi.Mode())),
			Hint: "point --ledger or IDEM_LEDGER at a regular file"}
	case fi.Size() == 0:
		return "", noLedger(abs)
	}
	if err := unix.Faccessat(unix.AT_FDCWD, real, unix.R_OK, unix.AT_EACCESS); err != nil {
		return "", &ledger.StoreError{Op: "open", Path: abs, Err: fmt.Errorf("cannot read it: %w", err),
			Hint: "check the permissions of the ledger file and its directory"}
	}
	return real, nil
}

func noLedger(path string) error {
	return ledger.PlanError(ledger.ErrNoLedger, path, noLedgerHint, "")
}

const noLedgerHint = "check the path in --ledger or IDEM_LEDGER: idem run creates the ledger on its first run"

// errMissingTarget is followLink's reason for a dangling link.
var errMissingTarget = errors.New("is a symbolic link to a missing file")

// followLink resolves a ledger path that is a symbolic link. SQLite follows
// it and puts -wal and -shm beside the target, so the link must be the
// caller's (or root's), the target must exist (a dangling link would have
// SQLite create it with the umask's mode, readable by others) and be the
// caller's own (another user's file would decide what idem runs and
// replays, and idem would write into it).
func followLink(abs string) (string, fs.FileInfo, error) {
	// A link that another user made (in a directory others may write,
	// such as /tmp) chooses which of the caller's files becomes the
	// ledger: refused, as the kernel's protected_symlinks would refuse to
	// follow it (many hosts do not set it).
	if li, err := os.Lstat(abs); err == nil {
		if uid, ok := owner(li); ok && uid != os.Geteuid() && uid != 0 {
			return "", nil, &ledger.StoreError{Op: "open", Path: abs,
				Err:  fmt.Errorf("is a symbolic link another user made (uid %d)", uid),
				Hint: "point --ledger or IDEM_LEDGER at a ledger of your own, not through another user's link"}
		}
	}
	real, err := filepath.EvalSymlinks(abs)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil, &ledger.StoreError{Op: "open", Path: abs, Err: errMissingTarget,
			Hint: "point --ledger or IDEM_LEDGER at the link's target: idem creates it, private"}
	}
	if err != nil {
		return "", nil, &ledger.StoreError{Op: "open", Path: abs, Err: err}
	}
	fi, err := os.Stat(real)
	if err != nil {
		return "", nil, &ledger.StoreError{Op: "open", Path: abs, Err: err, Hint: permHint(err)}
	}
	if uid, ok := owner(fi); ok && uid != os.Geteuid() {
		return "", nil, &ledger.StoreError{Op: "open", Path: abs,
			Err:  fmt.Errorf("is a symbolic link to a file owned by another user (uid %d): %s", uid, real),
			Hint: "point --ledger or IDEM_LEDGER at a ledger of your own"}
	}
	return real, fi, nil
}

// tighten takes group and other permissions off the ledger and its -wal
// and -shm when they are the caller's: the ledger holds command output.
// Other users' files are left as they are. Only modes change: no file is
// opened (closing a descriptor would drop SQLite's locks). It says what
// it changed of the files that were there before the open (f): a -wal or
// -shm made since takes the main file's mode, which the user never chose.
func tighten(path string, f files) ([]string, error) {
	var done []string
	for _, c := range []struct {
		p    string
		told bool // there before the open
	}{{path, true}, {path + "-wal", f.wal.exists}, {path + "-shm", f.shm.exists}} {
		p := c.p
		fi, err := os.Lstat(p)
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o077 == 0 {
			continue
		}
		if uid, ok := owner(fi); !ok || uid != os.Geteuid() {
			continue
		}
		mode := fi.Mode().Perm() & 0o700
		if err := os.Chmod(p, mode); err != nil {
			return done, &ledger.StoreError{Op: "tighten permissions", Path: p, Err: err}
		}
		if c.told {
			done = append(done, fmt.Sprintf("%s was mode %#o, now %#o", p, fi.Mode().Perm(), mode))
		}
	}
	return done, nil
}

func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return "a special file"
}

func owner(fi fs.FileInfo) (int, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}

func permHint(err error) string {
	if errors.Is(err, fs.ErrPermission) {
		return "check the permissions of the ledger's directory and file"
	}
	return ""
}
