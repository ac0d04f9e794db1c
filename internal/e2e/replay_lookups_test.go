package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestHostReadOnlyToRun: a replay reads none of the host's identity,
// which only a run records (the boot id, the PID namespace, idem's own
// /proc stat), traced in the real binary with strace; the run before it
// reads each of them, so the trace would see them. The run reads its
// directory and its user's name before it takes the ledger's write lock
// (byte 120 of the -shm), never under it: a stat that a hung file system
// holds, or a directory service that does not answer, would hold up every
// other run of the ledger with it.
func TestHostReadOnlyToRun(t *testing.T) {
	strace := needStrace(t)
	idem := idemBin(t)
	dir := t.TempDir()
	db := filepath.Join(dir, "ledger.db")
	identity := regexp.MustCompile(`"(/proc/sys/kernel/random/boot_id|/proc/self/ns/pid|/proc/[0-9]+/stat)"`)
	where := regexp.MustCompile(`getcwd\(|newfstatat\(AT_FDCWD, "\."|"/etc/passwd"`)
	traced := func(name string) (ids, underLock, before []string) {
		t.Helper()
		trace := filepath.Join(dir, name+".trace")
		p := run(t, clean(nil, strace, "-f", "-qq", "-o", trace, "-e", "trace=%file,fcntl,getcwd",
			idem, "--ledger", db, "run", "--key", "job:lookups", "--", "echo", "ran"))
		if p.code != 0 || p.stdout != "ran\n" {
			t.Fatalf("%s: %v; want 0 and the command's output", name, p)
		}
		b, err := os.ReadFile(trace)
		if err != nil {
			t.Fatal(err)
		}
		locked := false
		for _, line := range strings.Split(string(b), "\n") {
			switch {
			case strings.Contains(line, "F_WRLCK") && strings.Contains(line, "l_start=120,"):
				locked = true
			case strings.Contains(line, "F_UNLCK") && strings.Contains(line, "l_start=120,"):
				locked = false
			}
			if m := identity.FindStringSubmatch(line); m != nil {
				ids = append(ids, m[1])
			}
			if m := where.FindString(line); m != "" {
				if locked {
					underLock = append(underLock, m)
				} else {
					before = append(before, m)
				}
			}
		}
		return ids, underLock, before
	}
	ids, underLock, before := traced("run")
	if len(ids) < 3 {
		t.Fatalf("the run read %q; want the boot id, the PID namespace and its stat", ids)
	}
	if len(underLock) != 0 || len(before) < 2 {
		t.Errorf("the run read its directory and user %q under the write lock and %q before it; want all before",
			underLock, before)
	}
	if ids, _, _ := traced("replay"); len(ids) != 0 {
		t.Errorf("the replay read %q; want none of them", ids)
	}
}
