package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// stickyDir is a directory every user may create files in (mode 1777), as
// /tmp is, inside a scratch directory every user can reach.
func stickyDir(t *testing.T) (root, dir string) {
	t.Helper()
	root = sharedDir(t)
	dir = filepath.Join(root, "tmp")
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	return root, dir
}

// runOut runs a helper program and returns its combined output.
func runOut(prog string, args ...string) (string, error) {
	out, err := exec.Command(prog, args...).CombinedOutput()
	return string(out), err
}

func ownerOf(t *testing.T, path string) int {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return int(fi.Sys().(*syscall.Stat_t).Uid)
}

// TestLedgerOfAnotherUserIsRefused: in a directory others may write,
// another user (nobody) who creates root's ledger first, empty or holding
// a success for root's key, decides nothing: root's run is refused with 74
// and a hint naming runuser, runs nothing and creates nothing there. Root
// still inspects it; with IDEM_ALLOW_OTHER_OWNER=1 root may purge it, and
// the files SQLite creates then are nobody's, so nobody's runs go on.
func TestLedgerOfAnotherUserIsRefused(t *testing.T) {
	needTool(t, "runuser")
	root, dir := stickyDir(t)
	idem := copyExe(t, idemBin(t), mkdir(t, filepath.Join(root, "bin"), 0o755))
	marks := filepath.Join(t.TempDir(), "marks")
	asNobody := func(args ...string) *process {
		c := clean(nil, idem, args...)
		c.nobody, c.dir = true, root
		return run(t, c)
	}
	refused := func(p *process) {
		t.Helper()
		p.expect(74)
		if !strings.Contains(p.stderr, "owned by another user (nobody, uid 65534)") || !strings.Contains(p.stderr, "runuser -u nobody -- idem") {
			t.Errorf("refusal does not say whose the ledger is: %v", p)
		}
		if _, err := os.Stat(marks); err == nil {
			t.Fatalf("the command ran: %v", p)
		}
	}

	// (b) an empty file, mode 0666: root's output would land in it.
	empty := filepath.Join(dir, "c.db")
	p := run(t, command{argv: []string{"/bin/sh", "-c", `umask 0; : > "$0"`, empty}, nobody: true})
	p.expect(0)
	refused(run(t, clean(nil, idem, "--ledger", empty, "run", "--key", "owner:empty", "--", "/bin/sh", "-c", `echo secret; echo ran >> "$0"`, marks)))
	if fi, err := os.Stat(empty); err != nil || fi.Size() != 0 {
		t.Errorf("the other user's file was written: %v %v", fi, err)
	}
	for _, s := range []string{"-wal", "-shm", "-journal"} {
		if _, err := os.Lstat(empty + s); err == nil {
			t.Errorf("root created %s beside another user's file", s)
		}
	}

	// (c) a ledger holding a success for root's key: root's job would
	// never run.
	forged := filepath.Join(dir, "ledger.db")
	asNobody("--ledger", forged, "run", "--key", "owner:root-job", "--", "/bin/true").expect(0)
	refused(run(t, clean(nil, idem, "--ledger", forged, "run", "--key", "owner:root-job", "--", "/bin/sh", "-c", `echo ran >> "$0"`, marks)))

	// Reading it keeps working, without the opt-in.
	run(t, clean(nil, idem, "--ledger", forged, "inspect", "owner:root-job")).expect(0)
	run(t, clean(nil, idem, "--ledger", forged, "purge", "--all", "--dry-run")).expect(0)

	// With the opt-in, root may act on it, and leaves nothing of root's.
	run(t, clean([]string{"IDEM_ALLOW_OTHER_OWNER=1"}, idem, "--ledger", forged, "purge", "owner:root-job")).expect(0)
	for _, s := range []string{"", "-wal", "-shm"} {
		if _, err := os.Lstat(forged + s); err == nil && ownerOf(t, forged+s) != nobody {
			t.Errorf("%s is uid %d after root's purge, want nobody's", forged+s, ownerOf(t, forged+s))
		}
	}
	asNobody("--ledger", forged, "run", "--key", "owner:after-purge", "--", "/bin/true").expect(0)

	// A -wal or -shm of another user beside root's own ledger is refused
	// too, and a link there is never followed.
	mine := filepath.Join(dir, "mine.db")
	run(t, clean(nil, idem, "--ledger", mine, "run", "--key", "owner:mine", "--", "/bin/true")).expect(0)
	os.Remove(mine + "-shm")
	run(t, command{argv: []string{"/bin/sh", "-c", `umask 0; : > "$0"`, mine + "-shm"}, nobody: true}).expect(0)
	if p := run(t, clean(nil, idem, "--ledger", mine, "run", "--key", "owner:mine-2", "--", "/bin/true")).expect(74); !strings.Contains(p.stderr, "its -shm is owned by another user") {
		t.Errorf("a -shm of another user: %v", p)
	}
	os.Remove(mine + "-shm")
	os.Remove(mine + "-wal")
	if err := os.Symlink("/etc/hostname", mine+"-wal"); err != nil {
		t.Fatal(err)
	}
	if p := run(t, clean(nil, idem, "--ledger", mine, "run", "--key", "owner:mine-3", "--", "/bin/true")).expect(74); !strings.Contains(p.stderr, "is a symbolic link") {
		t.Errorf("a -wal that is a link: %v", p)
	}
}

// TestDynamicUserStateDirectory: systemd's DynamicUser= state directory,
// /var/lib/NAME a link to private/NAME owned by the service's user, stays
// usable by that user, and root inspects it through the link.
func TestDynamicUserStateDirectory(t *testing.T) {
	root := sharedDir(t)
	idem := copyExe(t, idemBin(t), mkdir(t, filepath.Join(root, "bin"), 0o755))
	private := mkdir(t, filepath.Join(root, "private", "idem"), 0o755)
	if err := os.Chown(private, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(root, "idem")
	if err := os.Symlink("private/idem", link); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(link, "ledger.db")
	for range 2 {
		c := clean(nil, idem, "--ledger", path, "run", "--key", "dyn:job-1", "--", "/bin/echo", "hi")
		c.nobody = true
		if p := run(t, c).expect(0); p.stdout != "hi\n" {
			t.Errorf("run as the service's user: %v", p)
		}
	}
	run(t, clean(nil, idem, "--ledger", path, "inspect", "dyn:job-1")).expect(0)
}

// TestForeignWALIsNeverReplayed: a -wal that is not the ledger's own is
// refused with 74 before SQLite replays it, however it got there, and the
// recorded key is never run again: another ledger's -wal copied beside it
// (cp drops the binding), and a backup copied in place over a ledger
// whose -wal was left; and the ledger moved together with its own -wal by
// a tool that drops extended attributes is replayed, its key kept.
func TestForeignWALIsNeverReplayed(t *testing.T) {
	g := newLeaseRig(t)
	marks := g.path("marks")
	jobOn := func(ledger, key string) *process {
		return run(t, command{argv: []string{"idem", "--ledger", ledger, "run", "--key", key, "--",
			"/bin/sh", "-c", `echo ran >> "$0"; echo out`, marks}, env: g.env})
	}
	job := func(key string) *process { return jobOn(g.ledger, key) }
	ran := func() int {
		b, _ := os.ReadFile(marks)
		return strings.Count(string(b), "ran")
	}
	cp := func(src, dst string) {
		t.Helper()
		if out, err := runOut("cp", src, dst); err != nil {
			t.Fatalf("cp %s %s: %v %s", src, dst, err, out)
		}
	}
	job("wal:recorded").expect(0)
	if ran() != 1 {
		t.Fatal("the job did not run")
	}

	// Another ledger's -wal, copied beside this one.
	other := newLeaseRig(t)
	other.run("run", "--key", "wal:other-ledger", "--", "/bin/true").expect(0)
	execSQL(t, g.ledger, `PRAGMA wal_checkpoint(TRUNCATE)`)
	os.Remove(g.ledger + "-wal")
	os.Remove(g.ledger + "-shm")
	cp(other.ledger+"-wal", g.ledger+"-wal")
	if p := job("wal:recorded").expect(74); !strings.Contains(p.stderr, "SQLite would replay it onto this file") {
		t.Errorf("a foreign -wal: %v", p)
	}
	os.Remove(g.ledger + "-wal")
	job("wal:recorded").expect(0)

	// The ledger moved with its own -wal by a copy that drops the binding:
	// its transactions carry the ledger's identity, so it is replayed, and
	// the key kept.
	job("wal:in-the-wal").expect(0)
	moved := g.path("moved.db")
	cp(g.ledger, moved)
	cp(g.ledger+"-wal", moved+"-wal")
	if p := jobOn(moved, "wal:in-the-wal").expect(0); !strings.Contains(p.stderr, "replayed") {
		t.Errorf("the ledger moved with its -wal: %v", p)
	}

	// A backup copied in place (same inode) over a ledger whose -wal
	// stayed.
	g.run("backup", g.path("backup.db")).expect(0)
	job("wal:after-backup").expect(0)
	cp(g.path("backup.db"), g.ledger)
	if p := job("wal:after-backup").expect(74); !strings.Contains(p.stderr, "not in WAL mode") ||
		!strings.Contains(p.stderr, "idem: hint: with no idem running, move the -wal and -shm aside: they are not this file's") {
		t.Errorf("a backup copied over a ledger with its -wal: %v; want the one way out (folding it in fails)", p)
	}
	if n := ran(); n != 3 {
		t.Errorf("the jobs ran %d times, want 3 (each key once)", n)
	}
}

// TestRestoredLedgerIsWALAndHandsOutNewTokens: the documented restore
// (no idem running: remove -wal and -shm, copy the backup over the file)
// gives a ledger in WAL mode again after its first run, and it never
// hands out a token it handed out before the restore.
func TestRestoredLedgerIsWALAndHandsOutNewTokens(t *testing.T) {
	g := newLeaseRig(t)
	token := func(key string) int64 {
		t.Helper()
		p := g.run("run", "--key", key, "--", "/bin/sh", "-c", `echo "$IDEM_TOKEN"`).expect(0)
		n, err := strconv.ParseInt(strings.TrimSpace(p.stdout), 10, 64)
		if err != nil {
			t.Fatalf("IDEM_TOKEN %q", p.stdout)
		}
		return n
	}
	var handed int64
	for i := range 3 {
		handed = max(handed, token(fmt.Sprintf("restore:before-%d", i)))
	}
	g.run("backup", g.path("backup.db")).expect(0)
	for i := range 3 {
		handed = max(handed, token(fmt.Sprintf("restore:after-%d", i)))
	}
	for _, s := range []string{"-wal", "-shm"} {
		os.Remove(g.ledger + s)
	}
	b, err := os.ReadFile(g.path("backup.db"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(g.ledger, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := token("restore:after-the-restore"); got <= handed {
		t.Errorf("the restored ledger handed out token %d; tokens up to %d were handed out before", got, handed)
	}
	db := openDB(t, g.ledger)
	defer db.Close()
	var mode string
	if err := db.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Errorf("the restored ledger's journal_mode after a run: %q %v, want wal", mode, err)
	}
}

// TestDirectorySyncFailureIsAnError: an EIO from the fsync of the
// ledger's directory, which makes a new file's entry durable, fails the run
// with 74 before the command starts (SQLite ignores it): for a new ledger,
// and for one whose -wal the last close removed. Every fsync of the
// directory fails (strace fault injection, limited to that path).
func TestDirectorySyncFailureIsAnError(t *testing.T) {
	strace := needStrace(t)
	idem := idemBin(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.db")
	marks := filepath.Join(t.TempDir(), "marks")
	failing := func(key string) *process {
		t.Helper()
		p := run(t, clean(nil, strace, "-f", "-qq", "-o", "/dev/null", "-P", dir, "-e", "trace=fsync,fdatasync",
			"-e", "inject=fsync,fdatasync:error=EIO", idem, "--ledger", path, "run", "--key", key, "--",
			"/bin/sh", "-c", `echo ran >> "$0"`, marks)).expect(74)
		if !strings.Contains(p.stderr, "sync the directory "+dir) {
			t.Errorf("the error does not name the directory: %v", p)
		}
		if _, err := os.Stat(marks); err == nil {
			t.Fatalf("the command ran: %v", p)
		}
		return p
	}
	failing("dirsync:new-ledger")
	run(t, clean(nil, idem, "--ledger", path, "run", "--key", "dirsync:ok", "--", "/bin/true")).expect(0)
	run(t, clean(nil, idem, "--ledger", path, "purge", "dirsync:ok")).expect(0) // closes: removes the -wal
	if _, err := os.Stat(path + "-wal"); err == nil {
		t.Fatal("the -wal is still there after a close")
	}
	failing("dirsync:new-wal")
}

// TestForeignWALInPlace: copies that keep the -wal's inode and binding,
// or the main file's, are told by the identity every transaction carries:
// another ledger's -wal copied over this one's in place, another idem
// ledger's file and a database of another program's copied over the main
// file in place while its -wal stayed. Each is refused with 74 before
// SQLite replays anything: the recorded key never runs again, and the
// files are left byte for byte.
func TestForeignWALInPlace(t *testing.T) {
	sqlite3 := needTool(t, "sqlite3")
	cp := func(t *testing.T, src, dst string) {
		t.Helper()
		if out, err := runOut("cp", src, dst); err != nil {
			t.Fatalf("cp %s %s: %v %s", src, dst, err, out)
		}
	}
	for _, tc := range []struct {
		name string
		// copy makes g's files what the case says; other is another
		// ledger with a -wal of its own, app a database of sqlite3's.
		copy func(t *testing.T, g, other *leaseRig, app string)
		why  string
	}{
		{"wal over wal", func(t *testing.T, g, other *leaseRig, _ string) { cp(t, other.ledger+"-wal", g.ledger+"-wal") },
			"holds another ledger's transactions"},
		{"ledger over ledger", func(t *testing.T, g, other *leaseRig, _ string) { cp(t, other.ledger, g.ledger) },
			"holds another ledger's transactions"},
		{"database over ledger", func(t *testing.T, g, _ *leaseRig, app string) { cp(t, app, g.ledger) },
			"the file beside it is not that ledger"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, other := newLeaseRig(t), newLeaseRig(t)
			marks := g.path("marks")
			job := func() *process {
				return g.run("run", "--key", "wal:kept", "--", "/bin/sh", "-c", `echo ran >> "$0"`, marks)
			}
			job().expect(0)
			other.run("run", "--key", "wal:other", "--", "/bin/true").expect(0)
			app := g.path("app.db")
			if out, err := runOut(sqlite3, app, "PRAGMA journal_mode=WAL; CREATE TABLE t(x); INSERT INTO t VALUES (1);"); err != nil {
				t.Fatalf("sqlite3: %v %s", err, out)
			}
			for _, f := range []string{g.ledger + "-wal", other.ledger + "-wal"} {
				if fi, err := os.Stat(f); err != nil || fi.Size() == 0 {
					t.Fatalf("%s holds no transactions to copy: %v", f, err)
				}
			}
			tc.copy(t, g, other, app)
			before := map[string][]byte{}
			for _, f := range []string{g.ledger, g.ledger + "-wal"} {
				before[f], _ = os.ReadFile(f)
			}
			if p := job().expect(74); !strings.Contains(p.stderr, tc.why) || !strings.Contains(p.stderr, "idem: hint: with no idem running, move the -wal") {
				t.Errorf("stderr does not say why, or how to recover: %v", p)
			}
			if got := readFile(marks); got != "ran\n" {
				t.Errorf("the recorded key ran again: %q", got)
			}
			for f, b := range before {
				if now, _ := os.ReadFile(f); !bytes.Equal(now, b) {
					t.Errorf("%s was changed", f)
				}
			}
		})
	}
}

// TestLedgerGetsAnIdentity: a ledger made before ledgers had identities of
// their own (application_id "idem") gets one at its next run, which its
// main file carries once checkpointed, and its keys stay.
func TestLedgerGetsAnIdentity(t *testing.T) {
	sqlite3 := needTool(t, "sqlite3")
	g := newLeaseRig(t)
	marks := g.path("marks")
	job := func(key string) *process {
		return g.run("run", "--key", key, "--", "/bin/sh", "-c", `echo ran >> "$0"`, marks)
	}
	job("ident:old").expect(0)
	appID := func() int64 {
		t.Helper()
		out, err := runOut(sqlite3, g.ledger, "PRAGMA wal_checkpoint(TRUNCATE); PRAGMA application_id;")
		if err != nil {
			t.Fatalf("sqlite3: %v %s", err, out)
		}
		lines := strings.Fields(out)
		n, err := strconv.ParseInt(lines[len(lines)-1], 10, 64)
		if err != nil {
			t.Fatalf("application_id %q", out)
		}
		return n
	}
	first := appID()
	if first>>24 != 0x69 || first == 0x6964656d {
		t.Fatalf("a new ledger's application_id is %#x, want 0x69 and 24 bits of its own", first)
	}
	if out, err := runOut(sqlite3, g.ledger, "PRAGMA application_id = 1768187245; PRAGMA wal_checkpoint(TRUNCATE);"); err != nil {
		t.Fatalf("sqlite3: %v %s", err, out)
	}
	if p := job("ident:old").expect(0); !strings.Contains(p.stderr, "replayed") {
		t.Errorf("the old ledger's key: %v", p)
	}
	if id := appID(); id>>24 != 0x69 || id == 0x6964656d {
		t.Errorf("after a run the ledger's application_id is %#x, want one of its own", id)
	}
	if got := readFile(marks); got != "ran\n" {
		t.Errorf("the key ran again: %q", got)
	}
}

// TestLinkOfAnotherUserIsRefused: in a directory everyone may write,
// nobody makes the ledger's name a link to an empty file of root's. Root's
// idem refuses it (74) instead of making that file a ledger: the link's
// maker would choose which of root's files idem writes.
func TestLinkOfAnotherUserIsRefused(t *testing.T) {
	needRoot(t)
	_, dir := stickyDir(t)
	target := filepath.Join(t.TempDir(), "roots-file")
	if err := os.WriteFile(target, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ledgerPath := filepath.Join(dir, "shared.db")
	c := clean(nil, "ln", "-s", target, ledgerPath)
	c.nobody = true
	run(t, c).expect(0)
	p := run(t, clean(nil, idemBin(t), "--ledger", ledgerPath, "run", "--key", "link:other-user", "--", "touch", filepath.Join(dir, "ran"))).expect(74)
	if !strings.Contains(p.stderr, "is a symbolic link another user made") || !strings.Contains(p.stderr, "idem: hint:") {
		t.Errorf("no reason or hint: %v", p)
	}
	if fi, err := os.Stat(target); err != nil || fi.Size() != 0 {
		t.Errorf("root's file became a ledger: %v %v", fi, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "ran")); err == nil {
		t.Errorf("the command ran")
	}
}

// In a shared directory, nobody hard-links a file of root's that anyone may
// write (a log, mode 0666; the kernel's protected_hardlinks lets a user
// link what it may write) as the -wal of root's ledger, whose own was
// removed by a checkpoint, or as its run lock, removed by a cleaner. The
// link's owner check passes (the file is root's), so without more SQLite
// would write the ledger's transactions, and the command's output, into
// that file, where nobody reads them, and the command would get it as fd
// 3. Root's idem refuses a ledger's file with a second name (74), runs
// nothing, and leaves the file as it was.
func TestHardLinkBesideLedgerIsRefused(t *testing.T) {
	needRoot(t)
	sqlite3 := needTool(t, "sqlite3")
	for _, tc := range []struct{ suffix, says string }{
		{"-wal", "shared.db-wal has 2 names (hard links)"},
		{".runlock", "shared.db.runlock has 2 names (hard links)"},
	} {
		t.Run(tc.suffix, func(t *testing.T) {
			_, dir := stickyDir(t)
			ledgerPath := filepath.Join(dir, "shared.db")
			run(t, clean(nil, idemBin(t), "--ledger", ledgerPath, "run", "--key", "link:first", "--", "true")).expect(0)
			if out, err := runOut(sqlite3, ledgerPath, "PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
				t.Fatalf("sqlite3: %v %s", err, out)
			}
			for _, f := range []string{ledgerPath + "-wal", ledgerPath + "-shm", ledgerPath + tc.suffix} {
				if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
					t.Fatal(err)
				}
			}
			shared := filepath.Join(dir, "shared.log")
			if err := os.WriteFile(shared, []byte("root's log\n"), 0o666); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(shared, 0o666); err != nil { // past the umask
				t.Fatal(err)
			}
			c := clean(nil, "ln", shared, ledgerPath+tc.suffix)
			c.nobody = true
			run(t, c).expect(0)
			ran := filepath.Join(dir, "ran")
			p := run(t, clean(nil, idemBin(t), "--ledger", ledgerPath, "run", "--key", "link:secret", "--", "appendto", ran, "SECRET")).expect(74)
			if !strings.Contains(p.stderr, tc.says) || !strings.Contains(p.stderr, "\nidem: hint: ") {
				t.Errorf("no reason or hint: %v", p)
			}
			if b, err := os.ReadFile(shared); err != nil || string(b) != "root's log\n" {
				t.Errorf("root's log was written: %q %v", b, err)
			}
			if fi, err := os.Stat(shared); err != nil || fi.Mode().Perm() != 0o666 {
				t.Errorf("root's log changed mode: %v %v", fi, err)
			}
			if _, err := os.Stat(ran); err == nil {
				t.Errorf("the command ran")
			}
		})
	}
}

// TestLedgerOfNamelessUserHint: a ledger whose owner has no user name (a
// systemd DynamicUser= service's uid) is refused to root with a hint that
// works without one (runuser needs a name): the hinted setpriv command,
// run as written, replays the service's recorded key.
func TestLedgerOfNamelessUserHint(t *testing.T) {
	setpriv := needTool(t, "setpriv")
	const uid = "61234"
	root := sharedDir(t)
	idem := copyExe(t, idemBin(t), mkdir(t, filepath.Join(root, "bin"), 0o755))
	state := mkdir(t, filepath.Join(root, "state"), 0o700)
	if err := os.Chown(state, 61234, 61234); err != nil {
		t.Fatal(err)
	}
	ledger := filepath.Join(state, "ledger.db")
	asService := func(args ...string) command {
		return clean(nil, setpriv, append([]string{"--reuid", uid, "--regid", uid, "--clear-groups", idem, "--ledger", ledger}, args...)...)
	}
	job := []string{"run", "--key", "backup:2026-12-07", "--", "echo", "backed up"}
	run(t, asService(job...)).expect(0)
	p := run(t, clean(nil, idem, append([]string{"--ledger", ledger}, job...)...)).expect(74)
	hint := "idem: hint: run idem as the ledger's owner: setpriv --reuid " + uid + " --regid " + uid + " --clear-groups idem …"
	if !strings.Contains(p.stderr, "owned by another user ("+uid+", uid "+uid+")") || !strings.Contains(p.stderr, hint) {
		t.Fatalf("refusal without a hint that works for a user without a name: %v", p)
	}
	p = run(t, asService(job...)).expect(0)
	if p.stdout != "backed up\n" || !strings.Contains(p.stderr, "idem: replayed backup:2026-12-07") {
		t.Errorf("the hinted command did not replay the key: %v", p)
	}
}
