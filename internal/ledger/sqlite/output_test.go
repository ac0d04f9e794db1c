package sqlite_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/ledger"
	"github.com/idemhq/idem/internal/ledger/sqlite"
)

// writtenBytes is this process's wchar in /proc/self/io: the bytes it
// has handed to write(2) and pwrite(2) so far, to any file.
func writtenBytes(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		t.Fatalf("this test reads /proc/self/io: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "wchar: "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no wchar in /proc/self/io: %q", b)
	return 0
}

func finishWith(t *testing.T, l ledger.Ledger, key string, stdout, stderr []byte) {
	t.Helper()
	res := reserveNew(t, l, key)
	if err := l.Finish(context.Background(), ledger.FinishRequest{Key: key, Token: res.Token, AttemptID: res.AttemptID,
		Status: ledger.StatusSucceeded, ExitSource: "child", Class: ledger.ClassSuccess, OutputStored: true,
		Stdout: stdout, Stderr: stderr}); err != nil {
		t.Fatalf("Finish(%s): %v", key, err)
	}
}

// TestSQLiteReplayWritesLittle: a replay of a 1 MB output writes a few
// pages (its counter), not the output again. The bytes are the process's
// own count of what it wrote (wchar), over the replay alone, in a fresh
// open as a replaying idem makes it.
func TestSQLiteReplayWritesLittle(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	out := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	l := openSQLite(t, path)
	finishWith(t, l, "evt:big", out, []byte("err"))
	l.Close()

	for i := 1; i <= 3; i++ {
		l := openSQLite(t, path)
		before := writtenBytes(t)
		res, err := l.Reserve(ctx, ledger.ReserveRequest{Key: "evt:big", Fingerprint: "fp", Command: []string{"true"},
			MaxAttempts: 3, Owner: ledger.Owner{Host: "h", PID: os.Getpid()}, Lease: time.Minute})
		wrote := writtenBytes(t) - before
		if err != nil || res.Outcome != ledger.Replay {
			t.Fatalf("replay %d: %+v, %v", i, res, err)
		}
		if !bytes.Equal(res.Record.Stdout, out) || string(res.Record.Stderr) != "err" {
			t.Fatalf("replay %d: %d bytes of stdout, stderr %q; want the recorded 1 MiB and \"err\"", i, len(res.Record.Stdout), res.Record.Stderr)
		}
		if res.Record.Replays != int64(i) {
			t.Errorf("replay %d: the record counts %d replays", i, res.Record.Replays)
		}
		t.Logf("replay %d of a 1 MiB output wrote %d bytes", i, wrote)
		if wrote >= 64<<10 {
			t.Errorf("replay %d of a 1 MiB output wrote %d bytes, want under 64 KiB", i, wrote)
		}
		l.CloseAtExit()
		l.Close()
	}
	if r, err := openSQLite(t, path).Get(ctx, "evt:big"); err != nil || r.Replays != 3 || !bytes.Equal(r.Stdout, out) {
		t.Fatalf("after three replays: %v; want 3 replays and the output", err)
	}
}

// TestSQLiteMigratesOutputsApart: output recorded by an idem that kept it
// in the records row (schema v3) is moved to the outputs table by the
// migration, and reads as it was, as do empty and --no-output records.
func TestSQLiteMigratesOutputsApart(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	v3 := sqlite.Migrations()[:3]
	old, err := sqlite.OpenMigrations(ctx, path, ledger.Options{}, v3)
	if err != nil {
		t.Fatal(err)
	}
	old.Close()
	db := rawDB(t, path)
	now := time.Now().UnixMilli()
	for _, r := range []struct {
		key            string
		stored         int
		stdout, stderr any
	}{{"evt:out", 1, []byte("hello\n"), []byte("warn\n")}, {"evt:empty", 1, []byte{}, []byte{}}, {"evt:none", 0, nil, nil}} {
		if _, err := db.Exec(`INSERT INTO records (key, fingerprint, command, status, attempts, max_attempts, exit_code, token,
			created_ms, started_ms, updated_ms, finished_ms, output_stored, stdout, stderr)
			VALUES (?, 'fp', '["true"]', 'succeeded', 1, 3, 0, 1, ?, ?, ?, ?, ?, ?, ?)`,
			r.key, now, now, now, now, r.stored, r.stdout, r.stderr); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()

	l := openSQLite(t, path)
	for key, want := range map[string][2]string{"evt:out": {"hello\n", "warn\n"}, "evt:empty": {"", ""}, "evt:none": {"", ""}} {
		r, err := l.Get(ctx, key)
		if err != nil || string(r.Stdout) != want[0] || string(r.Stderr) != want[1] {
			t.Fatalf("Get(%s) after the migration: %+v, %v", key, r, err)
		}
		if r.OutputStored != (key != "evt:none") {
			t.Errorf("Get(%s): OutputStored %v", key, r.OutputStored)
		}
	}
	if n := count(t, path, `SELECT count(*) FROM records WHERE stdout IS NOT NULL OR stderr IS NOT NULL`); n != 0 {
		t.Errorf("%d records still hold output in their row", n)
	}
	if n := count(t, path, `SELECT count(*) FROM outputs`); n != 1 {
		t.Errorf("%d outputs rows, want 1 (only the non-empty output)", n)
	}
}
