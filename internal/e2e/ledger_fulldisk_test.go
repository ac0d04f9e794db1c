//go:build linux

package e2e

import (
	"bytes"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/idemhq/idem/internal/testenv"
)

// smallFS mounts a tmpfs of size (e.g. "8m") on a fresh directory for the
// test's lifetime.
func smallFS(t *testing.T, size string) string {
	t.Helper()
	testenv.Need(t, "root", os.Geteuid() == 0, "mounting a small tmpfs needs root")
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size+",mode=0700"); err != nil {
		t.Fatalf("mount a %s tmpfs: %v", size, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// fill writes zeros to a new file in dir until its file system is full.
func fill(t *testing.T, dir string) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for len(buf) > 0 {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling %s: %v", dir, err)
			}
			buf = buf[:len(buf)/2]
		}
	}
}

// TestFullDiskReplays: on a full file system, a replay of a recorded
// outcome, which needs nothing written, still replays: the recorded exit
// code and output, byte for byte, with the usual replay notice and no
// error. A new key, which must be
// recorded, is refused with 74 and runs nothing.
func TestFullDiskReplays(t *testing.T) {
	idem := idemBin(t)
	dir := smallFS(t, "8m")
	path := filepath.Join(dir, "ledger.db")
	out := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	src := filepath.Join(t.TempDir(), "out")
	if err := os.WriteFile(src, out, 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"--ledger", path, "run", "--key", "job:full", "--", "sh", "-c", `cat "$1"; echo warn >&2; exit 3`, "sh", src}
	if p := run(t, clean(nil, idem, args...)); p.code != 3 || p.stdout != string(out) {
		t.Fatalf("first run: exit %d, %d bytes of stdout; want 3 and 1 MiB", p.code, len(p.stdout))
	}
	fill(t, dir)
	for i := 1; i <= 3; i++ {
		p := run(t, clean(nil, idem, args...))
		if p.code != 3 || p.stdout != string(out) || !strings.HasPrefix(p.stderr, "warn\nidem: replayed job:full: failed ") ||
			strings.Contains(p.stderr, "error") {
			t.Fatalf("replay %d on a full disk: exit %d, %d bytes of stdout, stderr %q; want 3, the recorded 1 MiB, \"warn\" and the replay's notice",
				i, p.code, len(p.stdout), p.stderr)
		}
	}
	mark := filepath.Join(t.TempDir(), "ran")
	p := run(t, clean(nil, idem, "--ledger", path, "run", "--key", "job:new-key", "--", "sh", "-c", `: > "$1"`, "sh", mark))
	if p.code != 74 || !strings.Contains(p.stderr, "disk full") {
		t.Errorf("a new key on a full disk: %v; want 74, disk full", p)
	}
	if _, err := os.Stat(mark); err == nil {
		t.Errorf("a new key ran on a full disk, where its outcome could not be recorded")
	}
}

// TestFullDiskReplayGivesWALBack: a -wal that grew past the trim while a
// reader held it (a long inspect or metrics of a big ledger, another
// program reading it) and a file system that then filled up. A replay, whose count cannot
// land there, still replays, and its trim gives the -wal's space back,
// so that a new key runs again (it needs its reservation and outcome
// written) instead of being refused with 74 until someone frees space.
func TestFullDiskReplayGivesWALBack(t *testing.T) {
	idem := idemBin(t)
	dir := smallFS(t, "8m")
	path := filepath.Join(dir, "ledger.db")
	replay := clean(nil, idem, "--ledger", path, "run", "--key", "job:small", "--", "echo", "hello")
	if p := run(t, replay); p.code != 0 || p.stdout != "hello\n" {
		t.Fatalf("first run: %v", p)
	}
	reader, err := sql.Open("sqlite", "file:"+uriPath(path)+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	tx, err := reader.Begin()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := tx.QueryRow(`SELECT count(*) FROM records`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	// 8 KiB of -wal a counted replay: past the 256 KiB trim, which the
	// reader's snapshot keeps from truncating it.
	for i := range 48 {
		if p := run(t, replay); p.code != 0 || p.stdout != "hello\n" {
			t.Fatalf("replay %d beside a reader: %v", i, p)
		}
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := reader.Close(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path + "-wal")
	if err != nil || fi.Size() < 256<<10 {
		t.Fatalf("the -wal after replays beside a reader: %v, %v; want 256 KiB or more", fi, err)
	}
	fill(t, dir)
	if p := run(t, replay); p.code != 0 || p.stdout != "hello\n" || strings.Contains(p.stderr, "error") {
		t.Fatalf("replay on a full disk: %v; want 0, hello, no error", p)
	}
	if fi, err := os.Stat(path + "-wal"); err != nil || fi.Size() != 0 {
		t.Errorf("the -wal after a replay on a full disk: %v, %v; want it truncated", fi, err)
	}
	mark := filepath.Join(t.TempDir(), "ran")
	p := run(t, clean(nil, idem, "--ledger", path, "run", "--key", "job:new-key", "--", "sh", "-c", `: > "$1"`, "sh", mark))
	if p.code != 0 {
		t.Errorf("a new key once the replay gave the -wal's space back: %v; want 0", p)
	}
	if _, err := os.Stat(mark); err != nil {
		t.Errorf("the new key's command did not run: %v", err)
	}
}

// TestFullDiskReplayWithoutShm: a command that closes the ledger (purge,
// backup) leaves it without its -wal and -shm: SQLite deletes both when
// the last connection closes. If the file system then fills up, SQLite
// cannot make the -shm again. A replay, which needs nothing written,
// still replays, alone or with others at once; inspect still reads; a new
// key is refused with 74 and runs nothing, and runs once space is freed.
func TestFullDiskReplayWithoutShm(t *testing.T) {
	idem := idemBin(t)
	for _, closer := range [][]string{{"purge", "job:absent-key"}, {"backup", "BACKUP"}} {
		t.Run(closer[0], func(t *testing.T) {
			dir := smallFS(t, "8m")
			path := filepath.Join(dir, "ledger.db")
			replay := clean(nil, idem, "--ledger", path, "run", "--key", "job:small", "--", "sh", "-c", `echo hello; exit 3`)
			if p := run(t, replay); p.code != 3 || p.stdout != "hello\n" {
				t.Fatalf("first run: %v", p)
			}
			args := append([]string{"--ledger", path}, closer...)
			if closer[1] == "BACKUP" {
				args[len(args)-1] = filepath.Join(t.TempDir(), "copy.db")
			}
			if p := run(t, clean(nil, idem, args...)); p.code != 0 {
				t.Fatalf("idem %s: %v", closer[0], p)
			}
			for _, f := range []string{"-wal", "-shm"} {
				if _, err := os.Stat(path + f); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("after idem %s, the ledger's %s: %v; want it gone (the case under test)", closer[0], f, err)
				}
			}
			fill(t, dir)
			for i := 1; i <= 2; i++ {
				if p := run(t, replay); p.code != 3 || p.stdout != "hello\n" ||
					!strings.HasPrefix(p.stderr, "idem: replayed job:small: failed ") || strings.Contains(p.stderr, "error") {
					t.Fatalf("replay %d on a full disk without a -shm: %v; want 3, hello and the replay's notice", i, p)
				}
			}
			// At once, each replay's connection takes the ledger's lock
			// alone (it has no -shm to share): none may wait out another.
			procs := make([]*process, 16)
			for i := range procs {
				procs[i] = start(t, replay)
			}
			for i, p := range procs {
				if p.wait(); p.code != 3 || p.stdout != "hello\n" || strings.Contains(p.stderr, "error") {
					t.Errorf("replay %d of %d at once on a full disk without a -shm: %v; want 3, hello and no error", i+1, len(procs), p)
				}
			}
			if p := run(t, clean(nil, idem, "--ledger", path, "inspect", "job:small")); p.code != 0 || !strings.Contains(p.stdout, "status:       failed") {
				t.Errorf("inspect on a full disk without a -shm: %v; want 0 and the record", p)
			}
			mark := filepath.Join(t.TempDir(), "ran")
			newKey := clean(nil, idem, "--ledger", path, "run", "--key", "job:new-key", "--", "sh", "-c", `: > "$1"`, "sh", mark)
			if p := run(t, newKey); p.code != 74 || !strings.Contains(p.stderr, "-shm") || !strings.Contains(p.stderr, "idem: hint: check free space") {
				t.Errorf("a new key on a full disk without a -shm: %v; want 74, the -shm named, a hint", p)
			}
			if _, err := os.Stat(mark); err == nil {
				t.Fatalf("a new key ran on a full disk, where its outcome could not be recorded")
			}
			if err := os.Remove(filepath.Join(dir, "filler")); err != nil {
				t.Fatal(err)
			}
			if p := run(t, newKey); p.code != 0 {
				t.Errorf("the new key once space is freed: %v; want 0", p)
			}
			if _, err := os.Stat(mark); err != nil {
				t.Errorf("the new key's command did not run once space was freed: %v", err)
			}
			if p := run(t, replay); p.code != 3 || p.stdout != "hello\n" {
				t.Errorf("a replay once space is freed: %v", p)
			}
		})
	}
}
