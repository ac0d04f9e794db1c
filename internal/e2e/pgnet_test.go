package e2e

// PostgreSQL on a bad network: a held row lock, a frozen path to the
// server, a server whose clock is off, a server restart during the
// outcome's write or a job, and a server with few connections to give.

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgProcOn starts idem (bin) as host with the ledger at dsn, its state
// directory (run locks) its own, like a host of its own.
func pgProcOn(t *testing.T, bin, dsn, host, dir string, args ...string) *process {
	t.Helper()
	state := filepath.Join(dir, "state-"+host)
	c := inherit([]string{"IDEM_LEDGER=" + dsn, "NO_COLOR=1", "XDG_STATE_HOME=" + state,
		"IDEM_TESTONLY_HOST=" + host, "IDEM_TESTONLY_BOOT_ID=boot-" + host}, bin, args...)
	c.dir, c.timeout = dir, 2*time.Minute
	return start(t, c)
}

// waitFileFields waits for path to hold a line and returns its fields.
func waitFileFields(t *testing.T, path string, within time.Duration) []string {
	t.Helper()
	f := waitFileFieldsOr(path, within)
	if f == nil {
		t.Fatalf("%s never appeared", path)
	}
	return f
}

// waitFileFieldsOr is waitFileFields, nil when the file never appeared.
func waitFileFieldsOr(path string, within time.Duration) []string {
	for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if b, err := os.ReadFile(path); err == nil && strings.HasSuffix(string(b), "\n") {
			return strings.Fields(string(b))
		}
	}
	return nil
}

// A reservation behind a row lock that a stuck transaction holds gives up
// at --deadline / --wait-timeout with exit 75, nothing run, instead of
// waiting for the lock.
func TestPostgresReserveBehindHeldLock(t *testing.T) {
	quiet(t)
	dsn, db := pgDatabase(t)
	dir := t.TempDir()
	const key = "lock:held:1"
	marks := filepath.Join(dir, "ran")
	job := []string{"run", "--key", key, "--", "appendto", marks, "x"}
	pgProcOn(t, idemBin(t), dsn, "host-a", dir, job...).wait().expect(0)
	ctx := context.Background()
	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM idem.records WHERE key = $1 FOR UPDATE`, key); err != nil {
		t.Fatal(err)
	}
	for _, flags := range [][]string{{"--deadline", "3s", "--wait-timeout", "3s"}, {"--deadline", "3s"}, {"--wait-timeout", "3s"}} {
		p := pgProcOn(t, idemBin(t), dsn, "host-b", dir,
			append(append([]string{"run", "--key", key}, flags...), "--", "appendto", marks, "x")...)
		// The lock is held for longer than the test waits (a minute).
		p.wait()
		if p.code != 75 || !strings.Contains(p.stderr, "nothing ran") || !strings.Contains(p.stderr, `"`+key+`"`) {
			t.Errorf("%v behind a held row lock: %v; want exit 75, nothing ran", flags, p)
		}
	}
	if got := pgLines(t, marks); len(got) != 1 {
		t.Errorf("the command ran %d times, want once", len(got))
	}
}

// The path to the server freezes (a SIGSTOPped proxy) 2s into host A's
// job: A's child is stopped, and dead, at least a second before A's lease
// expires by the server's clock; host B, connected directly, takes the
// key over only then, and its child starts after A's died. A and B are
// nsHosts: B cannot find A's child by its environment or its run lock, as
// no real host could, so only the lease keeps them apart.
func TestPostgresFrozenPathChildDiesBeforeTakeover(t *testing.T) {
	timed(t)
	dsn, db := pgDatabase(t)
	dir := t.TempDir()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	proxyAddr := ln.Addr().String()
	ln.Close()
	proxy := start(t, inherit(nil, "tcpproxy", proxyAddr, u.Host))
	for range 400 {
		if c, err := net.Dial("tcp", proxyAddr); err == nil {
			c.Close()
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	via := *u
	via.Host = proxyAddr
	const key = "frozen:path:1"
	hostA, hostB := newNSHost(t, dir, "host-a"), newNSHost(t, dir, "host-b")
	aBeat, bBeat := filepath.Join(dir, "host-a.beat"), filepath.Join(dir, "host-b.beat")
	// One command for both hosts (one fingerprint): its host names its file.
	child := []string{"sh", "-c", `exec heartbeat "$IDEM_TESTONLY_HOST.beat"`}
	a := start(t, hostA.command(t, fleetIdem(t), via.String(), nil,
		append([]string{"run", "--key", key, "--lease", "6s", "--"}, child...)...))
	fa := waitFileFields(t, aBeat, 30*time.Second)
	aNSPid, _ := strconv.Atoi(fa[0])
	aPid := hostA.pid(aNSPid)
	if aPid == 0 {
		t.Fatalf("host A's child (pid %d there) is not on host A", aNSPid)
	}
	aStart, _ := strconv.ParseInt(fa[1], 10, 64)
	time.Sleep(time.Until(time.Unix(0, aStart).Add(2 * time.Second)))
	proxy.send(syscall.SIGSTOP)
	defer proxy.send(syscall.SIGCONT)

	b := start(t, hostB.command(t, fleetIdem(t), dsn, nil,
		append([]string{"run", "--key", key, "--lease", "6s", "--wait", "--wait-timeout", "60s", "--"}, child...)...))
	// A's child: when it is gone (an upper bound of its death).
	var aDied time.Time
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
		if syscall.Kill(aPid, 0) != nil {
			aDied = time.Now()
			break
		}
		if st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", aPid)); strings.Contains(string(st), ") Z ") {
			aDied = time.Now()
			break
		}
	}
	if aDied.IsZero() {
		t.Fatal("host A's child still runs 30s after the path to the server froze")
	}
	// A's lease as the server has it: A could not renew it since.
	var status, owner string
	var expires time.Time
	if err := db.QueryRow(context.Background(), `SELECT status, owner_host, lease_expires FROM idem.records WHERE key = $1`, key).
		Scan(&status, &owner, &expires); err != nil {
		t.Fatal(err)
	}
	if status != "in_progress" || owner != "host-a" {
		t.Fatalf("when A's child died the record was %s, owned by %s; want in progress, host-a's", status, owner)
	}
	if margin := expires.Sub(aDied); margin < time.Second {
		t.Errorf("A's child died %s before its lease expired on the server, want at least 1s", margin)
	} else {
		t.Logf("A's child died %s before its lease expired on the server", margin.Round(time.Millisecond))
	}
	if a.wait().code != 74 || !strings.Contains(a.stderr, "the command was stopped") {
		t.Errorf("host A: %v; want exit 74, the command stopped", a)
	}
	fb := waitFileFieldsOr(bBeat, 60*time.Second)
	if fb == nil {
		syscall.Kill(nsChild(t, b), syscall.SIGTERM)
		t.Fatalf("host B's child never started: %v", b.wait())
	}
	bStart, _ := strconv.ParseInt(fb[1], 10, 64)
	if !time.Unix(0, bStart).After(aDied) || !time.Unix(0, bStart).After(expires) {
		t.Errorf("B's child started at %s; A's died by %s, its lease expired at %s",
			time.Unix(0, bStart).Format(time.StampMicro), aDied.Format(time.StampMicro), expires.Format(time.StampMicro))
	}
	bNSPid, _ := strconv.Atoi(fb[0])
	syscall.Kill(hostB.pid(bNSPid), syscall.SIGTERM)
	b.wait()
	if b.code != 143 {
		t.Errorf("host B, its child stopped by SIGTERM: %v; want 143", b)
	}
}

// --wait, inspect and --since judge a record's times by the server's
// clock: with the server an hour ahead, a waiting host takes a dead host's
// key once its lease expired (not at --wait-timeout) and inspect shows a
// 6s lease expiring in seconds; with the server an hour behind, --since
// 30m lists a fresh record and a live lease shows as live.
func TestPostgresSkewedServerClock(t *testing.T) {
	busy(t)
	for _, skew := range []string{"+1h", "-1h"} {
		t.Run(skew, func(t *testing.T) {
			t.Parallel() // each has its own server
			pg := startPrivatePostgres(t, pgPrivateOptions{faketime: skew})
			dir := t.TempDir()
			idem := fleetIdem(t)
			marks := filepath.Join(dir, "ran")
			// A live lease, seen from another host.
			ready := filepath.Join(dir, "live.beat")
			holder := pgProcOn(t, idem, pg.dsn, "host-a", dir, "run", "--key", "skew:live", "--lease", "20s", "--", "heartbeat", ready)
			waitFileFields(t, ready, 30*time.Second)
			insp := pgProcOn(t, idem, pg.dsn, "host-b", dir, "inspect", "skew:live").wait().expect(0)
			if !regexp.MustCompile(`lease expires \S+ \(in 1\ds\)`).MatchString(insp.stdout) ||
				!regexp.MustCompile(`created: +\S+ \([0-5]s ago\)`).MatchString(insp.stdout) {
				t.Errorf("inspect of a live 20s lease, server clock %s: %s", skew, insp.stdout)
			}
			holder.send(syscall.SIGKILL)
			holder.wait()

			// A dead host's key: its 3s lease expires, and a waiting host
			// takes it over.
			// The same command for both: it holds while the .hold file is
			// there.
			dead := filepath.Join(dir, "dead.beat")
			job := []string{"sh", "-c", `appendto "$0" "$IDEM_TESTONLY_HOST" >/dev/null; if [ -e "$1.hold" ]; then exec heartbeat "$1"; fi`, marks, dead}
			if err := os.WriteFile(dead+".hold", nil, 0o644); err != nil {
				t.Fatal(err)
			}
			h := pgProcOn(t, idem, pg.dsn, "host-a", dir, append([]string{"run", "--key", "skew:dead", "--lease", "3s", "--"}, job...)...)
			waitFileFields(t, dead, 30*time.Second)
			h.send(syscall.SIGKILL)
			h.wait()
			os.Remove(dead + ".hold")
			w := pgProcOn(t, idem, pg.dsn, "host-b", dir, append([]string{"run", "--key", "skew:dead", "--wait", "--wait-timeout", "40s", "--"}, job...)...).wait()
			if w.code != 0 || fmt.Sprint(pgLines(t, marks)) != "[host-a host-b]" {
				t.Errorf("--wait on a dead host's key, server clock %s: %v; want it taken over, exit 0", skew, w)
			}

			// A fresh record, listed with --since.
			pgProcOn(t, idem, pg.dsn, "host-b", dir, "run", "--key", "skew:fresh", "--", "true").wait().expect(0)
			l := pgProcOn(t, idem, pg.dsn, "host-b", dir, "inspect", "--since", "30m").wait().expect(0)
			if !strings.Contains(l.stdout, "skew:fresh") {
				t.Errorf("inspect --since 30m, server clock %s, does not list the fresh record:\n%s", skew, l.stdout)
			}
			if m := regexp.MustCompile(`skew:fresh +succeeded +\S+ +\S+ +\S+ +(\S+)`).FindStringSubmatch(l.stdout); m == nil || !regexp.MustCompile(`^[0-5]s$`).MatchString(m[1]) {
				t.Errorf("inspect --since 30m, server clock %s: the fresh record's age is not a few seconds:\n%s", skew, l.stdout)
			}
		})
	}
}

// The server restarts while idem writes the outcome (the child stops it
// as its last act; it comes back 3s later): the outcome is recorded, idem
// exits with the child's code, a repeat replays, the command ran once.
func TestPostgresRestartDuringOutcome(t *testing.T) {
	busy(t)
	pg := startPrivatePostgres(t, pgPrivateOptions{})
	dir := t.TempDir()
	idem := fleetIdem(t)
	marks := filepath.Join(dir, "ran")
	script := `appendto "$0" ran >/dev/null && echo done && ` + pg.shellCtl("stop") + ` >/dev/null &&
		(unset IDEM_RUN; setsid sh -c 'sleep 3; exec "$@"' restart ` + pg.shellCtl("start") + ` </dev/null >/dev/null 2>&1 &)`
	p := pgProcOn(t, idem, pg.dsn, "host-a", dir, "run", "--key", "restart:outcome", "--", "sh", "-c", script, marks).wait()
	if p.code != 0 || p.stdout != "done\n" {
		t.Fatalf("the run whose outcome met a server restart: %v; want exit 0", p)
	}
	insp := pgProcOn(t, idem, pg.dsn, "host-a", dir, "inspect", "restart:outcome").wait().expect(0)
	if !strings.Contains(insp.stdout, "status:       succeeded") {
		t.Errorf("inspect after the restart: %s", insp.stdout)
	}
	r := pgProcOn(t, idem, pg.dsn, "host-b", dir, "run", "--key", "restart:outcome", "--", "sh", "-c", script, marks).wait().expect(0)
	if r.stdout != "done\n" || !strings.Contains(r.stderr, "replayed restart:outcome") {
		t.Errorf("the repeat: %v; want the replay", r)
	}
	if got := pgLines(t, marks); len(got) != 1 {
		t.Errorf("the command ran %d times, want once", len(got))
	}
}

// A restart in the middle of a job: the renewals ride it out, the outcome
// is recorded.
func TestPostgresRestartMidJob(t *testing.T) {
	timed(t) // the job must have started within the second before the restart
	pg := startPrivatePostgres(t, pgPrivateOptions{})
	dir := t.TempDir()
	idem := fleetIdem(t)
	beat := filepath.Join(dir, "beat")
	p := pgProcOn(t, idem, pg.dsn, "host-a", dir, "run", "--key", "restart:mid", "--lease", "20s", "--",
		"sh", "-c", `while [ ! -e "$0.go" ]; do sleep 0.05; done; echo finished`, beat)
	time.Sleep(time.Second)
	pg.ctl("restart")
	time.Sleep(6 * time.Second) // a renewal (every 5s) meets the new server
	if err := os.WriteFile(beat+".go", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if p.wait().code != 0 || p.stdout != "finished\n" {
		t.Fatalf("a job across a server restart: %v; want exit 0", p)
	}
	insp := pgProcOn(t, idem, pg.dsn, "host-a", dir, "inspect", "restart:mid").wait().expect(0)
	if !strings.Contains(insp.stdout, "status:       succeeded") {
		t.Errorf("inspect after the restart: %s", insp.stdout)
	}
}

// More concurrent runs than the server has connections: each waits for a
// connection (with backoff) instead of failing, and every key runs once.
func TestPostgresFewConnections(t *testing.T) {
	busy(t)
	pg := startPrivatePostgres(t, pgPrivateOptions{maxConnections: 8})
	dir := t.TempDir()
	idem := fleetIdem(t)
	// The schema first, so that the runs below race only for connections.
	pgProcOn(t, idem, pg.dsn, "host-a", dir, "run", "--key", "fewconn:setup", "--", "true").wait().expect(0)
	const n = 40
	marks := filepath.Join(dir, "ran")
	procs := make([]*process, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			procs[i] = pgProcOn(t, idem, pg.dsn, "host-a", dir, "run", "--key", fmt.Sprintf("fewconn:%02d", i), "--",
				"sh", "-c", `sleep 0.5; appendto "$0" "$IDEM_KEY" >/dev/null`, marks)
		}()
	}
	wg.Wait()
	for i, p := range procs {
		if p.wait().code != 0 {
			t.Errorf("run %d of %d with 8 connections: %v", i, n, p)
		}
	}
	seen := map[string]int{}
	f, err := os.Open(marks)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for sc := bufio.NewScanner(f); sc.Scan(); {
		seen[sc.Text()]++
	}
	for i := range n {
		if k := fmt.Sprintf("fewconn:%02d", i); seen[k] != 1 {
			t.Errorf("%s ran %d times, want once", k, seen[k])
		}
	}
	_ = pgx.Identifier{}
}
