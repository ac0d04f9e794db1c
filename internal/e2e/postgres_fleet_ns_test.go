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
	"strings"
	"syscall"
	"testing"
	"time"
)

// pgStartOnNSHost starts idem ARGS... as host, in PID and mount namespaces
// of its own, with its own boot id and state directory.
func pgStartOnNSHost(t *testing.T, dsn, host, dir string, args ...string) *process {
	t.Helper()
	unshare := needTool(t, "unshare")
	if os.Geteuid() != 0 {
		t.Fatal("unshare --pid needs root")
	}
	state := filepath.Join(dir, "state-"+host)
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	c := inherit([]string{"IDEM_LEDGER=" + dsn, "NO_COLOR=1", "XDG_STATE_HOME=" + state, "HOME=" + state,
		"IDEM_TESTONLY_HOST=" + host, "IDEM_TESTONLY_BOOT_ID=boot-" + host},
		unshare, append([]string{"--pid", "--fork", "--mount", "--mount-proc", fleetIdem(t)}, args...)...)
	c.dir = dir
	return start(t, c)
}

// A frozen owner (its idem SIGSTOPped past its lease) on host A: host B,
// which cannot see A's processes, takes the key over once the lease has
// expired by the server's clock and runs it while A's command still runs:
// the overlap the documentation gives for a frozen owner. When A thaws, the
// fence rejects its stale write: A exits 75 (lost the lease) and the
// record keeps B's outcome and token.
func TestPostgresFleetFrozenOwnerOverlaps(t *testing.T) {
	dsn, db := pgDatabase(t)
	dir := t.TempDir()
	const key = "fleet:frozen:1"
	log := filepath.Join(dir, "log")
	// One command for both hosts (a key's command is fixed): each logs its
	// start and end, and runs until its host's release file appears.
	job := []string{"run", "--key", key, "--lease", "2s", "--", "sh", "-c",
		`h=$IDEM_TESTONLY_HOST; echo $h-start >> ` + log + `; while [ ! -e release-$h ]; do sleep 0.05; done; echo $h-end >> ` + log}
	a := pgStartOnNSHost(t, dsn, "host-a", dir, job...)
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
	b := pgStartOnNSHost(t, dsn, "host-b", dir, job...)
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
