package runner

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestPrepareStartLeavesNothing: preparing the first start keeps no
// descriptor open (the pidfd of the process itself) and leaves no child
// behind, and a command still starts after it.
func TestPrepareStartLeavesNothing(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc/self")
	}
	fds := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	children := func() string {
		tasks, err := filepath.Glob("/proc/self/task/*/children")
		if err != nil || len(tasks) == 0 {
			t.Fatalf("no tasks in /proc/self/task: %v", err)
		}
		var all []string
		for _, task := range tasks {
			b, err := os.ReadFile(task)
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, strings.Fields(string(b))...)
		}
		return strings.Join(all, " ")
	}
	before := fds()
	PrepareStart()
	if n := fds(); n != before {
		t.Errorf("%d descriptors open after PrepareStart, %d before", n, before)
	}
	if c := children(); c != "" {
		t.Errorf("children left after PrepareStart: %s", c)
	}
	c, err := startChild(childSpec{argv: []string{"true"}, tty: -1})
	if err != nil {
		t.Fatal(err)
	}
	if code := c.wait(); code != 0 {
		t.Errorf("true exited %d after PrepareStart", code)
	}
}
