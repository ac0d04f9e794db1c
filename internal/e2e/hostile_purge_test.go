package e2e

// A process of a run that keeps IDEM_RUN but closes fd 3 (no run lock
// tells it runs) outlives its record: purged, or expired by --ttl, the
// key would count as new, and a new key's run does not look for earlier
// runs' processes.

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// leftoverJob records in log whether the process its last run left is
// still alive ("overlap"), then leaves a new one that closes fd 3 and
// keeps its environment, and exits 0.
var leftoverJob = []string{"sh", "-c", `p=$(cat pid 2>/dev/null)
if [ -n "$p" ] && [ -d /proc/$p ] && ! grep -q '^State:.*Z' /proc/$p/status; then echo overlap >> log; fi
echo run >> log
(exec 3>&-; exec sleep 30) &
echo $! > pid
exit 0`}

func (g *hostileRig) killLeftover() {
	if b, err := os.ReadFile(filepath.Join(g.dir, "pid")); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// TestPurgeRefusesLiveLeftovers: purge refuses (75, nothing removed) a key
// whose run left a process, names it, and removes it with --force.
func TestPurgeRefusesLiveLeftovers(t *testing.T) {
	quiet(t)
	g := newHostileRig(t)
	t.Cleanup(g.killLeftover)
	run(t, g.idem(append([]string{"--key", "job:purged", "--"}, leftoverJob...)...)).expect(0)
	left := waitPID(t, filepath.Join(g.dir, "pid"), 0)
	purge := func(args ...string) command {
		c := inherit([]string{"IDEM_LEDGER=" + g.ledger}, idemBin(t), append([]string{"purge"}, args...)...)
		c.dir = g.dir
		return c
	}
	p := run(t, purge("job:purged")).expect(75)
	if !strings.Contains(p.stderr, "job:purged (pid "+strconv.Itoa(left)+")") || !strings.Contains(p.stderr, "idem: hint:") {
		t.Errorf("purge does not name the process:\n%s", p)
	}
	run(t, g.idem(append([]string{"--key", "job:purged", "--"}, leftoverJob...)...)).expect(0) // a replay
	if log := readFile(filepath.Join(g.dir, "log")); log != "run\n" {
		t.Fatalf("the key ran again after a refused purge:\n%s", log)
	}
	run(t, purge("--force", "job:purged")).expect(0)
}

// TestExpiredKeyStopsLeftovers: a key whose record expired (--ttl) is
// run again only once the processes its earlier run left are stopped.
func TestExpiredKeyStopsLeftovers(t *testing.T) {
	timed(t)
	g := newHostileRig(t)
	t.Cleanup(g.killLeftover)
	job := append([]string{"--ttl", "1s", "--kill-grace", "2s", "--key", "job:expired", "--"}, leftoverJob...)
	run(t, g.idem(job...)).expect(0)
	waitPID(t, filepath.Join(g.dir, "pid"), 0)
	time.Sleep(1100 * time.Millisecond) // the record's --ttl
	run(t, g.idem(job...)).expect(0)
	if log := readFile(filepath.Join(g.dir, "log")); log != "run\nrun\n" {
		t.Fatalf("the expired key ran beside its earlier run's process:\n%s", log)
	}
}
