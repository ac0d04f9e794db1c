package runner

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/idemhq/idem/internal/flagval"
)

// The IDEM_RETRY_AFTER files live in a private directory of the user's
// under the temporary directory, named after the run that made them:
// "NS-PID-RANDOM", NS the PID namespace (Host.PIDNS: 0 where none is known).
// idem names the file but does not create it: creating a file costs a run
// more than the rest of its start (a directory entry and an inode, on
// every run), and only the commands that ask for a delay need one, which
// they create by writing it. A run removes its file when it ends; a run
// killed with SIGKILL cannot, so a run that finds its command wrote one
// first removes the files of runs in its PID namespace whose process is
// gone. (Files of other namespaces are left: their pids mean nothing
// here.)

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

// removeRetryAfter removes the run's IDEM_RETRY_AFTER file when it ends;
// when its command used one, also the files runs killed before they could
// remove theirs left (only commands that write one leave one). A
// directory made for this run alone goes with its file.
func (inv *invocation) removeRetryAfter() {
	if inv.retryDir == "" {
		if inv.retryAfter != "" {
			os.RemoveAll(filepath.Dir(inv.retryAfter))
		}
		return
	}
	if os.Remove(inv.retryAfter) == nil {
		inv.retryAsked = true
	}
	if inv.retryAsked {
		reclaimRetryAfter(inv.retryDir, inv.r.host().PIDNS)
	}
}

// retryAfterPath names this run's IDEM_RETRY_AFTER file, in the user's
// private directory (dir). Where that cannot be had (another user made
// $TMPDIR/idem-UID first), the file goes in a directory made for this run
// alone (dir ""): never a name in a directory others may write, where
// they could put a link or a FIFO in its place once the file is gone.
func retryAfterPath(ns uint64) (path, dir string, err error) {
	dir = retryAfterDir()
	if dir == "" {
		d, err := os.MkdirTemp("", "idem-retry-after-*")
		if err != nil {
			return "", "", err
		}
		return filepath.Join(d, "retry-after"), "", nil
	}
	return filepath.Join(dir, fmt.Sprintf("%d-%d-%x", ns, os.Getpid(), rand.Uint64())), dir, nil
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

// retryAfterMax bounds what idem reads from the IDEM_RETRY_AFTER file.
const retryAfterMax = 256

// nextDelay is the backoff after attempt n, or what the child asked for in
// IDEM_RETRY_AFTER, capped by --max-delay. Unreadable content is ignored
// with a warning.
func (inv *invocation) nextDelay() time.Duration {
	d := inv.o.Backoff.Delay(inv.n, inv.r.Rand)
	if inv.retryAfter == "" {
		return d
	}
	f, err := os.Open(inv.retryAfter)
	if err != nil {
		return d // the command asked for nothing
	}
	b, _ := io.ReadAll(io.LimitReader(f, retryAfterMax+1))
	f.Close()
	os.Remove(inv.retryAfter) // one request, one delay
	inv.retryAsked = true
	if len(b) == 0 {
		return d
	}
	asked, err := parseRetryAfter(string(b))
	if err != nil || len(b) > retryAfterMax {
		shown := string(b)
		if len(shown) > 40 {
			shown = shown[:40] + "..."
		}
		inv.res.Warnings = append(inv.res.Warnings, fmt.Sprintf(
			"attempt %d wrote %q to IDEM_RETRY_AFTER: not a duration (want e.g. 30s, 1m or a number of seconds); ignored", inv.n, shown))
		return d
	}
	return min(asked, inv.o.Backoff.Max)
}

// parseRetryAfter accepts a duration ("30s", "1m", "1d") or plain,
// possibly fractional, seconds ("30", "1.5").
func parseRetryAfter(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if plainSeconds(s) {
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || f >= math.MaxInt64/float64(time.Second) {
			return 0, fmt.Errorf("%q: out of range", s)
		}
		return time.Duration(f * float64(time.Second)), nil
	}
	return flagval.ParseDuration(s)
}

// plainSeconds reports whether s is digits with at most one '.'.
func plainSeconds(s string) bool {
	digits, dots := 0, 0
	for i := 0; i < len(s); i++ {
		switch {
		case '0' <= s[i] && s[i] <= '9':
			digits++
		case s[i] == '.':
			dots++
		default:
			return false
		}
	}
	return digits > 0 && dots <= 1
}
