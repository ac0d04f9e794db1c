//go:build linux

package e2e

// The ledger's -shm, which every process using the ledger maps and shares:
// kept fresh against cleaners of old files, and never written beside a
// new one.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// gatedRun starts c, a run of key in g whose command writes started,
// then waits for gate to exist, then prints "long-done"; it returns once
// the command has started.
func gatedRun(t *testing.T, g *hostileRig, key string) (p *process, gate string, c command) {
	t.Helper()
	gate, started := filepath.Join(g.dir, key+".gate"), filepath.Join(g.dir, key+".started")
	c = g.idem("--key", key, "--", "sh", "-c",
		`: > "$1"; while [ ! -e "$2" ]; do sleep 0.02; done; echo long-done`, "sh", started, gate)
	p = start(t, c)
	for end := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(started); err == nil {
			return p, gate, c
		}
		if time.Now().After(end) {
			t.Fatalf("the run of %s did not start its command", key)
		}
	}
}

// TestShmKeptFresh: SQLite writes the -shm through a memory map, and sets
// its times only when a process finds nobody else using it; on tmpfs (as
// /tmp often is), writes through a map leave the times as they were. So
// while runs overlap, the -shm's times age. A run sets them to now when
// old, so that a cleaner deleting old files leaves the -shm of a ledger
// in use.
func TestShmKeptFresh(t *testing.T) {
	g := newHostileRig(t)
	g.dir = smallFS(t, "64m")
	g.ledger = filepath.Join(g.dir, "ledger.db")
	a, gate, _ := gatedRun(t, g, "job:long-run")
	old := time.Now().Add(-72 * time.Hour)
	if err := os.Chtimes(g.ledger+"-shm", old, old); err != nil {
		t.Fatal(err)
	}
	run(t, g.idem("--key", "job:fresh-shm", "--", "true")).expect(0)
	run(t, inherit(nil, "find", g.dir, "-name", "ledger.db-shm", "-mtime", "+0", "-delete")).expect(0)
	if _, err := os.Stat(g.ledger + "-shm"); err != nil {
		t.Errorf("the cleaner deleted the -shm of a ledger in use: %v", err)
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if p := a.wait().expect(0); p.stdout != "long-done\n" {
		t.Errorf("the long run: %v", p)
	}
}

// TestShmDeletedWhileRunning: the -shm deleted while a run holds the
// ledger (by root, or a cleaner), and other runs then record their
// outcomes through a new one that the first of them makes (deleted in
// turn in the second case, so that the running idem finds none). The run
// that shared the old one must not write over what they recorded: it
// records nothing more (74, saying why) and its key runs again on its
// next run; the others' outcomes stay recorded and replay, and the
// ledger is sound.
func TestShmDeletedWhileRunning(t *testing.T) {
	for _, c := range []struct {
		name  string
		again bool // delete the new -shm too, before the run ends
		// linked: the ledger is reached through a linked directory, and
		// has no -shm when the run opens it (a backup closed it last).
		linked bool
	}{{"deleted", false, false}, {"deleted twice", true, false}, {"through a linked directory", false, true}} {
		t.Run(c.name, func(t *testing.T) {
			g := newHostileRig(t)
			if c.linked {
				real := filepath.Join(g.dir, "real")
				if err := os.Mkdir(real, 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(real, filepath.Join(g.dir, "link")); err != nil {
					t.Fatal(err)
				}
				g.ledger = filepath.Join(g.dir, "link", "ledger.db")
				run(t, g.idem("--key", "job:first-one", "--", "true")).expect(0)
				run(t, clean(nil, idemBin(t), "--ledger", g.ledger, "backup", filepath.Join(g.dir, "copy.db"))).expect(0)
				if _, err := os.Stat(g.ledger + "-shm"); err == nil {
					t.Fatalf("a -shm after the backup closed the ledger")
				}
			}
			a, gate, long := gatedRun(t, g, "job:long-run")
			if err := os.Remove(g.ledger + "-shm"); err != nil {
				t.Fatal(err)
			}
			count := filepath.Join(g.dir, "count")
			job := func(key string) command {
				return g.idem("--key", key, "--", "sh", "-c", `echo "$2" >> "$1"; echo "$2"`, "sh", count, key)
			}
			keys := []string{"job:other-1", "job:other-2", "job:other-3"}
			for _, k := range keys {
				run(t, job(k)).expect(0)
			}
			if c.again {
				if err := os.Remove(g.ledger + "-shm"); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(gate, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			p := a.wait().expect(74)
			if p.stdout != "long-done\n" || !strings.Contains(p.stderr, "idem: error: ledger "+g.ledger+": record outcome: the ledger's -shm was deleted or replaced") ||
				!strings.Contains(p.stderr, "idem: hint: keep the ledger's files in place") {
				t.Errorf("the run whose -shm was deleted: %v; want its output, 74, the -shm named and a hint", p)
			}
			for _, k := range keys {
				if p := run(t, job(k)).expect(0); !strings.Contains(p.stderr, "idem: replayed "+k+": succeeded") {
					t.Errorf("%s, recorded beside the run whose -shm was deleted, did not replay: %v", k, p)
				}
			}
			if got, want := readFile(count), strings.Join(keys, "\n")+"\n"; got != want {
				t.Errorf("commands run:\n%s\nwant each once:\n%s", got, want)
			}
			run(t, clean(nil, idemBin(t), "--ledger", g.ledger, "check")).expect(0)
			if p := run(t, long).expect(0); p.stdout != "long-done\n" || strings.Contains(p.stderr, "replayed") {
				t.Errorf("the key whose outcome was not recorded replayed: %v", p)
			}
		})
	}
}
