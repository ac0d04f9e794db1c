package e2e

// I/O faults injected with strace into idem's own system calls on its ledger
// files (SQLite in modernc issues pwrite64, pread64 and fsync; -P limits the
// injection to the ledger, its -wal and -shm, and its directory).
//
// strace counts a syscall's invocations per thread, and Go moves goroutines
// between threads, so "fail the Nth pwrite64" is not the same call from run
// to run: the stepped cases cover the calls statistically and classify each
// fault by what idem says it was doing. The deterministic cases aim at one
// phase each (every write fails; or fsync fails while another connection
// keeps the WAL, so the outcome commit is the first fsync).

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
)

// fault is one strace injection.
type fault struct {
	syscall string // pwrite64, fsync, pread64
	action  string // error=ENOSPC, error=EIO, signal=SIGKILL
	when    string // N, or N+ for every call from the Nth
	files   []string
}

func (f fault) String() string {
	return fmt.Sprintf("%s:%s:when=%s@%s", f.syscall, f.action, f.when, strings.Join(f.files, ","))
}

// ledgerFiles names what -P should match for the ledger at path; suffixes
// selects among "" (the file), "-wal", "-shm" and "/" (its directory).
func ledgerFiles(path string, suffixes ...string) []string {
	var out []string
	for _, s := range suffixes {
		if s == "/" {
			out = append(out, filepath.Dir(path))
		} else {
			out = append(out, path+s)
		}
	}
	return out
}

// injected runs idem under strace with fault f and returns how it ended and
// how many calls strace actually failed (or killed at).
func injected(t *testing.T, strace, idem string, f fault, args ...string) (*process, int) {
	t.Helper()
	trace := filepath.Join(t.TempDir(), "trace")
	wrap := []string{strace, "-f", "-qq", "-o", trace, "-e", "trace=" + f.syscall,
		"-e", fmt.Sprintf("inject=%s:%s:when=%s", f.syscall, f.action, f.when)}
	for _, p := range f.files {
		wrap = append(wrap, "-P", p)
	}
	c := clean(nil, idem, args...)
	c.wrap = wrap
	p := run(t, c)
	if strings.HasPrefix(f.action, "signal=") {
		// strace marks no line; it dies of the signal it injected.
		if p.signal != 0 {
			return p, 1
		}
		return p, 0
	}
	b, _ := os.ReadFile(trace)
	return p, strings.Count(string(b), "(INJECTED)")
}

var opRE = regexp.MustCompile(`^idem: error: (?:key "[^"]+": the command ended \([a-z_]+, exit \d+\) but its outcome could not be recorded: )?ledger \S+: ([a-z ]+): `)

// faultRun is one run of the fault experiment: a fresh copy of a real
// ledger, the command appends a line to marks on each execution.
type faultRun struct {
	dir, path, marks, key string
	// big makes the command print 300 KB, so that the outcome grows the
	// WAL past the size at which the end of a run checkpoints it.
	big bool
}

func newFaultRun(t *testing.T, base string) *faultRun {
	t.Helper()
	dir := t.TempDir()
	r := &faultRun{dir: dir, path: filepath.Join(dir, "ledger.db"), marks: filepath.Join(dir, "marks"), key: "job:fault"}
	b, err := os.ReadFile(base)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(r.path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *faultRun) args() []string {
	if r.big {
		return []string{"--ledger", r.path, "run", "--key", r.key, "--", "/bin/sh", "-c",
			`echo ran >> "$1"; head -c 300000 /dev/zero | tr '\0' x`, "sh", r.marks}
	}
	return append([]string{"--ledger", r.path, "run", "--key", r.key}, markCmd(r.marks)...)
}

// check verifies the invariants after a run that suffered a fault, then
// runs idem again (twice) without faults and checks that it converges. It
// returns the phase idem reported failing ("" when it did not fail) and
// whether the command had to run again (allowed: at-least-once).
func (r *faultRun) check(t *testing.T, s *stats, idem string, p *process) (phase string, rerun bool) {
	t.Helper()
	ran := lines(t, r.marks)
	switch {
	case p.signal == syscall.SIGKILL:
		phase = "killed"
	case p.signal != 0:
		s.violate(t, "idem died of %v\n%v", p.signal, p)
	case p.code == 0:
		phase = ""
	case p.code == 74:
		if line := errorLines(t, s, p); line != "" {
			if m := opRE.FindStringSubmatch(line); m != nil {
				phase = m[1]
			} else {
				phase = "other"
				t.Logf("unclassified error line: %s", line)
			}
		}
	default:
		s.violate(t, "exit %d, want 0 or 74\n%v", p.code, p)
	}
	if v := integrity(t, r.path); v != "ok" {
		s.violate(t, "integrity_check after the fault: %s", v)
		return phase, false
	}
	st, _ := keyState(t, r.path, r.key)
	switch phase {
	case "":
		if st != "succeeded" || ran != 1 {
			s.violate(t, "idem exited 0 but the key is %s and the command ran %d times\n%v", st, ran, p)
		}
	case "open", "reserve", "read", "initialise":
		if ran != 0 {
			s.violate(t, "the %s failed but the command ran %d times\n%v", phase, ran, p)
		}
		if st == "succeeded" || st == "failed" {
			s.violate(t, "the %s failed but the key is %s", phase, st)
		}
	case "record outcome":
		if ran != 1 {
			s.violate(t, "the outcome write failed after %d executions, want 1", ran)
		}
	}
	// An outcome that could not be recorded gives the key back, retryable.
	if st != "absent" && st != "in_progress" && st != "succeeded" && !(st == "retryable" && phase == "record outcome") {
		s.violate(t, "after the fault the key is %s, want absent, in_progress or succeeded (retryable after a failed outcome)", st)
	}
	if ran > 1 {
		s.violate(t, "one invocation ran the command %d times", ran)
	}

	// The next run re-reads the ledger: a recorded success is replayed, an
	// absent or abandoned key runs (again: at-least-once).
	f := run(t, clean(nil, idem, r.args()...))
	after := lines(t, r.marks)
	switch {
	case f.code != 0:
		s.violate(t, "the run after the fault (key was %s) exited %d\n%v", st, f.code, f)
	case st == "succeeded" && after != ran:
		s.violate(t, "the key's success was recorded, yet the next run executed the command (%d -> %d)", ran, after)
	case st == "succeeded" && !strings.HasPrefix(f.stderr, "idem: replayed "+r.key):
		s.violate(t, "the next run did not replay the recorded success: %v", f)
	case st != "succeeded" && after != ran+1:
		s.violate(t, "the key was %s; the next run executed %d times, want 1", st, after-ran)
	}
	if st2, _ := keyState(t, r.path, r.key); st2 != "succeeded" {
		s.violate(t, "after a clean run the key is %s", st2)
	}
	g := run(t, clean(nil, idem, r.args()...))
	if g.code != 0 || lines(t, r.marks) != after {
		s.violate(t, "a third run did not replay: %v", g)
	}
	if v := integrity(t, r.path); v != "ok" {
		s.violate(t, "integrity_check after recovery: %s", v)
	}
	return phase, ran == 1 && after == 2
}

// holdWAL keeps a connection open on the ledger while an idem run leaves
// frames in the WAL, so that the next idem neither deletes nor restarts the
// WAL: its first fsync of the WAL is then its outcome commit (reservations
// do not sync). With long, the warm-up run prints 300 KB, so that the WAL
// is past the size at which the next run checkpoints it (at SetChild,
// while its command runs).
func holdWAL(t *testing.T, idem, path string, long bool) func() {
	t.Helper()
	db := openDB(t, path)
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := conn.QueryRowContext(context.Background(), `SELECT count(*) FROM records`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	warm := []string{"--ledger", path, "run", "--key", "job:warm-wal", "--", "/bin/true"}
	var snapshot *sql.Tx
	if long {
		warm = []string{"--ledger", path, "run", "--key", "job:warm-wal", "--", "/bin/sh", "-c", "head -c 300000 /dev/zero | tr '\\0' x"}
		// An open read snapshot keeps the warm-up run from truncating it.
		if snapshot, err = conn.BeginTx(context.Background(), &sql.TxOptions{ReadOnly: true}); err != nil {
			t.Fatal(err)
		}
		if err := snapshot.QueryRow(`SELECT count(*) FROM records`).Scan(&n); err != nil {
			t.Fatal(err)
		}
	}
	if p := run(t, clean(nil, idem, warm...)); p.code != 0 {
		t.Fatalf("warm-up run: %v", p)
	}
	if snapshot != nil {
		snapshot.Rollback()
	}
	if fi, err := os.Stat(path + "-wal"); err != nil || fi.Size() == 0 || long && fi.Size() < 256<<10 {
		t.Fatalf("the WAL is too short after the warm-up run: %v, %v", fi, err)
	}
	return func() { conn.Close(); db.Close() }
}

// TestFaultInjection: I/O errors and kills at the ledger's system calls
// never make idem run a command whose reservation failed, report a success
// that is not recorded, or run again a command whose success was recorded;
// the ledger passes integrity_check after every fault.
func TestFaultInjection(t *testing.T) {
	quiet(t)
	if testing.Short() {
		t.Skip("runs idem under strace a few dozen times; skipped with -short")
	}
	strace := needStrace(t)
	s := newStats(t)
	idem := idemBin(t)
	base := filepath.Join(t.TempDir(), "base.db")
	newLedger(t, idem, base)

	t.Run("deterministic", func(t *testing.T) {
		cases := []struct {
			name    string
			f       func(path string) fault
			holdWAL bool
			longWAL bool   // the WAL is long before the run: it checkpoints at SetChild
			phase   string // what idem must report failing
			code    int
			big     bool
		}{
			{"reserve_disk_full", func(p string) fault {
				return fault{"pwrite64", "error=ENOSPC", "1+", ledgerFiles(p, "-wal")}
			}, false, false, "reserve", 74, false},
			{"reserve_write_eio", func(p string) fault {
				return fault{"pwrite64", "error=EIO", "1+", ledgerFiles(p, "-wal")}
			}, false, false, "reserve", 74, false},
			{"shm_disk_full", func(p string) fault {
				return fault{"pwrite64", "error=ENOSPC", "1+", ledgerFiles(p, "-shm")}
			}, false, false, "open", 74, false},
			{"outcome_fsync_eio", func(p string) fault {
				return fault{"fsync", "error=EIO", "1+", ledgerFiles(p, "-wal")}
			}, true, false, "record outcome", 74, false},
			{"outcome_fsync_killed", func(p string) fault {
				return fault{"fsync", "signal=SIGKILL", "1", ledgerFiles(p, "-wal")}
			}, true, false, "killed", 137, false},
			// The database file itself is written and synced only when the
			// end of a run checkpoints a large WAL: its failures come after
			// the outcome committed, and must not turn a success into an error.
			{"checkpoint_fsync_eio", func(p string) fault {
				return fault{"fsync", "error=EIO", "1+", ledgerFiles(p, "")}
			}, false, false, "", 0, true},
			{"checkpoint_disk_full", func(p string) fault {
				return fault{"pwrite64", "error=ENOSPC", "1+", ledgerFiles(p, "")}
			}, false, false, "", 0, true},
			// A run that finds the WAL long checkpoints it while its
			// command runs: a failed checkpoint must not stop the run.
			{"early_checkpoint_fsync_eio", func(p string) fault {
				return fault{"fsync", "error=EIO", "1+", ledgerFiles(p, "")}
			}, true, true, "", 0, false},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				r := newFaultRun(t, base)
				r.big = c.big
				release := func() {}
				if c.holdWAL {
					release = holdWAL(t, idem, r.path, c.longWAL)
				}
				p, n := injected(t, strace, idem, c.f(r.path), r.args()...)
				release()
				s.add(n, map[bool]int{true: 1}[p.signal != 0], 1)
				if n == 0 {
					t.Fatalf("strace injected nothing: %v", p)
				}
				if p.code != c.code {
					s.violate(t, "exit %d, want %d\n%v", p.code, c.code, p)
				}
				if phase, _ := r.check(t, s, idem, p); phase != c.phase {
					t.Errorf("the fault hit %q, want %q\n%v", phase, c.phase, p)
				}
			})
		}
	})

	t.Run("full_disk", func(t *testing.T) {
		// Every write to any ledger file fails: an existing ledger is left
		// byte for byte as it was, and a new one is not started.
		for _, fresh := range []bool{false, true} {
			r := newFaultRun(t, base)
			if fresh {
				os.Remove(r.path)
			}
			before := digest(t, r.path)
			p, n := injected(t, strace, idem, fault{"pwrite64", "error=ENOSPC", "1+", ledgerFiles(r.path, "", "-wal", "-shm")}, r.args()...)
			s.add(n, 0, 1)
			if p.code != 74 {
				s.violate(t, "full disk (new ledger: %v): exit %d, want 74\n%v", fresh, p.code, p)
			}
			errorLines(t, s, p)
			if ran := lines(t, r.marks); ran != 0 {
				s.violate(t, "full disk: the command ran %d times", ran)
			}
			if !fresh {
				if after := digest(t, r.path); after != before {
					s.violate(t, "full disk changed the ledger file")
				}
			}
			t.Logf("new=%v: %s", fresh, p.stderr)
		}
	})

	t.Run("stepped", func(t *testing.T) {
		type kind struct {
			syscall, action string
			max             int
			files           []string
			sticky          bool // every call from the Nth fails: a disk that stays full
			big             bool // a 300 KB output: the end of the run checkpoints the WAL
		}
		kinds := []kind{
			{"pwrite64", "error=ENOSPC", 24, []string{"", "-wal", "-shm"}, false, false},
			{"fsync", "error=EIO", 6, []string{"", "-wal", "/"}, false, false},
			{"pwrite64", "signal=SIGKILL", 24, []string{"", "-wal"}, false, false},
		}
		steps := map[string][]int{"pwrite64": {2, 9, 13, 17, 21}, "fsync": {1, 2, 3}}
		repeat := 1
		if longRun() {
			kinds = append(kinds,
				kind{"pwrite64", "error=EIO", 40, []string{"", "-wal", "-shm"}, false, false},
				kind{"pread64", "error=EIO", 40, []string{"", "-wal"}, false, false},
				kind{"fsync", "signal=SIGKILL", 8, []string{"", "-wal", "/"}, false, false},
				kind{"ftruncate", "error=EIO", 4, []string{"", "-wal", "-shm"}, false, false},
				kind{"pwrite64", "error=ENOSPC", 40, []string{"", "-wal", "-shm"}, true, false},
				kind{"fsync", "error=EIO", 8, []string{"", "-wal", "/"}, true, false},
				kind{"pwrite64", "error=ENOSPC", 24, []string{""}, false, true},
				kind{"fsync", "error=EIO", 4, []string{""}, false, true},
				kind{"pwrite64", "signal=SIGKILL", 24, []string{"", "-wal"}, false, true},
			)
			repeat = 3
		}
		hits := map[string]int{}
		reruns := 0
		for _, k := range kinds {
			ns := steps[k.syscall]
			if longRun() || ns == nil {
				ns = nil
				for n := 1; n <= k.max; n++ {
					ns = append(ns, n)
				}
			}
			for _, n := range ns {
				for range repeat {
					r := newFaultRun(t, base)
					r.big = k.big
					f := fault{k.syscall, k.action, fmt.Sprint(n), ledgerFiles(r.path, k.files...)}
					if k.sticky {
						f.when += "+"
					}
					p, got := injected(t, strace, idem, f, r.args()...)
					s.add(got, map[bool]int{true: 1}[p.signal != 0], 1)
					phase, rerun := r.check(t, s, idem, p)
					if got > 0 {
						hits[f.syscall+":"+f.action+map[bool]string{true: "+"}[k.sticky]+map[bool]string{true: "(big)"}[k.big]+" -> "+phase]++
					}
					if rerun {
						reruns++
					}
					if t.Failed() {
						t.Fatalf("stopping at %v\n%v", f, p)
					}
				}
			}
		}
		t.Logf("phases hit: %v; re-executions after an unrecorded outcome (at-least-once): %d", hits, reruns)
	})
}
