//go:build testhooks

package probe

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// crashHits counts how often each point was reached.
var crashHits = struct {
	sync.Mutex
	n map[string]int
}{n: map[string]int{}}

// At is a crash point for the reliability suite (internal/e2e/crash_test.go
// builds idem with -tags testhooks): IDEM_TESTONLY_CRASH=POINT[@N] makes idem SIGKILL
// itself the Nth time (default: the first) it reaches POINT. Builds without
// the tag ignore the variable.
func At(point string) {
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
	crashHits.Lock()
	crashHits.n[point]++
	hit := crashHits.n[point] == n
	crashHits.Unlock()
	if hit {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
}

// Exit does nothing in this build.
func Exit() {}
