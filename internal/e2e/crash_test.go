package e2e

// Crash points: idem built with -tags testhooks SIGKILLs itself where
// IDEM_TESTONLY_CRASH says (internal/probe/crash.go). After each
// crash the ledger must pass integrity_check and hold the key absent,
// recoverably in progress, or recorded; the runs that follow must never
// execute a command whose success was recorded, and must converge.

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// buildHooked builds idem with its crash points compiled in; with -short
// it skips the test instead (a build, then dozens of crashed runs).
func buildHooked(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds idem with -tags testhooks and crashes it at every point; skipped with -short")
	}
	return fleetIdem(t) // the test process's one testhooks build
}

// crashCase is one command and the flags it runs with.
type crashCase struct {
	name  string
	flags []string
	// argv builds the command from the marks file (one line per execution).
	argv func(marks string) []string
	// code and status are the key's settled exit code and status.
	code   int
	status string
}

var crashCases = []crashCase{
	{"success", nil, markCmd, 0, "succeeded"},
	// First execution exits 75 (transient), the second succeeds.
	{"transient_then_success", []string{"--initial-delay", "10ms", "--jitter", "0"}, func(m string) []string {
		return []string{"/bin/sh", "-c", `echo ran >> "$1"; [ "$(wc -l < "$1")" -ge 2 ] || exit 75`, "sh", m}
	}, 0, "succeeded"},
	{"permanent_failure", nil, func(m string) []string {
		return []string{"/bin/sh", "-c", `echo ran >> "$1"; exit 3`, "sh", m}
	}, 3, "failed"},
	{"stdout_final", []string{"--stdout", "final"}, markCmd, 0, "succeeded"},
}

// crashPoint is where idem dies, and what the ledger may hold then.
type crashPoint struct {
	point string   // IDEM_TESTONLY_CRASH value
	want  []string // allowed key states right after the crash
	ran   []int    // allowed executions so far
}

func crashPoints(c crashCase) []crashPoint {
	last := []int{1} // executions once the deciding attempt ended
	if c.name == "transient_then_success" {
		last = []int{2}
	}
	pts := []crashPoint{
		{"before-reserve", []string{"absent"}, []int{0}},
		{"after-reserve", []string{"in_progress"}, []int{0}},
		{"after-claim", []string{"in_progress"}, []int{0}},
		{"after-child-start", []string{"in_progress"}, []int{0, 1}},
		{"after-child-exit", []string{"in_progress"}, []int{1}},
		{"before-finish", []string{"in_progress"}, last},
		{"after-finish", []string{c.status}, last},
	}
	if c.name == "transient_then_success" {
		pts = append(pts,
			crashPoint{"after-end-attempt", []string{"in_progress"}, []int{1}},
			crashPoint{"after-child-start@2", []string{"in_progress"}, []int{1, 2}},
			crashPoint{"after-child-exit@2", []string{"in_progress"}, []int{2}},
		)
	}
	return pts
}

func contains[T comparable](xs []T, x T) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// TestCrashPoints kills idem at every step of a run and checks the ledger
// and the runs that follow.
func TestCrashPoints(t *testing.T) {
	busy(t)
	s := newStats(t)
	idem := buildHooked(t)
	cases := crashCases
	if !longRun() {
		cases = cases[:2]
	}
	for _, c := range cases {
		for _, pt := range crashPoints(c) {
			t.Run(c.name+"/"+pt.point, func(t *testing.T) {
				dir := t.TempDir()
				path, marks, key := filepath.Join(dir, "ledger.db"), filepath.Join(dir, "marks"), "job:crash"
				args := append(append([]string{"--ledger", path, "run", "--key", key}, c.flags...), "--")
				args = append(args, c.argv(marks)...)

				p := run(t, clean([]string{"IDEM_TESTONLY_CRASH=" + pt.point}, idem, args...))
				s.add(0, 1, 0)
				if p.signal != syscall.SIGKILL {
					t.Fatalf("idem did not crash at %s: %v", pt.point, p)
				}
				checkAfterCrash(t, s, path, key, marks, pt)
				settle(t, s, idem, path, key, marks, args, c)
			})
		}
	}

	t.Run("budget_spent_by_crashes", func(t *testing.T) {
		// Three runs die after reserving: abandoned attempts spend the
		// budget of three, and the fourth run records a final failure
		// without running anything.
		dir := t.TempDir()
		path, marks, key := filepath.Join(dir, "ledger.db"), filepath.Join(dir, "marks"), "job:crash-budget"
		args := append([]string{"--ledger", path, "run", "--key", key, "--max-attempts", "3", "--"}, markCmd(marks)...)
		crash := clean([]string{"IDEM_TESTONLY_CRASH=after-reserve"}, idem, args...)
		for i := range 3 {
			if p := run(t, crash); p.signal != syscall.SIGKILL {
				t.Fatalf("run %d did not crash: %v", i+1, p)
			}
			s.add(0, 1, 0)
			if st, n := keyState(t, path, key); st != "in_progress" || n != i+1 {
				s.violate(t, "after crash %d the key is %s with %d attempts", i+1, st, n)
			}
		}
		p := run(t, clean(nil, idem, args...))
		if p.code != 75 || lines(t, marks) != 0 {
			s.violate(t, "the fourth run: %v (ran %d times), want a final failure 75 without running", p, lines(t, marks))
		}
		if st, _ := keyState(t, path, key); st != "failed" {
			s.violate(t, "the key is %s, want failed", st)
		}
		if v := integrity(t, path); v != "ok" {
			s.violate(t, "integrity_check: %s", v)
		}
	})
}

func checkAfterCrash(t *testing.T, s *stats, path, key, marks string, pt crashPoint) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("no ledger after the crash: %v", err)
	}
	if v := integrity(t, path); v != "ok" {
		s.violate(t, "integrity_check after a crash at %s: %s", pt.point, v)
	}
	st, _ := keyState(t, path, key)
	if !contains(pt.want, st) {
		s.violate(t, "after a crash at %s the key is %s, want %v", pt.point, st, pt.want)
	}
	if n := lines(t, marks); !contains(pt.ran, n) {
		s.violate(t, "after a crash at %s the command had run %d times, want %v", pt.point, n, pt.ran)
	}
}

// settle runs idem again until the key is settled (at most three runs),
// then once more to see the replay, and checks that a recorded outcome is
// never executed again.
func settle(t *testing.T, s *stats, idem, path, key, marks string, args []string, c crashCase) {
	t.Helper()
	for i := 0; ; i++ {
		before, _ := keyState(t, path, key)
		ran := lines(t, marks)
		p := run(t, clean(nil, idem, args...))
		after := lines(t, marks)
		if before == "succeeded" || before == "failed" {
			if after != ran {
				s.violate(t, "the key was %s, yet the command ran again (%d -> %d)", before, ran, after)
			}
			if !strings.HasPrefix(p.stderr, "idem: replayed "+key) {
				s.violate(t, "a %s key was not replayed: %v", before, p)
			}
		}
		if v := integrity(t, path); v != "ok" {
			s.violate(t, "integrity_check after run %d: %s", i+2, v)
		}
		st, _ := keyState(t, path, key)
		if st == c.status && p.code == c.code {
			if before != c.status {
				continue // once more, to see the replay
			}
			if n := lines(t, marks); n > 3 {
				s.violate(t, "the command ran %d times in all", n)
			}
			return
		}
		if i == 2 {
			s.violate(t, "not settled after three runs: key %s, last run %v", st, p)
			return
		}
		t.Logf("run %d: key %s, exit %s", i+2, st, fmt.Sprint(p.code))
	}
}

// TestCrashTorture runs idem again and again on a handful of keys in one
// ledger, crashing it at a random point most of the time. Whatever the
// sequence, a key whose success was recorded is never executed again, the
// ledger stays consistent, and every key settles once the crashes stop.
func TestCrashTorture(t *testing.T) {
	busy(t)
	s := newStats(t)
	idem := buildHooked(t)
	points := []string{"before-reserve", "after-reserve", "after-claim", "after-child-start",
		"after-child-exit", "after-end-attempt", "before-finish", "after-finish", ""}
	iterations := 15
	if longRun() {
		iterations = 400
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.db")
	rng := rand.New(rand.NewPCG(7, uint64(iterations)))
	keys := max(5, iterations/4) // about four runs a key: most of them do work, not replays
	argsFor := func(k int) []string {
		marks := filepath.Join(dir, fmt.Sprint("marks-", k))
		// Every other key fails transiently on its first execution.
		script := `echo ran >> "$1"`
		if k%2 == 1 {
			script += `; [ "$(wc -l < "$1")" -ge 2 ] || exit 75`
		}
		return []string{"--ledger", path, "run", "--key", fmt.Sprint("job:torture-", k), "--max-attempts", "1000",
			"--initial-delay", "1ms", "--jitter", "0", "--", "/bin/sh", "-c", script, "sh", marks}
	}
	for i := range iterations {
		k := rng.IntN(keys)
		key := fmt.Sprint("job:torture-", k)
		marks := filepath.Join(dir, fmt.Sprint("marks-", k))
		before, _ := keyState(t, path, key)
		ran := lines(t, marks)
		var env []string
		pt := points[rng.IntN(len(points))]
		if pt != "" {
			env = []string{"IDEM_TESTONLY_CRASH=" + pt}
		}
		p := run(t, clean(env, idem, argsFor(k)...))
		if p.signal != 0 {
			s.add(0, 1, 0)
		}
		if before == "succeeded" && lines(t, marks) != ran {
			s.violate(t, "iteration %d (%s): %s had succeeded, yet ran again", i, pt, key)
		}
		if p.signal == 0 && p.code != 0 {
			s.violate(t, "iteration %d (%s): exit %d\n%v", i, pt, p.code, p)
		}
		if v := integrity(t, path); v != "ok" {
			s.violate(t, "iteration %d (%s): integrity_check: %s", i, pt, v)
		}
		if t.Failed() {
			t.FailNow()
		}
	}
	for k := range keys {
		key := fmt.Sprint("job:torture-", k)
		for range 3 {
			if st, _ := keyState(t, path, key); st == "succeeded" {
				break
			}
			run(t, clean(nil, idem, argsFor(k)...))
		}
		if st, _ := keyState(t, path, key); st != "succeeded" {
			s.violate(t, "%s did not settle: %s", key, st)
		}
	}
}
