package e2e

// The reliability suite: bad ledgers, permissions, hostile input, injected
// I/O faults (faults_test.go) and crash points (crash_test.go). Each test
// drives real idem processes against real SQLite files and checks
// invariants afterwards. `go test` runs short versions (-short skips the
// fault and crash tests); IDEM_RELIABILITY=long (scripts/reliability.sh)
// runs the long ones, and
// IDEM_RELIABILITY_STATS=FILE makes every test append one line of figures
// (faults, crashes, inputs, violations) to FILE for the script's summary.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"

	_ "modernc.org/sqlite" // the "sqlite" driver, to read ledgers behind idem's back

	"github.com/idemhq/idem/cmd"
	"github.com/idemhq/idem/internal/ledger/sqlite"
)

func longRun() bool { return os.Getenv("IDEM_RELIABILITY") == "long" }

// stats counts what one test did; flushed to IDEM_RELIABILITY_STATS.
type stats struct {
	mu                                 sync.Mutex
	faults, crashes, inputs, violation int
}

func newStats(t *testing.T) *stats {
	s := &stats{}
	t.Cleanup(func() {
		path := os.Getenv("IDEM_RELIABILITY_STATS")
		if path == "" {
			return
		}
		f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			t.Errorf("stats: %v", err)
			return
		}
		defer f.Close()
		fmt.Fprintf(f, "%s faults=%d crashes=%d inputs=%d violations=%d\n", t.Name(), s.faults, s.crashes, s.inputs, s.violation)
	})
	return s
}

// violate reports a broken invariant.
func (s *stats) violate(t *testing.T, format string, args ...any) {
	t.Helper()
	s.mu.Lock()
	s.violation++
	s.mu.Unlock()
	t.Errorf("VIOLATION: "+format, args...)
}

func (s *stats) add(faults, crashes, inputs int) {
	s.mu.Lock()
	s.faults += faults
	s.crashes += crashes
	s.inputs += inputs
	s.mu.Unlock()
}

// sharedDir is a scratch directory every user can reach (nobody cannot
// enter t.TempDir()), removed after the test.
func sharedDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "idem-rel-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// copyExe copies the executable at src into dir, mode 0755.
func copyExe(t *testing.T, src, dir string) string {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, filepath.Base(src))
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return dst
}

func mkdir(t *testing.T, path string, mode os.FileMode) string {
	t.Helper()
	if err := os.MkdirAll(path, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
	return path
}

// errorLines checks idem's error contract: one "idem: error:" line, at most
// one "idem: hint:" line after it, nothing else (no stack trace, no raw
// multi-line driver text). It returns the error line.
func errorLines(t *testing.T, s *stats, p *process) string {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(p.stderr, "\n"), "\n")
	ok := len(lines) >= 1 && len(lines) <= 2 && strings.HasPrefix(lines[0], "idem: error: ") &&
		(len(lines) == 1 || strings.HasPrefix(lines[1], "idem: hint: "))
	if !ok {
		s.violate(t, "stderr is not one error line and at most one hint:\n%s", p.stderr)
		return ""
	}
	return lines[0]
}

// digest is a file's content hash, or "absent"/"dir".
func digest(t *testing.T, path string) string {
	t.Helper()
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "absent"
	case err != nil:
		t.Fatal(err)
	case fi.IsDir():
		return "dir"
	case !fi.Mode().IsRegular():
		return fi.Mode().Type().String()
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", sha256.Sum256(b))
}

// checkRefused checks a run on a ledger idem must refuse: exit 74, one
// error line matching want, the command never ran (marks), and the
// ledger's directory is as listed before.
func checkRefused(t *testing.T, s *stats, p *process, want, marks, dir, before string) {
	t.Helper()
	s.add(0, 0, 1)
	if p.code != 74 {
		s.violate(t, "exit %d, want 74\n%v", p.code, p)
	}
	line := errorLines(t, s, p)
	if line != "" && !regexp.MustCompile(want).MatchString(line) {
		t.Errorf("error line %q does not match %q", line, want)
	}
	t.Log(p.stderr)
	if n := lines(t, marks); n != 0 {
		s.violate(t, "the command ran %d times on a ledger idem refused", n)
	}
	if after := listing(t, dir); after != before {
		s.violate(t, "the ledger's directory changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// listing is the names in dir with their content digests.
func listing(t *testing.T, dir string) string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name()+"="+digest(t, filepath.Join(dir, e.Name())))
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

// openDB opens a SQLite file directly (idem must not be running on it).
func openDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+uriPath(path)+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	return db
}

func uriPath(p string) string {
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c == '/' || c == '-' || c == '_' || c == '.' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

func execSQL(t *testing.T, path string, stmts ...string) {
	t.Helper()
	db := openDB(t, path)
	defer db.Close()
	for _, s := range stmts {
		if _, err := db.Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

// integrity runs PRAGMA integrity_check and returns its verdict.
func integrity(t *testing.T, path string) string {
	t.Helper()
	db := openDB(t, path)
	defer db.Close()
	var res []string
	rows, err := db.Query(`PRAGMA integrity_check`)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	for rows.Next() {
		var s string
		rows.Scan(&s)
		res = append(res, s)
	}
	if err := rows.Err(); err != nil {
		return err.Error()
	}
	return strings.Join(res, "; ")
}

// keyState is a key's status in the ledger ("absent" when there is no row)
// and its attempts.
func keyState(t *testing.T, path, key string) (status string, attempts int) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		return "absent", 0 // no ledger yet (and do not create one)
	}
	db := openDB(t, path)
	defer db.Close()
	err := db.QueryRow(`SELECT status, attempts FROM records WHERE key = ?`, key).Scan(&status, &attempts)
	if errors.Is(err, sql.ErrNoRows) || err != nil && strings.Contains(err.Error(), "no such table: records") {
		return "absent", 0 // (a ledger created, not yet initialised)
	}
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	return status, attempts
}

// lines counts the lines of a marker file (one per execution).
func lines(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Count(b, []byte("\n"))
}

// markCmd is a command whose every execution appends one line to marks.
func markCmd(marks string) []string {
	return []string{"/bin/sh", "-c", `echo ran >> "$1"; echo out`, "sh", marks}
}

// newLedger makes a real idem ledger holding a few records.
func newLedger(t *testing.T, idem, path string) {
	t.Helper()
	for i, code := range []string{"0", "3", "0"} {
		p := run(t, clean(nil, idem, "--ledger", path, "run", "--key", fmt.Sprintf("seed:key-%d", i),
			"--success-codes", "0", "--", "/bin/sh", "-c", "echo seeded; exit "+code))
		if p.signal != 0 || p.code != map[string]int{"0": 0, "3": 3}[code] {
			t.Fatalf("seeding %s: %v", path, p)
		}
	}
	// idem leaves its writes in the WAL; fold them into the file, so that
	// a copy of the file alone is the whole ledger.
	execSQL(t, path, `PRAGMA wal_checkpoint(TRUNCATE)`)
}

// TestBadLedgers: a ledger idem cannot use is refused with exit 74 and one
// clear error line, nothing runs, and the file (and its directory) are left
// byte for byte as they were.
func TestBadLedgers(t *testing.T) {
	s := newStats(t)
	idem := idemBin(t)
	good := filepath.Join(t.TempDir(), "good.db")
	newLedger(t, idem, good)
	goodBytes, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 5))
	garbage := make([]byte, 10000)
	for i := range garbage {
		garbage[i] = byte(rng.Uint32())
	}
	write := func(b []byte, mode os.FileMode) func(t *testing.T, path string) {
		return func(t *testing.T, path string) {
			if err := os.WriteFile(path, b, mode); err != nil {
				t.Fatal(err)
			}
		}
	}
	cases := []struct {
		name  string
		setup func(t *testing.T, path string)
		want  string // regexp of the error line
	}{
		{"garbage", write(garbage, 0o600), `not an idem ledger`},
		{"garbage_after_sqlite_magic", write(append([]byte("SQLite format 3\x00"), garbage...), 0o600), `not an idem ledger|corrupt`},
		{"text_file", write([]byte("backup:2026-12-01 done\n"), 0o600), `not an idem ledger`},
		{"truncated_header", write(goodBytes[:50], 0o600), `corrupt|not an idem ledger`},
		{"truncated_first_page", write(goodBytes[:4096], 0o600), `corrupt`},
		{"truncated_half", write(goodBytes[:len(goodBytes)/2], 0o600), `corrupt`},
		{"truncated_last_byte", write(goodBytes[:len(goodBytes)-1], 0o600), `corrupt`},
		{"newer_schema", func(t *testing.T, path string) {
			write(goodBytes, 0o600)(t, path)
			execSQL(t, path, fmt.Sprintf(`PRAGMA user_version = %d`, sqlite.SchemaVersion+1))
		}, fmt.Sprintf(`written by a newer idem \(schema v%d; this idem knows v%d\)`, sqlite.SchemaVersion+1, sqlite.SchemaVersion)},
		{"foreign_sqlite", func(t *testing.T, path string) {
			execSQL(t, path, `CREATE TABLE notes (body TEXT)`, `INSERT INTO notes VALUES ('mine')`)
			os.Chmod(path, 0o600)
		}, `not an idem ledger`},
		{"foreign_sqlite_wal", func(t *testing.T, path string) {
			execSQL(t, path, `PRAGMA journal_mode = WAL`, `CREATE TABLE notes (body TEXT)`, `INSERT INTO notes VALUES ('mine')`)
			os.Chmod(path, 0o600)
		}, `not an idem ledger`},
		{"foreign_application_id", func(t *testing.T, path string) {
			execSQL(t, path, `PRAGMA application_id = 1234`)
			os.Chmod(path, 0o600)
		}, `not an idem ledger`},
		{"directory", func(t *testing.T, path string) { mkdir(t, path, 0o700) }, `is a directory`},
		{"fifo", func(t *testing.T, path string) {
			if err := syscall.Mkfifo(path, 0o600); err != nil {
				t.Fatal(err)
			}
		}, `is a named pipe, not a regular file`},
		{"dangling_symlink", func(t *testing.T, path string) {
			if err := os.Symlink("elsewhere.db", path); err != nil {
				t.Fatal(err)
			}
		}, `symbolic link to a missing file`},
		{"symlink_to_another_users_ledger", func(t *testing.T, path string) {
			target := filepath.Join(filepath.Dir(path), "theirs.db")
			write(goodBytes, 0o600)(t, target)
			if err := os.Chown(target, nobody, nobody); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("theirs.db", path); err != nil {
				t.Fatal(err)
			}
		}, `symbolic link to a file owned by another user \(uid 65534\)`},
		{"symlink_to_another_users_empty_file", func(t *testing.T, path string) {
			target := filepath.Join(filepath.Dir(path), "theirs")
			write(nil, 0o644)(t, target)
			if err := os.Chown(target, nobody, nobody); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, path); err != nil {
				t.Fatal(err)
			}
		}, `symbolic link to a file owned by another user`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "ledger.db")
			c.setup(t, path)
			before := listing(t, dir)
			marks := filepath.Join(t.TempDir(), "marks")
			p := run(t, clean(nil, idem, append([]string{"--ledger", path, "run", "--key", "job:bad-ledger"}, markCmd(marks)...)...))
			checkRefused(t, s, p, c.want, marks, dir, before)
		})
	}
}

// TestReadOnlyLedgers: as an unprivileged user (nobody), a ledger idem may
// not create, open or write is refused with exit 74 and one clear line;
// nothing runs and nothing changes.
func TestReadOnlyLedgers(t *testing.T) {
	s := newStats(t)
	root := sharedDir(t)
	idem := copyExe(t, idemBin(t), mkdir(t, filepath.Join(root, "bin"), 0o755))
	good := filepath.Join(t.TempDir(), "good.db")
	newLedger(t, idemBin(t), good)
	goodBytes, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	place := func(path string, uid int, mode os.FileMode) {
		if err := os.WriteFile(path, goodBytes, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(path, uid, uid); err != nil {
			t.Fatal(err)
		}
		os.Chmod(path, mode)
	}
	cases := []struct {
		name  string
		setup func(dir string) (ledger string)
		want  string
	}{
		{"new_ledger_in_a_directory_nobody_cannot_write", func(dir string) string {
			return filepath.Join(dir, "ledger.db")
		}, `create: .*permission denied`},
		{"new_directory_under_one_nobody_cannot_write", func(dir string) string {
			return filepath.Join(dir, "state", "ledger.db")
		}, `open: directory \S+ does not exist`},
		{"own_ledger_in_a_directory_nobody_cannot_write", func(dir string) string {
			p := filepath.Join(dir, "ledger.db")
			place(p, nobody, 0o600)
			return p
		}, `cannot create the ledger's -wal and -shm files: its directory is not writable`},
		{"another_users_ledger", func(dir string) string {
			os.Chmod(dir, 0o777)
			p := filepath.Join(dir, "ledger.db")
			place(p, 0, 0o600)
			return p
		}, `cannot read and write it: permission denied`},
		{"own_read_only_ledger", func(dir string) string {
			os.Chmod(dir, 0o777)
			p := filepath.Join(dir, "ledger.db")
			place(p, nobody, 0o400)
			return p
		}, `cannot read and write it: permission denied`},
		{"own_ledger_in_own_read_only_directory", func(dir string) string {
			p := filepath.Join(dir, "ledger.db")
			place(p, nobody, 0o600)
			os.Chown(dir, nobody, nobody)
			os.Chmod(dir, 0o500)
			return p
		}, `cannot create the ledger's -wal and -shm files: its directory is not writable`},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := mkdir(t, filepath.Join(root, fmt.Sprint(i)), 0o755)
			path := c.setup(dir)
			marksDir := mkdir(t, filepath.Join(root, fmt.Sprint(i, "marks")), 0o777)
			marks := filepath.Join(marksDir, "marks")
			before := listing(t, dir)
			rc := clean(nil, idem, append([]string{"--ledger", path, "run", "--key", "job:read-only"}, markCmd(marks)...)...)
			rc.nobody, rc.dir = true, root
			p := run(t, rc)
			checkRefused(t, s, p, c.want, marks, dir, before)
		})
	}
}

// modesCmd is a child that prints the mode of the ledger, -wal and -shm
// while idem holds them open.
func modesCmd(ledger string) []string {
	return []string{"/bin/sh", "-c", `for f in "$1" "$1-wal" "$1-shm"; do stat -c '%a %n' "$f"; done`, "sh", ledger}
}

// TestLedgerModes: whatever the umask, a new ledger's directory is 0700 and
// the ledger, -wal and -shm are 0600; an existing ledger of the user's with
// looser modes is tightened with one warning per file (another user's is
// left as it is).
func TestLedgerModes(t *testing.T) {
	s := newStats(t)
	idem := idemBin(t)
	for _, umask := range []int{0o000, 0o022, 0o077} {
		t.Run(fmt.Sprintf("umask_%03o", umask), func(t *testing.T) {
			// The default location: idem creates only its directory.
			home := t.TempDir()
			dir := filepath.Join(home, ".local", "state", "idem")
			path := filepath.Join(dir, "ledger.db")
			rc := clean([]string{"HOME=" + home}, idem, append([]string{"run", "--key", "job:modes"}, modesCmd(path)...)...)
			rc.umask = fmt.Sprintf("%03o", umask)
			p := run(t, rc)
			s.add(0, 0, 1)
			if p.code != 0 || p.stderr != "" {
				t.Fatalf("run: %v", p)
			}
			want := fmt.Sprintf("600 %s\n600 %[1]s-wal\n600 %[1]s-shm\n", path)
			if p.stdout != want {
				s.violate(t, "modes while open:\n%s\nwant:\n%s", p.stdout, want)
			}
			for _, c := range []struct {
				path string
				want os.FileMode
			}{{dir, 0o700}, {path, 0o600}} {
				fi, err := os.Stat(c.path)
				if err != nil {
					t.Fatal(err)
				}
				if fi.Mode().Perm() != c.want {
					s.violate(t, "%s has mode %#o, want %#o", c.path, fi.Mode().Perm(), c.want)
				}
			}
		})
	}

	t.Run("loose_modes_tightened", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "ledger.db")
		// A run killed while it holds the ledger leaves -wal and -shm.
		p := run(t, clean(nil, idem, "--ledger", path, "run", "--key", "job:killed", "--", "/bin/sh", "-c", `kill -9 $PPID; sleep 5`))
		if p.signal != syscall.SIGKILL {
			t.Fatalf("the crash did not happen: %v", p)
		}
		for _, f := range []string{path, path + "-wal", path + "-shm"} {
			if err := os.Chmod(f, 0o666); err != nil {
				t.Fatal(err)
			}
		}
		p = run(t, clean(nil, idem, append([]string{"--ledger", path, "run", "--key", "job:modes"}, modesCmd(path)...)...))
		s.add(0, 1, 1)
		want := fmt.Sprintf("600 %s\n600 %[1]s-wal\n600 %[1]s-shm\n", path)
		if p.code != 0 || p.stdout != want {
			s.violate(t, "loose modes were not tightened: %v\nwant stdout:\n%s", p, want)
		}
		warn := regexp.MustCompile(`^idem: warning: \S+ was mode 0666, now 0600: the ledger holds command output, so others may not read it$`)
		got := strings.Split(strings.TrimSuffix(p.stderr, "\n"), "\n")
		if len(got) != 3 || !warn.MatchString(got[0]) || !warn.MatchString(got[1]) || !warn.MatchString(got[2]) {
			t.Errorf("want three warnings, got:\n%s", p.stderr)
		}
		p = run(t, clean(nil, idem, append([]string{"--ledger", path, "run", "--key", "job:modes-2"}, modesCmd(path)...)...))
		if p.code != 0 || p.stderr != "" {
			t.Errorf("a second run warned again: %v", p)
		}
	})

	// An empty file the user made (touch, mode 0644) becomes a ledger: it
	// is warned of; the -wal and -shm made meanwhile take its mode and are
	// tightened too, but were never the user's to be told of.
	t.Run("made_files_tightened_quietly", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "touched.db")
		if err := os.WriteFile(path, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, 0o644); err != nil {
			t.Fatal(err)
		}
		p := run(t, clean(nil, idem, append([]string{"--ledger", path, "run", "--key", "job:touched"}, modesCmd(path)...)...))
		want := fmt.Sprintf("600 %s\n600 %[1]s-wal\n600 %[1]s-shm\n", path)
		if p.code != 0 || p.stdout != want {
			s.violate(t, "modes not tightened: %v\nwant stdout:\n%s", p, want)
		}
		if p.stderr != "idem: warning: "+path+" was mode 0644, now 0600: the ledger holds command output, so others may not read it\n" {
			t.Errorf("want one warning, of the file the user made, got:\n%s", p.stderr)
		}
	})

	t.Run("another_users_loose_ledger_left_alone", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "ledger.db")
		newLedger(t, idem, path)
		os.Chown(path, nobody, nobody)
		os.Chmod(path, 0o644)
		// Root is refused another user's ledger unless it asks for it.
		run(t, clean(nil, idem, "--ledger", path, "run", "--key", "job:theirs", "--", "/bin/true")).expect(74)
		p := run(t, clean([]string{"IDEM_ALLOW_OTHER_OWNER=1"}, idem, "--ledger", path, "run", "--key", "job:theirs", "--", "/bin/true"))
		s.add(0, 0, 1)
		if p.code != 0 || p.stderr != "" {
			t.Fatalf("run: %v", p)
		}
		if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o644 {
			t.Errorf("another user's ledger changed mode to %#o", fi.Mode().Perm())
		}
	})
}

// TestHostileInput: keys, paths and payloads an attacker or a broken script
// could pass. Rejected input exits 64 with one line (the input quoted, never
// echoed raw or whole) and writes nothing; accepted input is stored under
// exactly the bytes given.
func TestHostileInput(t *testing.T) {
	busy(t)
	s := newStats(t)
	idem := idemBin(t)

	t.Run("keys", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(mkdir(t, filepath.Join(dir, "state"), 0o700), "ledger.db")
		marks := filepath.Join(dir, "marks")
		keys := []string{
			"evt:1\nidem: error: forged", "evt:1\r\x1b[31mred", "tab\tinside:1", "evt:del\x7f1",
			"evt:\u202egnp.exe", "ｅｖｔ：ｆｕｌｌｗｉｄｔｈ", "evt:1' OR '1'='1", "evt:1; DROP TABLE records",
			strings.Repeat("k", 131071), // the longest string Linux passes in argv
		}
		rng := rand.New(rand.NewPCG(1, 2))
		alphabet := []byte("abcXYZ019:_-.'\"; \\%?#&=/\n\t\x01\x7f\xc3\xa9\xff")
		n := 40
		if longRun() {
			n = 2000
		}
		for range n {
			k := make([]byte, 1+rng.IntN(140))
			for i := range k {
				k[i] = alphabet[rng.IntN(len(alphabet))]
			}
			keys = append(keys, string(k))
		}
		for _, k := range keys {
			p := run(t, clean(nil, idem, append([]string{"--ledger", path, "run", "--key", k}, markCmd(marks)...)...))
			s.add(0, 0, 1)
			valid := len(k) >= 8 && len(k) <= 128 && strings.Trim(k, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789:_-.") == ""
			if !valid {
				if p.code != 64 {
					s.violate(t, "key %q: exit %d, want 64\n%v", k, p.code, p)
				}
				errorLines(t, s, p)
				if len(p.stderr) > 600 {
					s.violate(t, "key of %d bytes: %d bytes of stderr", len(k), len(p.stderr))
				}
				continue
			}
			if p.code != 0 {
				s.violate(t, "valid key %q: %v", k, p)
				continue
			}
			if st, _ := keyState(t, path, k); st != "succeeded" {
				s.violate(t, "valid key %q recorded as %s", k, st)
			}
		}
		// Only valid keys ran (each once), and nothing else touched the ledger.
		valid := 0
		seen := map[string]bool{}
		for _, k := range keys {
			if len(k) >= 8 && len(k) <= 128 && strings.Trim(k, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789:_-.") == "" && !seen[k] {
				valid++
				seen[k] = true
			}
		}
		if got := lines(t, marks); got != valid {
			s.violate(t, "the command ran %d times for %d distinct valid keys", got, valid)
		}
	})

	t.Run("nul_through_the_go_api", func(t *testing.T) {
		// argv cannot carry NUL; cmd.Main can.
		dir := t.TempDir()
		var stdout, stderr bytes.Buffer
		code := cmdMain([]string{"--ledger", filepath.Join(dir, "l.db"), "run", "--key", "evt:\x00:nul", "--", "/bin/true"}, &stdout, &stderr)
		s.add(0, 0, 1)
		if code != 64 || !strings.HasPrefix(stderr.String(), `idem: error: invalid key "evt:\x00:nul"`) {
			s.violate(t, "NUL key: exit %d, stderr %q", code, stderr.String())
		}
		if _, err := os.Stat(filepath.Join(dir, "l.db")); !errors.Is(err, os.ErrNotExist) {
			s.violate(t, "a ledger was created for a rejected key")
		}
	})

	t.Run("payload_files", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(mkdir(t, filepath.Join(dir, "state"), 0o700), "ledger.db")
		marks := filepath.Join(dir, "marks")
		huge := filepath.Join(dir, "huge.json")
		if err := os.WriteFile(huge, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(huge, 64<<20+1); err != nil { // sparse: cheap
			t.Fatal(err)
		}
		p := run(t, clean(nil, idem, append([]string{"--ledger", path, "run", "--key", "payload:huge", "--payload-file", huge}, markCmd(marks)...)...))
		s.add(0, 0, 1)
		if p.code != 64 || !strings.Contains(p.stderr, "is larger than 64MiB") {
			s.violate(t, "payload of 64MiB+1: %v", p)
		}
		for _, f := range []string{"/dev/zero", "/dev/urandom"} {
			p := run(t, clean(nil, idem, append([]string{"--ledger", path, "run", "--key", "payload:endless", "--payload-file", f}, markCmd(marks)...)...))
			s.add(0, 0, 1)
			if p.code != 64 {
				s.violate(t, "endless payload %s: %v", f, p)
			}
		}
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			s.violate(t, "a rejected payload created the ledger")
		}
		if err := os.Truncate(huge, 64<<20); err != nil {
			t.Fatal(err)
		}
		p = run(t, clean(nil, idem, append([]string{"--ledger", path, "run", "--key", "payload:limit", "--payload-file", huge}, markCmd(marks)...)...))
		s.add(0, 0, 1)
		if p.code != 0 {
			s.violate(t, "payload of exactly 64MiB: %v", p)
		}
		if n := lines(t, marks); n != 1 {
			s.violate(t, "the command ran %d times, want 1", n)
		}
	})
}

func cmdMain(args []string, stdout, stderr io.Writer) int {
	return cmd.Main(context.Background(), args, stdout, stderr, fullIdem())
}
