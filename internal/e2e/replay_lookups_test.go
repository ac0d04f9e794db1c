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
	reads := regexp.MustCompile(`getcwd\(|newfstatat\(AT_FDCWD, "\."|"/etc/passwd"`)
	// traced runs the key under strace and returns the identity files
	// read, the lines of the reads of the directory and the user, and the
	// lines where the write lock that the first identity read was made
	// under was taken and released (0: none).
	traced := func(name string) (ids []string, where []int, lock, unlock int) {
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
		locked := 0 // the line of the write lock held, 0: none
		for i, line := range strings.Split(string(b), "\n") {
			n := i + 1
			switch {
			case strings.Contains(line, "F_WRLCK") && strings.Contains(line, "l_start=120,"):
				locked = n
			case strings.Contains(line, "F_UNLCK") && strings.Contains(line, "l_start=120,"):
				if locked != 0 && locked == lock && unlock == 0 {
					unlock = n
				}
				locked = 0
			}
			if m := identity.FindStringSubmatch(line); m != nil {
				if len(ids) == 0 {
					lock = locked
				}
				ids = append(ids, m[1])
			}
			if reads.MatchString(line) {
				where = append(where, n)
			}
		}
		return ids, where, lock, unlock
	}
	ids, where, lock, unlock := traced("run")
	if len(ids) < 3 || lock == 0 || unlock == 0 {
		t.Fatalf("the run read %q (under the write lock of lines %d to %d); want the boot id, the PID namespace and its stat, under the lock",
			ids, lock, unlock)
	}
	before := 0
	for _, n := range where {
		if n > lock && n < unlock {
			t.Errorf("the run read its directory or user at line %d, under the write lock of lines %d to %d", n, lock, unlock)
		}
		if n < lock {
			before++
		}
	}
	if before < 2 {
		t.Errorf("the run read its directory and user at lines %v; want both before the write lock taken at line %d", where, lock)
	}
	if ids, _, _, _ := traced("replay"); len(ids) != 0 {
		t.Errorf("the replay read %q; want none of them", ids)
	}
}
