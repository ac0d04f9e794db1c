package e2e

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// TestBackupWhileRunsGo: idem backup copies a ledger while other runs write
// to it; the documented restore (no idem running: remove -wal and -shm, copy
// the backup over the .db) gives a ledger that passes integrity_check and
// replays every key recorded before the backup.
func TestBackupWhileRunsGo(t *testing.T) {
	busy(t)
	g := newLeaseRig(t)
	for i := range 20 {
		g.run("run", "--key", fmt.Sprintf("backup:before-%02d", i), "--", "echoargs", fmt.Sprintf("out-%d", i)).expect(0)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				g.run("run", "--key", fmt.Sprintf("backup:during-%d-%d", w, i), "--", "echoargs", "x").expect(0)
			}
		}()
	}
	dest := g.path("copy.db")
	for i := range 3 {
		p := g.run("backup", dest+fmt.Sprint(i)).expect(0)
		if !strings.HasPrefix(p.stderr, "idem: backed up ") {
			t.Errorf("backup said %q", p.stderr)
		}
	}
	stop.Store(true)
	wg.Wait()

	// A backup never overwrites.
	if p := g.run("backup", dest+"0").expect(74); !strings.Contains(p.stderr, "the file exists") {
		t.Errorf("backup over an existing file: %v", p)
	}

	// Restore, as the README says.
	for _, suffix := range []string{"-wal", "-shm"} {
		if err := os.Remove(g.ledger + suffix); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(dest + "2")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(g.ledger, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if v := integrity(t, g.ledger); v != "ok" {
		t.Fatalf("integrity_check of the restored ledger: %s", v)
	}
	for i := range 20 {
		key := fmt.Sprintf("backup:before-%02d", i)
		p := g.run("run", "--key", key, "--", "echoargs", fmt.Sprintf("out-%d", i)).expect(0)
		if p.stdout != fmt.Sprintf("out-%d\n", i) || !strings.Contains(p.stderr, "idem: replayed "+key) {
			t.Errorf("%s after the restore: %v", key, p)
		}
	}
	if v := integrity(t, g.ledger); v != "ok" {
		t.Fatalf("integrity_check after runs on the restored ledger: %s", v)
	}
}
