package e2e

import (
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
)

// TestInspectEscapesLedgerStrings: idem inspect reads a ledger that
// another user may have made (a readable file is enough), so every string
// it shows from the file reaches the terminal as text: a title change, a
// colour or a bidirectional override in a key, a host, a directory, a
// user, an exit's source or an attempt's class is shown escaped, in the
// record's view and in the listing.
func TestInspectEscapesLedgerStrings(t *testing.T) {
	idem, dir, _, job := damageSetup(t)
	path := filepath.Join(dir, "made.db")
	for _, k := range []string{"job:recorded-1", "job:running-1"} {
		if p := run(t, job(path, k)); p.code != 0 {
			t.Fatalf("recording %s: %v", k, p)
		}
	}
	const e = "\x1b]0;owned\x07\x1b[31m\u202e"
	db, err := sql.Open("sqlite", "file:"+uriPath(path))
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`UPDATE records SET exit_source = 's` + e + `', run_cwd = '/c` + e + `', run_user = 'u` + e + `', owner_host = 'h` + e + `',
			status = 'failed', exit_code = 1, class = 'permanent' WHERE key = 'job:recorded-1'`,
		`UPDATE records SET owner_host = 'h` + e + `', status = 'in_progress', finished_ms = NULL,
			lease_expires_ms = 9999999999999 WHERE key = 'job:running-1'`,
		`UPDATE attempts SET host = 'ah` + e + `', class = 'ac` + e + `'`,
		`UPDATE records SET key = 'job:k` + e + `' WHERE key = 'job:running-1'`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()
	for _, args := range [][]string{
		{"inspect", "job:recorded-1"},
		{"inspect"},
		{"inspect", "--status", "in_progress"},
	} {
		p := run(t, clean([]string{"NO_COLOR=1"}, idem, append([]string{"--ledger", path}, args...)...))
		if p.code != 0 || !strings.Contains(p.stdout, `\x1b]0;owned\x07\x1b[31m\u202e`) {
			t.Errorf("%q: %v; want 0 and the strings escaped", args, p)
		}
		if strings.ContainsAny(p.stdout+p.stderr, "\x1b\x07\u202e") {
			t.Errorf("%q wrote control characters: %q", args, p.stdout)
		}
	}
}

// TestMessagesEscapeLedgerStrings: a host another run wrote into a shared
// ledger reaches idem's own lines too (a key busy elsewhere, a wait for
// it, a purge that keeps it): shown escaped, on one line, never as a
// terminal's commands or a forged idem: line.
func TestMessagesEscapeLedgerStrings(t *testing.T) {
	idem, dir, _, job := damageSetup(t)
	path := filepath.Join(dir, "shared.db")
	if p := run(t, job(path, "job:busy-1")); p.code != 0 {
		t.Fatalf("recording: %v", p)
	}
	const e = "h\x1b]0;owned\x07\nidem: replayed job:busy-1: succeeded\u202e"
	db, err := sql.Open("sqlite", "file:"+uriPath(path))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE records SET owner_host = ?, owner_boot_id = 'elsewhere', status = 'in_progress', finished_ms = NULL,
		lease_expires_ms = 9999999999999 WHERE key = 'job:busy-1'`, e); err != nil {
		t.Fatal(err)
	}
	db.Close()
	for _, c := range []struct {
		code int
		args []string
	}{
		{75, []string{"run", "--key", "job:busy-1", "--", "sh", "-c", ": > ran; echo out"}},
		{75, []string{"run", "--wait", "--wait-timeout", "1s", "--key", "job:busy-1", "--", "sh", "-c", ": > ran; echo out"}},
		{75, []string{"purge", "job:busy-1"}},
	} {
		p := run(t, clean([]string{"NO_COLOR=1"}, idem, append([]string{"--ledger", path}, c.args...)...))
		if p.code != c.code || !strings.Contains(p.stderr, `h\x1b]0;owned\x07\nidem: replayed job:busy-1: succeeded\u202e`) {
			t.Errorf("%q: %v; want %d and the host escaped", c.args, p, c.code)
		}
		if strings.ContainsAny(p.stderr, "\x1b\x07\u202e") || strings.Contains(p.stderr, "\nidem: replayed") {
			t.Errorf("%q wrote control characters or a line of the host's: %q", c.args, p.stderr)
		}
	}
}
