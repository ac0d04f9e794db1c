package e2e

// Which tests share the machine. go test runs the tests that call
// t.Parallel together, once the others have run one at a time. Most tests
// here wait (a lease, a backoff, a cron minute, a connect budget), so
// running them side by side saves minutes; but some judge what happened
// within a second of a deadline (a kill grace, a short lease, SIGSTOP) and
// must not be kept waiting for a CPU by other tests' processes. A parallel
// test says which lane it runs in:
//
//   - quiet(t): it waits, with margins of seconds, and uses little CPU:
//     at most quietMax at once, beside anything.
//   - busy(t): it starts many processes at once, runs strace, builds or
//     initdb, but has no short margin: at most busyMax at once, never
//     beside a timed test.
//   - timed(t): it has margins of a second or less: at most timedMax at
//     once (they mostly sleep), never beside a busy test.
//
// The scripts take the timed lane or the quiet one (enterScriptLane).
// A test that calls none of them runs alone (among this package's tests):
// the chaos run, whose random signals must meet only its own processes
// and which keeps both cores busy, what installs idem system-wide
// (TestREADMEInstall), which the cron tests' PATH would find, the tests
// that delete a run lock file while a process holds it (the next run looks
// for the file by its inode among all processes, and another test's new
// file may have taken that inode number: TestRunLockDeletedAfterRetryable
// failed so once in seven parallel runs), TestSignalEndsStopLoop (its
// forger respawns a process every 100ms, which idem's scan must never
// find missing; it failed once beside other tests on a loaded machine),
// and the tests too short to gain anything.
//
// The lanes, not go test's -parallel, bound how many run at once:
// TestMain raises -parallel (unless given) so that tests waiting for a
// lane do not hold back the quiet ones.

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
)

const (
	quietMax = 12
	busyMax  = 2
	timedMax = 2
	turnMax  = 3
	// parallelDefault is -test.parallel unless the command line sets it:
	// more than the package has parallel tests and scripts.
	parallelDefault = 512
)

var lanes = struct {
	quiet chan struct{}
	cpu   room // busy tests or timed ones, never both
}{quiet: make(chan struct{}, quietMax), cpu: room{max: [2]int{busyMax, timedMax}}}

const (
	busyLane = iota
	timedLane
)

// quiet runs t in parallel, in the quiet lane.
func quiet(t *testing.T) {
	t.Helper()
	t.Parallel()
	t.Cleanup(enterQuiet())
}

// busy runs t in parallel, in the busy lane.
func busy(t *testing.T) {
	t.Helper()
	t.Parallel()
	t.Cleanup(lanes.cpu.enter(busyLane))
}

// timed runs t in parallel, in the timed lane.
func timed(t *testing.T) {
	t.Helper()
	t.Parallel()
	t.Cleanup(lanes.cpu.enter(timedLane))
}

func enterQuiet() (leave func()) {
	lanes.quiet <- struct{}{}
	return func() { <-lanes.quiet }
}

// room lets in tests of one lane at a time, up to max of that lane. While
// the other lane waits, a lane's turn lets in at most turnMax times max
// tests; then the room empties and the other lane has its turn.
type room struct {
	mu       sync.Mutex
	cond     *sync.Cond
	max      [2]int
	in       [2]int
	waiting  [2]int
	turn     int // the lane let in last
	admitted int // tests of turn let in since it began
}

// enter waits until a test of lane may run and returns its leave.
func (r *room) enter(lane int) (leave func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cond == nil {
		r.cond = sync.NewCond(&r.mu)
	}
	r.waiting[lane]++
	for !r.mayEnter(lane) {
		r.cond.Wait()
	}
	r.waiting[lane]--
	if r.turn != lane {
		r.turn, r.admitted = lane, 0
	}
	r.admitted++
	r.in[lane]++
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.in[lane]--
		r.cond.Broadcast()
	}
}

func (r *room) mayEnter(lane int) bool {
	other := 1 - lane
	switch {
	case r.in[other] > 0 || r.in[lane] >= r.max[lane]:
		return false
	case r.waiting[other] == 0:
		return true
	case r.in[lane] > 0: // this lane's turn, the other waiting
		return r.admitted < turnMax*r.max[lane]
	default: // an empty room, both lanes waiting: the other had the last turn
		return r.turn != lane
	}
}

// timedScript matches what makes a script judge time: a background
// command, a wait for one, a sleep, or a flag that times idem (a timeout,
// a deadline, a lease, a wait, a kill grace, a backoff, a TTL).
var timedScript = regexp.MustCompile(`(^|\s)(sleeper|waitfile|slowappend|gate)\b|--(timeout|deadline|lease|wait|wait-timeout|kill-grace|initial-delay|max-delay|ttl)\b|&[a-z0-9_]*&?\s*$|\bsleep\b`)

// enterScriptLane puts a script in its lane until it ends (testscript runs
// each script as a parallel subtest): a script that judges time (or that
// cannot be read) in the timed lane, the others, which start idem a few
// times and look at what it said, in the quiet one. (The scripts whose
// PostgreSQL cannot be reached wait out idem's connect budget, 30s, for
// each run: quiet.)
func enterScriptLane(env *testscript.Env, dir string, files []string) {
	name := strings.TrimPrefix(filepath.Base(env.WorkDir), "script-")
	path := filepath.Join(dir, name+".txtar")
	for _, f := range files {
		if strings.TrimSuffix(filepath.Base(f), ".txtar") == name {
			path = f
		}
	}
	b, err := os.ReadFile(path)
	if err != nil || judgesTime(b) {
		env.Defer(lanes.cpu.enter(timedLane))
		return
	}
	env.Defer(enterQuiet())
}

func judgesTime(script []byte) bool {
	for _, line := range strings.Split(string(script), "\n") {
		if timedScript.MatchString(line) {
			return true
		}
	}
	return false
}

// raiseParallel sets -test.parallel to parallelDefault unless the command
// line set it; flags must be parsed.
func raiseParallel() {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		flag.Set("test.parallel", strconv.Itoa(parallelDefault))
	}
}
