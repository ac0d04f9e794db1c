//go:build linux && !idem_noprocs

package runner

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/ledger"
	"github.com/idemhq/idem/internal/ledger/sqlite"
	"github.com/idemhq/idem/internal/runner/procs"
)

// missingScans is the real Finder, whose first misses scans of /proc for
// a run lock file's holders find none: a holder that forked, its child
// inheriting the file, and exited while the scan read (a leftover that
// daemonizes), so that the child is in neither what the scan listed nor
// the holder's descriptors.
type missingScans struct {
	procs.Finder
	misses, scans int
}

func (f *missingScans) Reopen(path string, dev, ino uint64, mark string) (*procs.LockFile, error) {
	f.scans++
	if f.scans <= f.misses {
		return nil, nil
	}
	return f.Finder.Reopen(path, dev, ino, mark)
}

// binds records the files a ledger is bound to.
type binds struct{ inos []uint64 }

func (b *binds) RunGuard(context.Context) (ledger.RunGuard, error) { return ledger.RunGuard{}, nil }
func (b *binds) BindRunLock(_ context.Context, _, _, _, ino uint64) (bool, error) {
	b.inos = append(b.inos, ino)
	return true, nil
}

// holdKey starts a leftover of a run: sleep, its environment cleared (only
// its descriptor tells), holding key's byte of lf through a description
// of its own, which the caller no longer has a copy of.
func holdKey(t *testing.T, lf *procs.LockFile, key string) *exec.Cmd {
	t.Helper()
	f, held, err := lf.Lock(key)
	if err != nil || held {
		t.Fatalf("Lock: %v, held %v", err, held)
	}
	defer f.Close()
	c := exec.Command("sleep", "30")
	c.Env = []string{}
	c.ExtraFiles = []*os.File{f}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	return c
}

// TestRebindScansTwice: the run lock file the ledger is bound to was
// deleted while a process (sleep, its environment cleared: only its
// descriptor tells) still holds a key's byte of it. A first scan that
// misses the holder does not get the ledger bound to a new file beside
// it, where the next run would find the key free: the second scan, a
// poll later, finds it and rebind reopens the old file through it. Two
// scans that miss it (the holder gone) bind a new file.
func TestRebindScansTwice(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db.runlock")
	lf, err := procs.OpenLock(path, true)
	if err != nil {
		t.Fatal(err)
	}
	holder := holdKey(t, lf, "evt:key-1")
	lf.Close()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	rebind := func(misses int) (*procs.LockFile, *missingScans, *binds) {
		t.Helper()
		finder := &missingScans{Finder: procs.New(), misses: misses}
		inv := &invocation{r: &Runner{Procs: finder, LockPath: path, Clock: SystemClock{}},
			guard: ledger.RunGuard{LockDev: lf.Dev, LockIno: lf.Ino},
			o:     Options{Lease: time.Minute}, leaseUntil: time.Now().Add(time.Minute)}
		b := &binds{}
		got, stale, err := inv.rebind(context.Background(), b)
		if err != nil || stale {
			t.Fatalf("rebind: %v, stale %v", err, stale)
		}
		t.Cleanup(func() { got.Close() })
		return got, finder, b
	}

	got, finder, b := rebind(1)
	if got.Dev != lf.Dev || got.Ino != lf.Ino || len(b.inos) != 0 {
		t.Fatalf("first scan missed the holder: rebind gave %d/%d and bound %v; want the deleted file %d/%d, nothing bound",
			got.Dev, got.Ino, b.inos, lf.Dev, lf.Ino)
	}
	if _, held, _ := got.Lock("evt:key-1"); !held {
		t.Errorf("the key's byte of the reopened file is free while the holder holds it")
	}
	if finder.scans != 2 {
		t.Errorf("%d scans, want 2", finder.scans)
	}

	holder.Process.Kill()
	holder.Wait()
	got, finder, b = rebind(0)
	if got.Ino == lf.Ino || len(b.inos) != 1 || b.inos[0] != got.Ino {
		t.Errorf("no holder left: rebind gave inode %d and bound %v; want a new file, bound", got.Ino, b.inos)
	}
	if finder.scans != 2 {
		t.Errorf("%d scans before a new file, want 2", finder.scans)
	}
}

// TestOpenLockStaleGuard: a run read the guard (bound to file O) and was
// held up; meanwhile O was deleted, another run bound the ledger to a new
// file N, a leftover of that run (sleep, its environment cleared: only its
// descriptor tells) holds a key's byte of N, and N was deleted too. The
// held-up run must not bind the ledger to a third file over N, where every
// later run would find the key free beside the leftover: its binding over
// O fails, it reads the guard again and locks on N, reopened through the
// leftover, which holds the key.
func TestOpenLockStaleGuard(t *testing.T) {
	ctx := context.Background()
	l := openLedger(t)
	path := l.Describe() + ".runlock"
	bindNew := func(oldDev, oldIno uint64) *procs.LockFile {
		t.Helper()
		lf, err := procs.OpenLock(path, true)
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := l.BindRunLock(ctx, oldDev, oldIno, lf.Dev, lf.Ino); err != nil || !ok {
			t.Fatalf("BindRunLock: %v, %v", ok, err)
		}
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		return lf
	}
	o := bindNew(0, 0)
	defer o.Close() // open, O keeps its inode: N and the file after it get others
	n := bindNew(o.Dev, o.Ino)
	holdKey(t, n, "evt:key-1")
	n.Close()

	inv := &invocation{r: &Runner{Ledger: l, Procs: procs.New(), LockPath: path, Clock: SystemClock{}},
		o: Options{Key: "evt:key-1", Lease: time.Minute}, leaseUntil: time.Now().Add(time.Minute),
		guard: ledger.RunGuard{LockDev: o.Dev, LockIno: o.Ino}}
	if err := inv.openLock(ctx); err != nil {
		t.Fatalf("openLock: %v", err)
	}
	t.Cleanup(func() { inv.lockFile.Close() })
	if got := inv.lockFile; got == nil || got.Dev != n.Dev || got.Ino != n.Ino {
		t.Fatalf("openLock locks on %+v; want the file the ledger is bound to, %d/%d, which the leftover holds", got, n.Dev, n.Ino)
	}
	if _, held, _ := inv.lockFile.Lock("evt:key-1"); !held {
		t.Errorf("the key's byte is free while the leftover holds it")
	}
	if g, err := l.RunGuard(ctx); err != nil || g.LockDev != n.Dev || g.LockIno != n.Ino {
		t.Errorf("the ledger is bound to %d/%d (%v); want %d/%d still", g.LockDev, g.LockIno, err, n.Dev, n.Ino)
	}
}

// bindingAlwaysLost is a real ledger whose run lock binding another run
// always makes first.
type bindingAlwaysLost struct{ *sqlite.Ledger }

func (bindingAlwaysLost) BindRunLock(context.Context, uint64, uint64, uint64, uint64) (bool, error) {
	return false, nil
}

// TestOpenLockGivesUpOnRebinding: when every binding loses to another
// run's, openLock stops after bindTries and says what to look for.
func TestOpenLockGivesUpOnRebinding(t *testing.T) {
	l := openLedger(t)
	inv := &invocation{r: &Runner{Ledger: bindingAlwaysLost{l}, Procs: procs.New(), LockPath: l.Describe() + ".runlock", Clock: SystemClock{}},
		o: Options{Key: "evt:key-1", Lease: time.Minute}, leaseUntil: time.Now().Add(time.Minute)}
	err := inv.openLock(context.Background())
	var se *ledger.StoreError
	if !errors.As(err, &se) || !strings.Contains(se.Err.Error(), "keep binding") || !strings.Contains(se.Hint, "deleting or replacing") {
		t.Errorf("openLock: %v; want a store error that other runs keep binding, and what to look for", err)
	}
	if inv.lockFile != nil {
		t.Errorf("a lock file kept: %+v", inv.lockFile)
	}
}
