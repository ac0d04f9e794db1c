package sqlite_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/idemhq/idem/internal/ledger"
	"github.com/idemhq/idem/internal/ledger/ledgertest"
	"github.com/idemhq/idem/internal/ledger/sqlite"
)

func openSQLite(t *testing.T, path string) *sqlite.Ledger {
	t.Helper()
	l, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatalf("OpenSQLite(%q): %v", path, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func TestSQLiteConformance(t *testing.T) {
	ledgertest.Run(t, func(t *testing.T, now func() time.Time) ledger.Ledger {
		l := openSQLite(t, filepath.Join(t.TempDir(), "ledger.db"))
		l.Now = now
		return l
	})
}

func reserveNew(t *testing.T, l ledger.Ledger, key string) *ledger.Reservation {
	t.Helper()
	res, err := l.Reserve(context.Background(), ledger.ReserveRequest{Key: key, Fingerprint: "fp", Command: []string{"true"},
		MaxAttempts: 3, Owner: ledger.Owner{Host: "h", PID: os.Getpid()}, Lease: time.Minute})
	if err != nil {
		t.Fatalf("Reserve(%s): %v", key, err)
	}
	return res
}

func perm(t *testing.T, path string) fs.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

// TestSQLiteFileModes: the ledger holds command output, so its directory is
// 0700 and its files (with -wal and -shm) 0600 whatever the umask.
func TestSQLiteFileModes(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	dir := filepath.Join(t.TempDir(), "state", "idem")
	path := filepath.Join(dir, "ledger.db")
	l := openSQLite(t, path)
	reserveNew(t, l, "evt:modes-1")
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if got := perm(t, p); got != 0o600 {
			t.Errorf("%s: mode %#o, want 0600", filepath.Base(p), got)
		}
	}
	if got := perm(t, dir); got != 0o700 {
		t.Errorf("ledger directory: mode %#o, want 0700", got)
	}

	// An existing directory is left as it is.
	shared := filepath.Join(t.TempDir(), "shared")
	if err := os.Mkdir(shared, 0o755); err != nil {
		t.Fatal(err)
	}
	openSQLite(t, filepath.Join(shared, "ledger.db"))
	if got := perm(t, shared); got != 0o755 {
		t.Errorf("existing directory: mode %#o, want it left at 0755", got)
	}
}

// TestSQLitePathEscaping: characters that mean something in a URI must reach
// the file system as written, never as DSN parameters.
func TestSQLitePathEscaping(t *testing.T) {
	for _, name := range []string{
		"ledger?mode=ro.db",
		"led#ger.db",
		"100%25 sure.db",
		"with space.db",
		"a&_pragma=journal_mode(DELETE).db",
		"é.db",
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, name)
			l := openSQLite(t, path)
			res := reserveNew(t, l, "evt:escaping")
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(entries) != 1 || entries[0].Name() != name {
				var names []string
				for _, e := range entries {
					names = append(names, e.Name())
				}
				t.Fatalf("directory holds %q, want only %q", names, name)
			}
			l = openSQLite(t, path)
			rec, err := l.Get(context.Background(), "evt:escaping")
			if err != nil || rec.Token != res.Token {
				t.Fatalf("reopened: %+v, %v", rec, err)
			}
			if got := l.Describe(); got != path {
				t.Errorf("Describe() = %q, want %q", got, path)
			}
			var mode string
			db := rawDB(t, path)
			if err := db.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
				t.Errorf("journal_mode = %q, %v; want wal", mode, err)
			}
		})
	}
}

// rawDB opens a SQLite file directly, for setting up and inspecting files.
func rawDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	u := "file:" + strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(path)
	db, err := sql.Open("sqlite", u)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db
}

func execAll(t *testing.T, db *sql.DB, stmts ...string) {
	t.Helper()
	for _, s := range stmts {
		if _, err := db.Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

// TestSQLiteRefusesForeignFiles: a file that is not an idem ledger, or a
// ledger from a newer idem, is refused with a *StoreError and left byte for
// byte as it was.
func TestSQLiteRefusesForeignFiles(t *testing.T) {
	cases := []struct {
		name  string
		make  func(t *testing.T, path string)
		want  string
		hint  string
		notAt []string // files that must not appear
	}{
		{"garbage", func(t *testing.T, path string) {
			b := bytes.Repeat([]byte("this is not a database\n"), 300)
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}, "not an idem ledger", "idem ledger", []string{"-wal", "-shm", "-journal"}},
		{"foreign_sqlite", func(t *testing.T, path string) {
			db := rawDB(t, path)
			execAll(t, db, `CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)`, `INSERT INTO notes (body) VALUES ('keep me')`)
			db.Close()
		}, "not an idem ledger", "idem ledger", []string{"-wal", "-journal"}},
		{"foreign_sqlite_with_user_version", func(t *testing.T, path string) {
			db := rawDB(t, path)
			execAll(t, db, `PRAGMA user_version = 1`)
			db.Close()
		}, "not an idem ledger", "idem ledger", []string{"-wal", "-journal"}},
		{"foreign_sqlite_hot_journal", hotJournal(nil), "not an idem ledger", "idem ledger", []string{"-wal"}},
		{"foreign_sqlite_hot_journal_wal_header", hotJournal(func(b []byte) []byte {
			b[18], b[19] = 2, 2 // the header says WAL mode: SQLite rolls the journal back all the same
			return b
		}), "not an idem ledger", "idem ledger", []string{"-wal"}},
		{"foreign_short_file_hot_journal", hotJournal(func(b []byte) []byte { return b[:60] }),
			"not an idem ledger", "idem ledger", []string{"-wal"}},
		{"newer_idem", func(t *testing.T, path string) {
			l, err := sqlite.Open(context.Background(), path)
			if err != nil {
				t.Fatal(err)
			}
			reserveNew(t, l, "evt:from-the-future")
			l.Close()
			db := rawDB(t, path)
			execAll(t, db, fmt.Sprintf(`PRAGMA user_version = %d`, sqlite.SchemaVersion+1))
			db.Close()
		}, "newer idem", "upgrade idem", nil},
		{"newer_idem_incompatible", func(t *testing.T, path string) {
			l := openSQLite(t, path)
			reserveNew(t, l, "evt:from-the-future")
			l.Close()
			setUserVersion(t, path, ledger.SchemaVersions{Write: sqlite.SchemaVersion + 2, Compat: sqlite.SchemaVersion + 1})
		}, fmt.Sprintf("newer idem (schema v%d, compatible from v%d; this idem knows v%d)",
			sqlite.SchemaVersion+2, sqlite.SchemaVersion+1, sqlite.SchemaVersion), "upgrade idem", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ledger.db")
			tc.make(t, path)
			if err := os.Chmod(path, 0o644); err != nil {
				t.Fatal(err)
			}
			before, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			for _, readOnly := range []bool{false, false, true} {
				l, err := sqlite.OpenWith(context.Background(), path, ledger.Options{ReadOnly: readOnly})
				if err == nil {
					l.Close()
					t.Fatalf("OpenSQLite accepted the file")
				}
				var se *ledger.StoreError
				if !errors.As(err, &se) {
					t.Fatalf("error %T %v, want *StoreError", err, err)
				}
				if !strings.Contains(err.Error(), tc.want) || !strings.Contains(se.Hint, tc.hint) {
					t.Errorf("error %q hint %q, want %q and a hint with %q", err, se.Hint, tc.want, tc.hint)
				}
			}
			after, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(before, after) {
				t.Errorf("the refused file was altered")
			}
			if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o644 {
				t.Errorf("the refused file's mode changed: %v %v", fi.Mode(), err)
			}
			for _, suffix := range tc.notAt {
				if _, err := os.Stat(path + suffix); err == nil {
					t.Errorf("opening the refused file left %s", filepath.Base(path+suffix))
				}
			}
		})
	}
}

// hotJournal makes another program's database and its rollback journal
// as that program left them when it died in a transaction whose changes
// spilled to the file (SQLite rolls such a journal back into the file
// when it next opens it), the file's bytes passed through patch.
func hotJournal(patch func([]byte) []byte) func(t *testing.T, path string) {
	return func(t *testing.T, path string) {
		src := path + ".src"
		db := rawDB(t, src)
		execAll(t, db, `PRAGMA journal_mode = DELETE`, `PRAGMA cache_size = 5`, `CREATE TABLE t (x TEXT)`, `BEGIN`)
		for range 500 {
			execAll(t, db, `INSERT INTO t (x) VALUES (printf('%.200c', 'y'))`)
		}
		execAll(t, db, `COMMIT`, `BEGIN`, `UPDATE t SET x = printf('%.200c', 'z')`)
		for _, suffix := range []string{"", "-journal"} {
			b, err := os.ReadFile(src + suffix)
			if err != nil || len(b) == 0 {
				t.Fatalf("%s: %d bytes, %v", src+suffix, len(b), err)
			}
			if suffix == "" && patch != nil {
				b = patch(b)
			}
			if err := os.WriteFile(path+suffix, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		execAll(t, db, `ROLLBACK`)
		db.Close()
	}
}

func TestSQLiteRefusesDirectory(t *testing.T) {
	dir := t.TempDir()
	_, err := sqlite.Open(context.Background(), dir)
	var se *ledger.StoreError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), "directory") || se.Hint == "" {
		t.Fatalf("OpenSQLite(a directory) = %v, want a *StoreError about a directory, with a hint", err)
	}
}

// TestSQLiteEmptyFileIsInitialised: a zero-length file (created by another
// idem an instant earlier) becomes a ledger.
func TestSQLiteEmptyFileIsInitialised(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	l := openSQLite(t, path)
	reserveNew(t, l, "evt:empty-file")
	var v int64
	want := sqlite.EncodeVersions(ledger.SchemaVersions{Write: sqlite.SchemaVersion, Compat: sqlite.Migrations()[sqlite.SchemaVersion-1].Compat})
	if err := rawDB(t, path).QueryRow(`PRAGMA user_version`).Scan(&v); err != nil || v != want {
		t.Errorf("user_version = %#x, %v; want %#x", v, err, want)
	}
}

// TestSQLiteReopenKeepsStateAndTokens: records and the token counter
// survive closing the ledger.
func TestSQLiteReopenKeepsStateAndTokens(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	l := openSQLite(t, path)
	first := reserveNew(t, l, "evt:reopen-1")
	if err := l.Release(context.Background(), "evt:reopen-1", first.Token, first.AttemptID, nil); err != nil {
		t.Fatal(err)
	}
	l.Close()
	l = openSQLite(t, path)
	second := reserveNew(t, l, "evt:reopen-1")
	if second.Token <= first.Token {
		t.Errorf("token after reopen %d, want above %d", second.Token, first.Token)
	}
}

// TestSQLiteConcurrentOpen: several processes' worth of connections open a
// new ledger at once; exactly one initialises it, all work, and one of them
// wins a contested key.
func TestSQLiteConcurrentOpen(t *testing.T) {
	for round := range 5 {
		path := filepath.Join(t.TempDir(), fmt.Sprintf("race-%d", round), "ledger.db")
		const n = 6
		var (
			wg       sync.WaitGroup
			start    = make(chan struct{})
			errs     = make([]error, n)
			outcomes = make([]ledger.Outcome, n)
			ledgers  = make([]*sqlite.Ledger, n)
		)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				l, err := sqlite.Open(context.Background(), path)
				if err != nil {
					errs[i] = err
					return
				}
				ledgers[i] = l
				res, err := l.Reserve(context.Background(), ledger.ReserveRequest{Key: "evt:contested", Fingerprint: "fp",
					Command: []string{"x"}, MaxAttempts: 3, Owner: ledger.Owner{Host: "h", PID: 1000 + i}, Lease: time.Minute})
				if err != nil {
					errs[i] = err
					return
				}
				outcomes[i] = res.Outcome
			}()
		}
		close(start)
		wg.Wait()
		won := 0
		for i := range n {
			if ledgers[i] != nil {
				defer ledgers[i].Close()
			}
			if errs[i] != nil {
				t.Fatalf("round %d, opener %d: %v", round, i, errs[i])
			}
			if outcomes[i] == ledger.Reserved {
				won++
			} else if outcomes[i] != ledger.Busy {
				t.Errorf("round %d, opener %d: outcome %d", round, i, outcomes[i])
			}
		}
		if won != 1 {
			t.Errorf("round %d: %d openers reserved the key, want 1", round, won)
		}
		var tables int
		if err := rawDB(t, path).QueryRow(`SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'records'`).Scan(&tables); err != nil || tables != 1 {
			t.Errorf("round %d: records tables %d, %v", round, tables, err)
		}
	}
}

func walSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// TestSQLiteSetChildTrimsLongWAL: runs exit without closing the ledger, so
// the WAL only shrinks when a run trims it; a run does that while its command
// runs (at SetChild), not after its outcome, and a short WAL is left alone.
func TestSQLiteSetChildTrimsLongWAL(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	l := openSQLite(t, path)
	res := reserveNew(t, l, "job:first")
	if err := l.SetChild(ctx, "job:first", res.Token, 4242, 1); err != nil {
		t.Fatal(err)
	}
	if n := walSize(t, path); n == 0 {
		t.Fatalf("a short WAL was truncated")
	}
	// Reservations do not trim: grow the WAL well past 256 KiB.
	var last *ledger.Reservation
	var lastKey string
	for i := 0; walSize(t, path) < 512<<10; i++ {
		lastKey = fmt.Sprintf("job:grow-%04d", i)
		last = reserveNew(t, l, lastKey)
	}
	if err := l.SetChild(ctx, lastKey, last.Token, 4243, 1); err != nil {
		t.Fatal(err)
	}
	if n := walSize(t, path); n != 0 {
		t.Fatalf("WAL is %d bytes after SetChild, want it truncated", n)
	}
	// Nothing was lost: the trimmed frames are in the database file.
	if _, err := l.Get(ctx, "job:grow-0000"); err != nil {
		t.Fatal(err)
	}
}
