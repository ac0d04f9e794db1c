package e2e

// idem links only the SQLite ledger; an invocation on a PostgreSQL ledger
// is handed whole to idem-net, installed beside it, in the same process.
// These tests run the two executables as built, as a release ships them.

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestLeanIdemLinksNoNetworkClient: the executable that runs a ledger
// file links no PostgreSQL driver and no HTTP client, whose package
// initialisation every run would pay; idem-net links the driver.
func TestLeanIdemLinksNoNetworkClient(t *testing.T) {
	idem := buildTagged(t, "", ".")
	goTool := needTool(t, "go")
	for _, tc := range []struct {
		bin  string
		deps []string // module or package paths in the build info
		want bool
	}{
		{idem, []string{"github.com/jackc/pgx/v5", "github.com/jackc/pgconn"}, false},
		{filepath.Join(filepath.Dir(idem), "idem-net"), []string{"github.com/jackc/pgx/v5"}, true},
	} {
		info := runIn(t, "", nil, goTool, "version", "-m", tc.bin)
		for _, dep := range tc.deps {
			if got := strings.Contains(info, "\tdep\t"+dep+"\t"); got != tc.want {
				t.Errorf("%s links %s: %v, want %v", filepath.Base(tc.bin), dep, got, tc.want)
			}
		}
	}
	syms := runIn(t, "", nil, goTool, "tool", "nm", idem)
	for _, pkg := range []string{"net/http.", "crypto/tls.", "github.com/jackc/", "github.com/idemhq/idem/internal/ping."} {
		if strings.Contains(syms, " "+pkg) {
			t.Errorf("idem links %s*", pkg)
		}
	}
	// the pinger is idem-net's
	if syms := runIn(t, "", nil, goTool, "tool", "nm", filepath.Join(filepath.Dir(idem), "idem-net")); !strings.Contains(syms, " github.com/idemhq/idem/internal/ping.") {
		t.Errorf("idem-net links no pinger")
	}
}

// TestPingHandOff: a run with a ping URL (IDEM_PING_URL or --ping) on a
// ledger file, started as idem, runs in idem-net as the same process (the
// command's parent is the pid idem was started as, and its process is
// idem-net) and pings; without idem-net beside it, idem says what is
// missing (74) and runs nothing; with IDEM_PING_URL empty, pings are off
// and idem runs it itself.
func TestPingHandOff(t *testing.T) {
	s := newHCServer(t)
	idem := buildTagged(t, "", ".")
	dir := t.TempDir()
	seen := filepath.Join(dir, "seen")
	env := []string{"IDEM_LEDGER=" + filepath.Join(dir, "ledger.db"), "NO_COLOR=1"}
	job := func(key string) []string {
		return []string{"--key", key, "--", "sh", "-c", `echo "$PPID $(cat /proc/$PPID/comm)" > "$0"; echo ran`, seen}
	}
	for _, via := range []string{"env", "flag"} {
		args := append([]string{"run"}, job("handoff:ping-"+via)...)
		e := env
		if via == "env" {
			e = append(e, "IDEM_PING_URL="+s.URL+"/{group}-"+via)
		} else {
			args = append([]string{"run", "--ping", s.URL + "/{group}-" + via}, job("handoff:ping-"+via)...)
		}
		p := run(t, clean(e, idem, args...)).expect(0)
		if p.stdout != "ran\n" {
			t.Errorf("%s: stdout %q, want ran", via, p.stdout)
		}
		if got, want := strings.Fields(readFile(seen)), []string{strconv.Itoa(p.pid()), "idem-net"}; strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%s: the command's parent is %q, want %q: idem-net in the process idem was started as", via, got, want)
		}
		wantPings(t, via, s.of("handoff-"+via), "start", "0")
	}
	// IDEM_PING_URL= (empty): no pings, and no hand-off
	run(t, clean(append(env, "IDEM_PING_URL="), idem, append([]string{"run"}, job("handoff:ping-off")...)...)).expect(0)
	if got := strings.Fields(readFile(seen)); len(got) != 2 || got[1] != "idem" {
		t.Errorf("without pings the command's parent is %q, want idem", got)
	}

	alone := filepath.Join(t.TempDir(), "idem")
	if b, err := os.ReadFile(idem); err != nil || os.WriteFile(alone, b, 0o755) != nil {
		t.Fatal(err)
	}
	ran := filepath.Join(dir, "ran")
	p := run(t, clean(append(env, "IDEM_PING_URL="+s.URL+"/alone"), alone, "run", "--key", "handoff:ping-alone", "--", "touch", ran)).expect(74)
	if !strings.Contains(p.stderr, "idem: error: a run with monitor pings (--ping, IDEM_PING_URL) needs idem-net beside "+alone) ||
		!strings.Contains(p.stderr, "idem: hint: install idem-net") {
		t.Errorf("no error naming idem-net and where it belongs: %v", p)
	}
	if _, err := os.Stat(ran); err == nil {
		t.Errorf("the command ran")
	}
}

// TestHandOffToIdemNet: a run on a PostgreSQL ledger started as idem runs
// in idem-net as the same process (the pid the ledger records as the
// owner is the one idem was started as), records, replays, and a nested
// idem gets the ledger without its password.
func TestHandOffToIdemNet(t *testing.T) {
	dsn, db := pgDatabase(t)
	idem := buildTagged(t, "", ".")
	dir := t.TempDir()
	env := []string{"IDEM_LEDGER=" + dsn, "NO_COLOR=1", "XDG_STATE_HOME=" + dir}
	job := []string{"run", "--key", "handoff:one", "--", "sh", "-c", `echo "$PPID $IDEM_LEDGER" > "$0"; echo ran`, filepath.Join(dir, "seen")}
	c := inherit(env, idem, job...)
	c.dir = dir
	p := run(t, c).expect(0)
	if p.stdout != "ran\n" {
		t.Errorf("stdout %q, want ran", p.stdout)
	}
	seen := strings.Fields(readFile(filepath.Join(dir, "seen")))
	if len(seen) != 2 || seen[0] != strconv.Itoa(p.pid()) {
		t.Errorf("the command's parent and IDEM_LEDGER: %q; want pid %d, the process idem was started as", seen, p.pid())
	}
	if pw := pgPassword(dsn); pw != "" && strings.Contains(seen[len(seen)-1], pw) {
		t.Errorf("the command got the ledger's password in IDEM_LEDGER: %q", seen)
	}
	var owner int
	if err := db.QueryRow(context.Background(), `SELECT owner_pid FROM idem.records WHERE key = 'handoff:one'`).Scan(&owner); err != nil {
		t.Fatal(err)
	}
	if owner != p.pid() {
		t.Errorf("the ledger records owner pid %d, want %d", owner, p.pid())
	}
	r := run(t, c).expect(0)
	if r.stdout != "ran\n" || !strings.Contains(r.stderr, "replayed") {
		t.Errorf("the repeat did not replay: %v", r)
	}
	// idem schema is PostgreSQL's: handed off too
	s := run(t, inherit(env, idem, "schema")).expect(0)
	if !strings.Contains(s.stdout, "CREATE TABLE") {
		t.Errorf("idem schema printed no DDL: %v", s)
	}
}

// TestHandOffBeforeStartUp: a command line that plainly names a
// PostgreSQL ledger, or pings, goes to idem-net from idem's package
// initialisation, before SQLite's: the runtime's trace of package
// initialisation (GODEBUG=inittrace=1) shows two programs started and
// SQLite's C library initialised once, by idem-net (a hand-off from idem's
// command would show it twice). A run on a file and a subcommand that
// opens no ledger stay in idem.
func TestHandOffBeforeStartUp(t *testing.T) {
	dsn, _ := pgDatabase(t)
	s := newHCServer(t)
	idem := buildTagged(t, "", ".")
	dir := t.TempDir()
	file := "IDEM_LEDGER=" + filepath.Join(dir, "ledger.db")
	for _, tc := range []struct {
		name   string
		env    []string
		args   []string
		starts int // programs started in the process
	}{
		{"IDEM_LEDGER", []string{"IDEM_LEDGER=" + dsn}, []string{"run", "--key", "handoff:early", "--", "true"}, 2},
		{"--ledger", []string{file}, []string{"--ledger=" + dsn, "inspect", "handoff:early"}, 2},
		{"IDEM_PING_URL", []string{file, "IDEM_PING_URL=" + s.URL + "/early"}, []string{"run", "--key", "handoff:early-ping", "--", "true"}, 2},
		{"a ledger file", []string{file}, []string{"run", "--key", "handoff:early-file", "--", "true"}, 1},
		{"idem key", []string{"IDEM_LEDGER=" + dsn}, []string{"key", "handoff", "early"}, 1},
	} {
		env := append([]string{"NO_COLOR=1", "XDG_STATE_HOME=" + dir, "GODEBUG=inittrace=1"}, tc.env...)
		p := run(t, inherit(env, idem, tc.args...)).expect(0)
		starts := strings.Count(p.stderr, "init runtime @")
		sqlite := strings.Count(p.stderr, "init modernc.org/libc @")
		if starts != tc.starts || sqlite != 1 {
			t.Errorf("%s: %d programs started and SQLite initialised %d times, want %d and once:\n%s", tc.name, starts, sqlite, tc.starts, p.stderr)
		}
	}
}

// TestHandOffWithoutIdemNet: an idem installed without idem-net beside it
// says what is missing and where it belongs (74), and runs nothing; a
// ledger file needs no idem-net.
func TestHandOffWithoutIdemNet(t *testing.T) {
	built := buildTagged(t, "", ".")
	dir := t.TempDir()
	idem := filepath.Join(dir, "idem")
	if b, err := os.ReadFile(built); err != nil || os.WriteFile(idem, b, 0o755) != nil {
		t.Fatal(err)
	}
	env := []string{"IDEM_LEDGER=postgres://u@127.0.0.1:1/db", "NO_COLOR=1"}
	p := run(t, inherit(env, idem, "run", "--key", "handoff:none", "--", "touch", filepath.Join(dir, "ran"))).expect(74)
	if !strings.Contains(p.stderr, "idem: error: a PostgreSQL ledger needs idem-net beside "+idem) ||
		!strings.Contains(p.stderr, "idem: hint: install idem-net") {
		t.Errorf("no error naming idem-net and where it belongs: %v", p)
	}
	if _, err := os.Stat(filepath.Join(dir, "ran")); err == nil {
		t.Errorf("the command ran")
	}
	run(t, inherit([]string{"IDEM_LEDGER=" + filepath.Join(dir, "l.db")}, idem, "run", "--key", "handoff:file", "--", "true")).expect(0)
}

// TestHandOffToItself: an idem-net that is idem itself (a copy, a hard
// link, a symbolic link) would start idem again for ever; idem says so
// (74) and runs nothing.
func TestHandOffToItself(t *testing.T) {
	built := buildTagged(t, "", ".")
	for _, kind := range []string{"copy", "hard link", "symbolic link"} {
		dir := t.TempDir()
		idem, net := filepath.Join(dir, "idem"), filepath.Join(dir, "idem-net")
		b, err := os.ReadFile(built)
		if err != nil || os.WriteFile(idem, b, 0o755) != nil {
			t.Fatal(err)
		}
		switch kind {
		case "copy":
			err = os.WriteFile(net, b, 0o755)
		case "hard link":
			err = os.Link(idem, net)
		default:
			err = os.Symlink("idem", net)
		}
		if err != nil {
			t.Fatal(err)
		}
		ran := filepath.Join(dir, "ran")
		c := inherit([]string{"IDEM_LEDGER=postgres://u@127.0.0.1:1/db", "NO_COLOR=1"}, idem, "run", "--key", "handoff:itself", "--", "touch", ran)
		c.timeout = time.Minute
		p := run(t, c).expect(74)
		if !strings.Contains(p.stderr, "idem: error: a PostgreSQL ledger needs idem-net, but "+net+" is this idem (a copy or a link of it), not idem-net") ||
			!strings.Contains(p.stderr, "idem: hint: install idem-net") {
			t.Errorf("%s: no error saying idem-net is idem: %v", kind, p)
		}
		if _, err := os.Stat(ran); err == nil {
			t.Errorf("%s: the command ran", kind)
		}
	}
}

// TestHandOffKeepsIgnoredHangup: under nohup, SIGHUP stays ignored across
// the hand-off (idem installs no handler before it), so a hangup neither
// stops the run nor reaches the command.
func TestHandOffKeepsIgnoredHangup(t *testing.T) {
	dsn, _ := pgDatabase(t)
	idem := buildTagged(t, "", ".")
	nohup := needTool(t, "nohup")
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	c := inherit([]string{"IDEM_LEDGER=" + dsn, "XDG_STATE_HOME=" + dir}, nohup, idem, "run", "--key", "handoff:nohup", "--",
		"sh", "-c", `touch "$0"; sleep 1; echo done`, ready)
	c.dir = dir
	p := start(t, c)
	for end := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the command never started: %v", p.wait())
		}
	}
	if got := procName(p.pid()); got != "idem-net" {
		t.Errorf("the run's process is %q, want idem-net (handed off in place)", got)
	}
	p.send(syscall.SIGHUP)
	p.wait().expect(0)
	if p.stdout != "done\n" {
		t.Errorf("the command did not finish after SIGHUP: %v", p)
	}
}

// procName is the name of process pid's executable (its comm).
func procName(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	return strings.TrimSpace(string(b))
}

// TestHandOffRefusesPlanted: idem in a directory every user may write
// (mode 1777), and an idem-net there that another user (nobody) planted:
// a program of theirs, a symbolic link of theirs to a program of root's,
// or root's link leading through one of theirs. Root's idem, which would hand it a PostgreSQL DSN and run it
// with root's rights, runs neither (74, saying why); nor an idem-net of
// root's that others may write.
func TestHandOffRefusesPlanted(t *testing.T) {
	built := buildTagged(t, "", ".")
	b, err := os.ReadFile(built)
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"program", "symbolic link", "link to a link", "writable by others"} {
		t.Run(kind, func(t *testing.T) {
			_, dir := stickyDir(t)
			idem, net, pwned := filepath.Join(dir, "idem"), filepath.Join(dir, "idem-net"), filepath.Join(dir, "pwned")
			if err := os.WriteFile(idem, b, 0o755); err != nil {
				t.Fatal(err)
			}
			var want string
			switch kind {
			case "program":
				run(t, command{argv: []string{"/bin/sh", "-c", `printf '#!/bin/sh\nid -u > "%s"\n' "$1" > "$0" && chmod 755 "$0"`, net, pwned}, nobody: true}).expect(0)
				want = "it belongs to another user"
			case "symbolic link":
				script := filepath.Join(dir, "root-script")
				if err := os.WriteFile(script, []byte("#!/bin/sh\nid -u > "+pwned+"\n"), 0o755); err != nil {
					t.Fatal(err)
				}
				run(t, command{argv: []string{"ln", "-s", script, net}, nobody: true}).expect(0)
				want = net + " is a symbolic link another user made (uid 65534)"
			case "link to a link":
				// root's idem-net leads through a link of nobody's.
				script, hop := filepath.Join(dir, "root-script"), filepath.Join(dir, "hop")
				if err := os.WriteFile(script, []byte("#!/bin/sh\nid -u > "+pwned+"\n"), 0o755); err != nil {
					t.Fatal(err)
				}
				run(t, command{argv: []string{"ln", "-s", script, hop}, nobody: true}).expect(0)
				if err := os.Symlink(hop, net); err != nil {
					t.Fatal(err)
				}
				want = hop + " is a symbolic link another user made (uid 65534)"
			default:
				if err := os.WriteFile(net, []byte("#!/bin/sh\nid -u > "+pwned+"\n"), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(net, 0o777); err != nil {
					t.Fatal(err)
				}
				want = "group or others may write it (mode 0777)"
			}
			ran := filepath.Join(dir, "ran")
			c := inherit([]string{"IDEM_LEDGER=postgres://u@127.0.0.1:1/db", "NO_COLOR=1"}, idem, "run", "--key", "handoff:planted", "--", "touch", ran)
			p := run(t, c).expect(74)
			if !strings.Contains(p.stderr, "idem: error: a PostgreSQL ledger needs idem-net, and idem does not run "+net+": "+want) ||
				!strings.Contains(p.stderr, "idem: hint: reinstall idem-net") {
				t.Errorf("no error saying why idem-net is not run: %v", p)
			}
			for _, f := range []string{pwned, ran} {
				if _, err := os.Stat(f); err == nil {
					t.Errorf("%s exists: the planted idem-net or the command ran", f)
				}
			}
		})
	}
}
