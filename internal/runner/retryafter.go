package runner

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// The IDEM_RETRY_AFTER files live in a private directory of the user's
// under the temporary directory, named after the run that made them:
// "NS-PID-RANDOM", NS the PID namespace's inode (0 where there is none).
// A run removes its file when it ends; a run killed with SIGKILL cannot,
// so every run first removes the files of runs in its PID namespace whose
// process is gone. (Files of other namespaces are left: their pids mean
// nothing here.)

// retryAfterDir is the directory of the files, "" when it cannot be used.
func retryAfterDir() string {
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("idem-%d", os.Geteuid()))
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return ""
	}
	// It must be ours and private: another user may have made it first.
	fi, err := os.Lstat(dir)
	if err != nil || !fi.IsDir() || fi.Mode().Perm()&0o077 != 0 {
		return ""
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Geteuid() {
		return ""
	}
	return dir
}

func pidNamespace() uint64 {
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/self/ns/pid", &st); err != nil {
		return 0
	}
	return st.Ino
}

// newRetryAfterFile creates this run's IDEM_RETRY_AFTER file, after
// removing those that killed runs left behind.
func newRetryAfterFile() (string, error) {
	dir := retryAfterDir()
	if dir == "" {
		f, err := os.CreateTemp("", "idem-retry-after-*") // no private directory: the old way
		if err != nil {
			return "", err
		}
		return f.Name(), f.Close()
	}
	ns := pidNamespace()
	reclaimRetryAfter(dir, ns)
	f, err := os.CreateTemp(dir, fmt.Sprintf("%d-%d-*", ns, os.Getpid()))
	if err != nil {
		return "", err
	}
	return f.Name(), f.Close()
}

// reclaimRetryAfter removes the files in dir of runs in PID namespace ns
// whose process no longer exists.
func reclaimRetryAfter(dir string, ns uint64) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	self := os.Getpid()
	for _, e := range ents {
		parts := strings.SplitN(e.Name(), "-", 3)
		if len(parts) != 3 || parts[0] != strconv.FormatUint(ns, 10) {
			continue
		}
		pid, err := strconv.Atoi(parts[1])
		if err != nil || pid <= 0 || pid == self {
			continue
		}
		if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}
