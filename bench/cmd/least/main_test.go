//go:build linux

package main

import (
	"bytes"
	"database/sql"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// leastBin builds least into a temporary directory.
func leastBin(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "least")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

type result struct {
	code           int
	stdout, stderr string
}

func runLeast(t *testing.T, bin, dir string, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	c := exec.Command(bin, args...)
	c.Dir, c.Stdout, c.Stderr = dir, &out, &errOut
	err := c.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return result{c.ProcessState.ExitCode(), out.String(), errOut.String()}
}

// The bound is only a bound if least does the work it claims: a run
// records what a replay needs, and a replay gives back the same output
// and exit code, and is counted.
func TestRunAndReplay(t *testing.T) {
	bin := leastBin(t)
	for _, checks := range []bool{false, true} {
		dir := t.TempDir()
		args := []string{"ledger.db", "job:one", "sh", "-c", `readlink /proc/$$/fd/3 > fd3; echo "out $IDEM_KEY $IDEM_TOKEN"; echo err >&2; : > ran; exit 3`}
		if checks {
			args = append([]string{"--checks"}, args...)
		}
		first := runLeast(t, bin, dir, args...)
		if first.code != 3 || first.stdout != "out job:one 1\n" || first.stderr != "err\n" {
			t.Fatalf("checks %v: first run: %+v; want 3, its key and token, err", checks, first)
		}
		// With checks, the command holds the run lock as fd 3.
		fd3, _ := os.ReadFile(filepath.Join(dir, "fd3"))
		if lock := filepath.Join(dir, "ledger.db.runlock") + "\n"; checks != (string(fd3) == lock) {
			t.Fatalf("checks %v: the command's fd 3 is %q", checks, fd3)
		}
		os.Remove(filepath.Join(dir, "ran"))
		again := runLeast(t, bin, dir, args...)
		if again.code != 3 || again.stdout != first.stdout || !strings.HasPrefix(again.stderr, "err\nleast: replayed job:one") {
			t.Fatalf("checks %v: replay: %+v; want 3 and the first run's output", checks, again)
		}
		if _, err := os.Stat(filepath.Join(dir, "ran")); err == nil {
			t.Fatalf("checks %v: the replay ran the command", checks)
		}
		db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "ledger.db")+"?mode=ro")
		if err != nil {
			t.Fatal(err)
		}
		var replays, lease int64
		var history string
		err = db.QueryRow(`SELECT replays, lease_expires_ms, history FROM records WHERE key = 'job:one'`).
			Scan(&replays, &lease, &history)
		db.Close()
		if err != nil || replays != 1 || lease != 0 || !strings.HasSuffix(history, " 3 failed;") {
			t.Fatalf("checks %v: record: replays %d, lease %d, history %q, %v", checks, replays, lease, history, err)
		}
		// Another command under the key is refused, as idem refuses it.
		other := runLeast(t, bin, dir, append(args[:len(args)-1:len(args)-1], "exit 0")...)
		if other.code != 65 {
			t.Fatalf("checks %v: another command under the key: %+v; want 65", checks, other)
		}
	}
}

// With --checks, least refuses a ledger whose outputs table is damaged
// (which a fresh run writes only after its command) and a -wal that
// another database wrote, before running anything.
func TestChecksRefuse(t *testing.T) {
	bin := leastBin(t)
	dir := t.TempDir()
	ledger := filepath.Join(dir, "ledger.db")
	if r := runLeast(t, bin, dir, "--checks", ledger, "job:one", "true"); r.code != 0 {
		t.Fatalf("first run: %+v", r)
	}
	// Checkpoint the -wal into the file, so that the page is damaged
	// where SQLite reads it.
	db, err := sql.Open("sqlite", "file:"+ledger)
	if err != nil {
		t.Fatal(err)
	}
	var page int64
	if err := db.QueryRow(`SELECT rootpage FROM sqlite_schema WHERE name = 'outputs'`).Scan(&page); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	b, err := os.ReadFile(ledger)
	if err != nil {
		t.Fatal(err)
	}
	for i := (page - 1) * 4096; i < page*4096; i++ {
		b[i] = byte(i * 7)
	}
	damaged := filepath.Join(dir, "damaged.db")
	if err := os.WriteFile(damaged, b, 0o600); err != nil {
		t.Fatal(err)
	}
	r := runLeast(t, bin, dir, "--checks", damaged, "job:two", "sh", "-c", ": > ran")
	if _, err := os.Stat(filepath.Join(dir, "ran")); r.code == 0 || err == nil {
		t.Fatalf("damaged outputs page: %+v (ran: %v); want a refusal before the command", r, err == nil)
	}

	// Another database's -wal, copied beside the ledger.
	other := filepath.Join(dir, "other.db")
	odb, err := sql.Open("sqlite", "file:"+other+"?_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := odb.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`PRAGMA wal_autocheckpoint = 0`, `PRAGMA application_id = 77`, `CREATE TABLE t (x)`} {
		if _, err := conn.ExecContext(t.Context(), q); err != nil {
			t.Fatal(err)
		}
	}
	wal, err := os.ReadFile(other + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ledger+"-wal", wal, 0o600); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	odb.Close()
	r = runLeast(t, bin, dir, "--checks", ledger, "job:three", "sh", "-c", ": > ran")
	if _, err := os.Stat(filepath.Join(dir, "ran")); r.code == 0 || err == nil || !strings.Contains(r.stderr, "another database's") {
		t.Fatalf("foreign -wal: %+v (ran: %v); want a refusal before the command", r, err == nil)
	}
}

// Each ledger has its identity from its first run on, so another least
// ledger's -wal is refused too; and a -wal bound to another file is.
func TestChecksRefuseAnotherLedgersWAL(t *testing.T) {
	bin := leastBin(t)
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.db"), filepath.Join(dir, "b.db")
	for _, ledger := range []string{a, b} {
		if r := runLeast(t, bin, dir, "--checks", ledger, "job:one", "true"); r.code != 0 {
			t.Fatalf("first run of %s: %+v", ledger, r)
		}
	}
	wal, err := os.ReadFile(b + "-wal")
	if err != nil || len(wal) == 0 {
		t.Fatalf("b's -wal: %d bytes, %v", len(wal), err)
	}
	if err := os.WriteFile(a+"-wal", wal, 0o600); err != nil {
		t.Fatal(err)
	}
	r := runLeast(t, bin, dir, "--checks", a, "job:two", "sh", "-c", ": > ran")
	if _, err := os.Stat(filepath.Join(dir, "ran")); r.code == 0 || err == nil || !strings.Contains(r.stderr, "another database's") {
		t.Fatalf("b's -wal beside a: %+v (ran: %v); want a refusal before the command", r, err == nil)
	}

	if err := unix.Setxattr(b+"-wal", bindAttr, []byte("1:2"), 0); err != nil {
		t.Fatal(err)
	}
	r = runLeast(t, bin, dir, "--checks", b, "job:two", "sh", "-c", ": > ran")
	if _, err := os.Stat(filepath.Join(dir, "ran")); r.code == 0 || err == nil || !strings.Contains(r.stderr, "bound to another file") {
		t.Fatalf("b's -wal bound elsewhere: %+v (ran: %v); want a refusal before the command", r, err == nil)
	}
}
