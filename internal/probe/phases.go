//go:build phases && !testhooks

package probe

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
)

// marks are the points passed so far, with the wall clock in nanoseconds
// (the clock the benchmark's parent reads when it spawns idem) and the
// process's minor page faults by then.
var marks = struct {
	sync.Mutex
	names  []string
	at     []int64
	faults []int64
}{}

// At notes when point was reached, and how many minor page faults the
// process had taken by then. With IDEM_PHASE_STRACE set it also makes one
// failing write(-1, POINT), so that strace's output can be cut at the
// points (timeit -syscalls).
func At(point string) {
	now := time.Now().UnixNano()
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	if traced {
		syscall.Write(-1, []byte(point))
	}
	marks.Lock()
	marks.names = append(marks.names, point)
	marks.at = append(marks.at, now)
	marks.faults = append(marks.faults, ru.Minflt)
	marks.Unlock()
}

// traced says that IDEM_PHASE_STRACE is set (see At).
var traced = os.Getenv("IDEM_PHASE_STRACE") != ""

// Exit notes the point "exit" and writes every point, a "NAME UNIXNANO
// MINFLT" line each in the order reached, to the file IDEM_PHASE_FILE
// names.
func Exit() {
	At("exit")
	path := os.Getenv("IDEM_PHASE_FILE")
	if path == "" {
		return
	}
	var b strings.Builder
	marks.Lock()
	for i, name := range marks.names {
		fmt.Fprintf(&b, "%s %d %d\n", name, marks.at[i], marks.faults[i])
	}
	marks.Unlock()
	os.WriteFile(path, []byte(b.String()), 0o644)
}
