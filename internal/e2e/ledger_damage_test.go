package e2e

import (
	"bytes"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// rootPages returns the root page of every table and index of the SQLite
// file at path, by name.
func rootPages(t *testing.T, path string) map[string]int64 {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+uriPath(path)+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT name, rootpage FROM sqlite_schema WHERE rootpage > 0`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	pages := map[string]int64{}
	for rows.Next() {
		var name string
		var page int64
		if err := rows.Scan(&name, &page); err != nil {
			t.Fatal(err)
		}
		pages[name] = page
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return pages
}

func fileSum(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// damageSetup gives the damage tests idem, a directory, the command's
// working directory in it, and the job they run: it creates the file
// "ran" there and prints "out".
func damageSetup(t *testing.T) (idem, dir, work string, job func(ledger, key string) command) {
	t.Helper()
	busy(t)
	idem = idemBin(t)
	dir = t.TempDir()
	work = filepath.Join(dir, "work")
	if err := os.Mkdir(work, 0o700); err != nil {
		t.Fatal(err)
	}
	return idem, dir, work, func(ledger, key string) command {
		c := clean(nil, idem, "--ledger", ledger, "run", "--key", key, "--", "sh", "-c", `: > ran; echo out`)
		c.dir = work
		return c
	}
}

// TestDamagedLedgerRefused: random bytes over the root page of any table
// or index of a compacted ledger (after purge --vacuum, so every table is
// in the file, none in a -wal): a run of a recorded key and one of a new
// key both exit 74 saying the ledger is corrupt, nothing runs, and the
// file is left byte for byte; idem check reports the damage (74) and what
// to do, and passes the undamaged ledger (0).
func TestDamagedLedgerRefused(t *testing.T) {
	idem, dir, work, job := damageSetup(t)
	clean0 := filepath.Join(dir, "clean.db")
	for _, k := range []string{"job:recorded-1", "job:recorded-2", "job:recorded-3"} {
		if p := run(t, job(clean0, k)); p.code != 0 {
			t.Fatalf("recording %s: %v", k, p)
		}
	}
	if p := run(t, clean(nil, idem, "--ledger", clean0, "purge", "--older-than", "1000h", "--vacuum")); p.code != 0 {
		t.Fatalf("purge --vacuum: %v", p)
	}
	if p := run(t, clean(nil, idem, "--ledger", clean0, "check")); p.code != 0 || !strings.Contains(p.stdout, ": ok (") {
		t.Fatalf("check of the undamaged ledger: %v; want 0 and ok", p)
	}
	pristine, err := os.ReadFile(clean0)
	if err != nil {
		t.Fatal(err)
	}
	pages := rootPages(t, clean0)
	for _, name := range []string{"counters", "totals", "token_mark", "records", "attempts", "outputs"} {
		if pages[name] == 0 {
			t.Fatalf("no root page for %s among %v", name, pages)
		}
	}
	rng := rand.New(rand.NewPCG(32, 9))
	const pageSize = 4096
	for name, page := range pages {
		path := filepath.Join(dir, name+".db")
		b := bytes.Clone(pristine)
		for i := (page - 1) * pageSize; i < page*pageSize; i++ {
			b[i] = byte(rng.Uint32())
		}
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		sum := fileSum(t, path)
		for _, key := range []string{"job:recorded-1", "job:new-key"} {
			os.Remove(filepath.Join(work, "ran"))
			p := run(t, job(path, key))
			if p.code != 74 || !strings.Contains(p.stderr, "corrupt") || p.stdout != "" {
				t.Errorf("%s damaged, run of %s: %v; want 74, corrupt, no output", name, key, p)
			}
			if _, err := os.Stat(filepath.Join(work, "ran")); err == nil {
				t.Errorf("%s damaged, run of %s: the command ran", name, key)
			}
			if fileSum(t, path) != sum {
				t.Errorf("%s damaged, run of %s: the ledger file changed", name, key)
			}
			if fi, err := os.Stat(path + "-wal"); err == nil && fi.Size() > 0 {
				t.Errorf("%s damaged, run of %s: %d bytes written to the -wal", name, key, fi.Size())
			}
		}
		p := run(t, clean(nil, idem, "--ledger", path, "check"))
		if p.code != 74 || !strings.Contains(p.stderr, "idem: error: ledger "+path+": check: the database is damaged") ||
			!strings.Contains(p.stderr, "idem: hint: stop every idem that uses it, then restore it from a backup") {
			t.Errorf("%s damaged, check: %v; want 74, damaged, and how to recover", name, p)
		}
		if !strings.Contains(p.stdout, fmt.Sprintf(" %d: ", page)) && !strings.Contains(p.stdout, fmt.Sprintf("page %d ", page)) {
			t.Errorf("%s damaged, check: %v; want the problems it found, page %d among them, one a line", name, p, page)
		}
		if fileSum(t, path) != sum {
			t.Errorf("%s damaged: check changed the ledger file", name)
		}
	}
}

// TestDamagedOutputLeafRefused: random bytes over every leaf of the
// outputs table's key index but the rightmost, whose path the open's page
// check reads. An output goes at its key's own place in that index, so a
// run of a new key, and a re-run of a failed one (--rerun-failed), whose
// place is in a damaged leaf must be refused before the command runs (74,
// corrupt, the file byte for byte): found only by the outcome's write,
// the command would run, fail to be recorded, and run again at every run
// after.
func TestDamagedOutputLeafRefused(t *testing.T) {
	idem, dir, work, job := damageSetup(t)
	ledger := filepath.Join(dir, "ledger.db")
	// A failed key with output, before every other key: in the first leaf.
	failedJob := []string{"sh", "-c", `: > ran; echo out; exit 3`}
	failed := clean(nil, idem, append([]string{"--ledger", ledger, "run", "--key", "job:aaa-old", "--"}, failedJob...)...)
	failed.dir = work
	if p := run(t, failed); p.code != 3 {
		t.Fatalf("recording job:aaa-old: %v", p)
	}
	for i := range 300 {
		if p := run(t, job(ledger, fmt.Sprintf("job:recorded-with-a-longer-name-%04d", i))); p.code != 0 {
			t.Fatalf("recording key %d: %v", i, p)
		}
	}
	if p := run(t, clean(nil, idem, "--ledger", ledger, "purge", "--older-than", "1000h", "--vacuum")); p.code != 0 {
		t.Fatalf("purge --vacuum: %v", p)
	}
	db, err := sql.Open("sqlite", "file:"+uriPath(ledger)+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	var leaves []int64
	rows, err := db.Query(`SELECT pageno FROM dbstat WHERE name = 'sqlite_autoindex_outputs_1' AND pagetype = 'leaf' ORDER BY path`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var page int64
		if err := rows.Scan(&page); err != nil {
			t.Fatal(err)
		}
		leaves = append(leaves, page)
	}
	if err := errors.Join(rows.Err(), rows.Close(), db.Close()); err != nil {
		t.Fatal(err)
	}
	if len(leaves) < 2 {
		t.Fatalf("the outputs key index has %d leaves; want 2 or more", len(leaves))
	}
	b, err := os.ReadFile(ledger)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 59))
	const pageSize = 4096
	for _, page := range leaves[:len(leaves)-1] {
		for i := (page - 1) * pageSize; i < page*pageSize; i++ {
			b[i] = byte(rng.Uint32())
		}
	}
	damaged := filepath.Join(dir, "damaged.db")
	if err := os.WriteFile(damaged, b, 0o600); err != nil {
		t.Fatal(err)
	}
	sum := fileSum(t, damaged)
	rerun := clean(nil, idem, append([]string{"--ledger", damaged, "run", "--rerun-failed", "--key", "job:aaa-old", "--"}, failedJob...)...)
	rerun.dir = work
	// "job:aaa-new" and "job:aaa-old" go before every recorded key: into
	// the first leaf.
	for what, c := range map[string]command{"a new key": job(damaged, "job:aaa-new"), "a failed key re-run": rerun} {
		os.Remove(filepath.Join(work, "ran"))
		p := run(t, c)
		if p.code != 74 || !strings.Contains(p.stderr, "corrupt") || p.stdout != "" {
			t.Errorf("%s whose output's place is damaged: %v; want 74, corrupt, no output", what, p)
		}
		if _, err := os.Stat(filepath.Join(work, "ran")); err == nil {
			t.Errorf("%s whose output's place is damaged: the command ran", what)
		}
		if fileSum(t, damaged) != sum {
			t.Errorf("%s whose output's place is damaged: the ledger file changed", what)
		}
	}
}

// TestCheckEscapesNames: idem check prints what SQLite's integrity_check
// says, which names the file's own tables and indexes; a ledger someone
// else made can name one with a terminal's escape sequences, which reach
// the terminal as text, not as commands.
func TestCheckEscapesNames(t *testing.T) {
	idem, dir, _, job := damageSetup(t)
	path := filepath.Join(dir, "named.db")
	if p := run(t, job(path, "job:recorded-1")); p.code != 0 {
		t.Fatalf("recording: %v", p)
	}
	if p := run(t, clean(nil, idem, "--ledger", path, "backup", path+".compact")); p.code != 0 {
		t.Fatalf("backup: %v", p)
	}
	path += ".compact" // every page in the file, none in a -wal
	// A newline and a fake verdict, a terminal's title and colour, a
	// bidirectional override.
	const evil = "evil\n/x.db: ok (9 pages checked)\n\x1b]0;owned\x07\x1b[31m\u202e"
	db, err := sql.Open("sqlite", "file:"+uriPath(path))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE INDEX "` + evil + `" ON records(updated_ms)`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	page := rootPages(t, path)[evil]
	b, err := os.ReadFile(path)
	if err != nil || page == 0 {
		t.Fatalf("root page of the index: %d, %v", page, err)
	}
	// An empty leaf of an index: the table's rows are missing from it.
	copy(b[(page-1)*4096:], []byte{0x0a, 0, 0, 0, 0, 0x10, 0, 0})
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	p := run(t, clean(nil, idem, "--ledger", path, "check"))
	want := `wrong # of entries in index evil\x0a/x.db: ok (9 pages checked)\x0a\x1b]0;owned\x07\x1b[31m\u202e`
	if p.code != 74 || !strings.Contains(p.stdout, want+"\n") {
		t.Fatalf("check: %v; want 74 and the index's name escaped", p)
	}
	if strings.ContainsAny(p.stdout+p.stderr, "\x1b\x07\u202e") || strings.Contains(p.stdout, "\n/x.db: ok") {
		t.Fatalf("check wrote control characters, or a line of the index's name: %q", p.stdout)
	}
}
