//go:build linux && !idem_noprocs

package procs

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestFindAndLock starts a process that carries an earlier run's identity
// and holds the key's lock: Find finds it (and not for another key or a
// later run), the lock is held until it is killed, then free.
func TestFindAndLock(t *testing.T) {
	lockPath := filepath.Join(t.TempDir(), "ledger.db.runlock")
	f, held, err := Lock(lockPath, "evt:key-1")
	if err != nil || held {
		t.Fatalf("Lock: %v, held %v", err, held)
	}
	old := Run{Ledger: "L", Key: "evt:key-1", Token: 3, Attempt: 1}
	cmd := exec.Command("sleep", "30")
	cmd.Env = append(os.Environ(), Env+"=other/1/1/x "+old.String())
	cmd.ExtraFiles = []*os.File{f}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f.Close() // the child holds it now
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })

	if _, held, _ := Lock(lockPath, "evt:key-1"); !held {
		t.Errorf("the lock is free while the child holds it")
	}
	if g, held, _ := Lock(lockPath, "evt:key-2"); held {
		t.Errorf("another key's lock is held")
	} else {
		g.Close()
	}
	fd := New()
	var found []Process
	for range 100 { // the child's environ is readable once it exec'd
		found, _ = fd.Find(Run{Ledger: "L", Key: "evt:key-1", Token: 4, Attempt: 1}, nil)
		if len(found) > 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(found) != 1 || found[0].PID != cmd.Process.Pid || found[0].Run != old {
		t.Fatalf("Find = %+v, want pid %d of run %+v", found, cmd.Process.Pid, old)
	}
	if got, _ := fd.Find(Run{Ledger: "L", Key: "evt:key-1", Token: 3, Attempt: 1}, nil); len(got) != 0 {
		t.Errorf("Find of the run itself found %+v", got)
	}
	if got, _ := fd.Find(Run{Ledger: "M", Key: "evt:key-1", Token: 9, Attempt: 1}, nil); len(got) != 0 {
		t.Errorf("Find for another ledger found %+v", got)
	}
	if got, _ := fd.Find(Run{Ledger: "L", Key: "evt:key-1", Token: 4, Attempt: 1}, []byte("secret")); len(got) != 0 {
		t.Errorf("Find took an untagged marker for the ledger with a secret: %+v", got)
	}
	var lk syscall.Stat_t
	if err := syscall.Stat(lockPath, &lk); err != nil {
		t.Fatal(err)
	}
	if got, _ := fd.Holding(lk.Dev, lk.Ino, "evt:key-1"); len(got) != 1 || got[0].PID != cmd.Process.Pid {
		t.Errorf("Holding = %+v, want pid %d", got, cmd.Process.Pid)
	}
	if got, _ := fd.Holding(lk.Dev, lk.Ino, "evt:key-2"); len(got) != 0 {
		t.Errorf("Holding of another key = %+v", got)
	}
	if !fd.Alive(found[0]) || fd.Alive(Process{PID: found[0].PID, Start: found[0].Start + 1}) {
		t.Errorf("Alive does not check the start time")
	}
	if !fd.Signal(found[0], syscall.SIGKILL) {
		t.Errorf("Signal: not alive")
	}
	cmd.Wait()
	g, held, err := Lock(lockPath, "evt:key-1")
	if err != nil || held {
		t.Fatalf("Lock after the holder died: %v, held %v", err, held)
	}
	g.Close()
}

// TestSignedRun: a tag made with the ledger's secret passes, one made with
// another secret or none does not, and the tag survives the marker's
// String form.
func TestSignedRun(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	r := Run{Ledger: "L", Key: "evt:key-1", Token: 3, Attempt: 2}.Sign(secret)
	back, ok := ParseRun(r.String())
	if !ok || back != r || !back.Signed(secret) {
		t.Fatalf("ParseRun(%q) = %+v, %v", r.String(), back, ok)
	}
	forged := Run{Ledger: "L", Key: "evt:key-1", Token: 3, Attempt: 2}
	if forged.Signed(secret) || forged.Sign([]byte("other")).Signed(secret) {
		t.Errorf("a marker without the ledger's secret passes")
	}
	if !forged.Signed(nil) {
		t.Errorf("a ledger without a secret refuses an untagged marker")
	}
}

// TestReopenDeletedLock: a lock file deleted while a process holds a
// key's lock on it is reopened through that process, and a lock on the
// reopened file still sees the holder's; once the holder is gone there is
// nothing to reopen.
func TestReopenDeletedLock(t *testing.T) {
	lockPath := filepath.Join(t.TempDir(), "ledger.db.runlock")
	lf, err := OpenLock(lockPath, true)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	f, held, err := lf.Lock("evt:key-1")
	if err != nil || held {
		t.Fatalf("Lock: %v, held %v", err, held)
	}
	cmd := exec.Command("sleep", "30")
	cmd.Env = []string{} // invisible to Find: only its fd tells
	cmd.ExtraFiles = []*os.File{f}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	lf.Close()
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if err := os.Remove(lockPath); err != nil {
		t.Fatal(err)
	}
	fd := New()
	old, err := fd.Reopen(lockPath, lf.Dev, lf.Ino, "")
	if err != nil || old == nil {
		t.Fatalf("Reopen = %v, %v; want the deleted file the child holds", old, err)
	}
	if old.Dev != lf.Dev || old.Ino != lf.Ino {
		t.Errorf("Reopen opened %d/%d, want %d/%d", old.Dev, old.Ino, lf.Dev, lf.Ino)
	}
	if _, held, _ := old.Lock("evt:key-1"); !held {
		t.Errorf("the key's lock on the reopened file is free while the child holds it")
	}
	if got, _ := fd.Holding(old.Dev, old.Ino, "evt:key-1"); len(got) != 1 || got[0].PID != cmd.Process.Pid {
		t.Errorf("Holding = %+v, want pid %d", got, cmd.Process.Pid)
	}
	old.Close()
	cmd.Process.Kill()
	cmd.Wait()
	if again, err := fd.Reopen(lockPath, lf.Dev, lf.Ino, ""); err != nil || again != nil {
		t.Errorf("Reopen after the holder died = %v, %v; want nothing", again, err)
	}
}

// TestReopenMovedLock: a lock file moved away while a process holds it is
// the ledger's by its mark, whatever its name: Reopen finds it for the
// ledger whose mark it carries, and not for another (a copy of the ledger
// records the original's lock file, which carries the original's mark),
// nor, moved, without a mark.
func TestReopenMovedLock(t *testing.T) {
	dir := t.TempDir()
	lockPath := filepath.Join(dir, "ledger.db.runlock")
	lf, err := OpenLock(lockPath, true)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	lf.Mark("64768:1234")
	if buf := make([]byte, 64); !hasMark(lockPath, "64768:1234") {
		_, err := unix.Getxattr(lockPath, lockMarkAttr, buf)
		t.Skipf("the file system keeps no mark here (%v)", err)
	}
	f, _, err := lf.Lock("evt:key-1")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "30")
	cmd.Env = []string{}
	cmd.ExtraFiles = []*os.File{f}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if err := os.Rename(lockPath, filepath.Join(dir, "moved")); err != nil {
		t.Fatal(err)
	}
	fd := New()
	for _, tc := range []struct {
		mark  string
		found bool
	}{{"64768:1234", true}, {"64768:999", false}, {"", false}} {
		got, err := fd.Reopen(lockPath, lf.Dev, lf.Ino, tc.mark)
		if err != nil || (got != nil) != tc.found {
			t.Errorf("Reopen with mark %q = %v, %v; want found %v", tc.mark, got, err, tc.found)
		}
		if got != nil {
			got.Close()
		}
	}
}
