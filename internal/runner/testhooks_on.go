//go:build testhooks

package runner

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Crash points for the reliability suite (crash_test.go builds idem with
// -tags testhooks). IDEM_TESTONLY_CRASH=POINT[@N] makes idem SIGKILL itself
// the Nth time (default: the first) it reaches POINT, so the suite can check
// what the ledger holds after a crash at every step of a run. Builds without
// the tag have no crash points and ignore the variable.
var testOnlyCrashHits = struct {
	sync.Mutex
	n map[string]int
}{n: map[string]int{}}

func testOnlyCrash(point string) {
	want, ok := os.LookupEnv("IDEM_TESTONLY_CRASH")
	if !ok {
		return
	}
	name, nth, found := strings.Cut(want, "@")
	if name != point {
		return
	}
	n := 1
	if found {
		n, _ = strconv.Atoi(nth)
	}
	testOnlyCrashHits.Lock()
	testOnlyCrashHits.n[point]++
	hit := testOnlyCrashHits.n[point] == n
	testOnlyCrashHits.Unlock()
	if hit {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
}
