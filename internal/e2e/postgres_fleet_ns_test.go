package e2e

// Hosts of a fleet as separate PID and mount namespaces (unshare -fpm
// --mount-proc) with their own boot id and state directory: one host sees
// none of another's processes, as on real machines. Hosts that share this
// machine's /proc (IDEM_TESTONLY_HOST alone) find and stop each other's
// commands, which hides the overlap a frozen owner causes.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// nsHost is a simulated host of a fleet: PID and mount namespaces of its
// own, whose init (nsinit) reaps what ends there as a host's init does,
// its own boot id (IDEM_TESTONLY_BOOT_ID) and its own state directory (run
// locks). Every process started on it enters its namespaces, so that it
// sees this host's processes, /proc and run locks, and none of another
// host's; two runs on one nsHost are on the same host, and judge each
// other's pids.
type nsHost struct {
	name  string
	dir   string // the processes' working directory
	state string // XDG_STATE_HOME and HOME
	init  int    // the namespaces' init, by its pid in the test's namespace
	ns    string // its PID namespace, as /proc/PID/ns/pid reads
}

// newNSHost starts host name, its state directory under dir.
func newNSHost(t *testing.T, dir, name string) *nsHost {
	t.Helper()
	unshare := needTool(t, "unshare")
	needTool(t, "nsenter")
	if os.Geteuid() != 0 {
		t.Fatal("unshare --pid needs root")
	}
	h := &nsHost{name: name, dir: dir, state: filepath.Join(dir, "state-"+name)}
	if err := os.MkdirAll(h.state, 0o700); err != nil {
		t.Fatal(err)
	}
	u := start(t, inherit(nil, unshare, "--pid", "--fork", "--mount", "--mount-proc", "nsinit"))
	h.init = nsChild(t, u)
	// Killing the init ends every process of the host.
	t.Cleanup(func() { syscall.Kill(h.init, syscall.SIGKILL) })
	for range 400 {
		// The init is in the new namespace once unshare has exec'd it.
		if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", h.init)); err == nil && ns != mustReadlink(t, "/proc/self/ns/pid") {
			if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", h.init)); strings.TrimSpace(string(comm)) == "nsinit" {
				h.ns = ns
				return h
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("host %s: nsinit never started in a PID namespace of its own", name)
	return nil
}

func mustReadlink(t *testing.T, path string) string {
	t.Helper()
	l, err := os.Readlink(path)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// command is bin ARGS... run on the host with the ledger at dsn (extra:
// more NAME=VALUE). The process the test starts is nsenter, whose child
// (nsChild) is bin.
func (h *nsHost) command(t *testing.T, bin, dsn string, extra []string, args ...string) command {
	t.Helper()
	env := append([]string{"IDEM_LEDGER=" + dsn, "NO_COLOR=1", "XDG_STATE_HOME=" + h.state, "HOME=" + h.state,
		"IDEM_TESTONLY_HOST=" + h.name, "IDEM_TESTONLY_BOOT_ID=boot-" + h.name}, extra...)
	c := inherit(env, needTool(t, "nsenter"),
		append([]string{"--target", strconv.Itoa(h.init), "--pid", "--mount", "--wd=" + h.dir, "--", bin}, args...)...)
	c.dir, c.timeout = h.dir, 2*time.Minute
	return c
}

// start starts fleetIdem's idem ARGS... on the host.
func (h *nsHost) start(t *testing.T, dsn string, extra []string, args ...string) *process {
	t.Helper()
	return start(t, h.command(t, fleetIdem(t), dsn, extra, args...))
}

// pid is the pid in the test's namespace of the host's process nsPid (as
// it sees itself, say in a file it wrote), or 0 when there is none.
func (h *nsHost) pid(nsPid int) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ns, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", p)); ns != h.ns {
			continue
		}
		status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", p))
		for _, l := range strings.Split(string(status), "\n") {
			if f := strings.Fields(l); len(f) > 1 && f[0] == "NSpid:" && f[len(f)-1] == strconv.Itoa(nsPid) {
				return p
			}
		}
	}
	return 0
}

// A frozen owner (its idem SIGSTOPped past its lease) on host A: host B,
// which cannot see A's processes, takes the key over once the lease has
// expired by the server's clock and runs it while A's command still runs:
// the overlap the documentation gives for a frozen owner. When A thaws, the
// fence rejects its stale write: A exits 75 (lost the lease) and the
// record keeps B's outcome and token.
func TestPostgresFleetFrozenOwnerOverlaps(t *testing.T) {
	timed(t)
	dsn, db := pgDatabase(t)
	dir := t.TempDir()
	const key = "fleet:frozen:1"
	log := filepath.Join(dir, "log")
	// One command for both hosts (a key's command is fixed): each logs its
	// start and end, and runs until its host's release file appears.
	job := []string{"run", "--key", key, "--lease", "2s", "--", "sh", "-c",
		`h=$IDEM_TESTONLY_HOST; echo $h-start >> ` + log + `; while [ ! -e release-$h ]; do sleep 0.05; done; echo $h-end >> ` + log}
	hostA, hostB := newNSHost(t, dir, "host-a"), newNSHost(t, dir, "host-b")
	a := hostA.start(t, dsn, nil, job...)
	for range 1200 {
		if strings.Contains(readFile(log), "host-a-start") {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	idem := nsChild(t, a)
	syscall.Kill(idem, syscall.SIGSTOP)
	thawed := false
	thaw := func() {
		if !thawed {
			syscall.Kill(idem, syscall.SIGCONT)
			// nsenter stopped itself when its child did (as a shell's
			// job would be): it goes on waiting for idem once continued.
			a.send(syscall.SIGCONT)
			thawed = true
		}
	}
	t.Cleanup(thaw)
	for range 400 {
		if !pgLeaseLive(t, db, key) {
			break
		}
		time.Sleep(25 * time.Millisecond)
	}
	if pgLeaseLive(t, db, key) {
		t.Fatal("host-a's lease never expired")
	}
	os.WriteFile(filepath.Join(dir, "release-host-b"), nil, 0o600)
	b := hostB.start(t, dsn, nil, job...)
	b.wait()
	if b.code != 0 {
		t.Fatalf("host-b after host-a's lease expired: %v", b)
	}
	if got := strings.Join(strings.Fields(readFile(log)), " "); got != "host-a-start host-b-start host-b-end" {
		t.Fatalf("log %q: want host-b's run while host-a's command still runs", got)
	}
	// host-b could not see host-a's command, so it did not stop it.
	// (Any of idem's threads may have started it.)
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", idem))
	var children string
	for _, task := range tasks {
		children += readFile(task)
	}
	if f := strings.Fields(children); len(f) == 0 || syscall.Kill(atoi(f[0]), 0) != nil {
		t.Fatalf("host-a's command is gone after host-b's run (children of host-a's idem: %q): host-b must not see it", children)
	}
	var bToken int64
	if err := db.QueryRow(context.Background(), `SELECT token FROM idem.records WHERE key = $1 AND status = 'succeeded'`, key).Scan(&bToken); err != nil {
		t.Fatalf("host-b's outcome: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "release-host-a"), nil, 0o600)
	thaw()
	a.wait()
	if a.code != 75 || !strings.Contains(a.stderr, "lost the lease") {
		t.Fatalf("host-a thawed after its lease: %v; want exit 75, lost the lease", a)
	}
	var status string
	var token int64
	if err := db.QueryRow(context.Background(), `SELECT status, token FROM idem.records WHERE key = $1`, key).Scan(&status, &token); err != nil {
		t.Fatal(err)
	}
	if status != "succeeded" || token != bToken {
		t.Fatalf("record %s (token %d) after host-a's stale write, want host-b's: succeeded (token %d)", status, token, bToken)
	}
}
