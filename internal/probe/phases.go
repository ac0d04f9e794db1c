//go:build phases && !testhooks

package probe

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// marks are the points passed so far, with the wall clock in nanoseconds
// (the clock the benchmark's parent reads when it spawns idem).
var marks = struct {
	sync.Mutex
	names []string
	at    []int64
}{}

// At notes when point was reached.
func At(point string) {
	now := time.Now().UnixNano()
	marks.Lock()
	marks.names = append(marks.names, point)
	marks.at = append(marks.at, now)
	marks.Unlock()
}

// Exit notes the point "exit" and writes every point, a "NAME UNIXNANO"
// line each in the order reached, to the file IDEM_PHASE_FILE names.
func Exit() {
	At("exit")
	path := os.Getenv("IDEM_PHASE_FILE")
	if path == "" {
		return
	}
	var b strings.Builder
	marks.Lock()
	for i, name := range marks.names {
		fmt.Fprintf(&b, "%s %d\n", name, marks.at[i])
	}
	marks.Unlock()
	os.WriteFile(path, []byte(b.String()), 0o644)
}
