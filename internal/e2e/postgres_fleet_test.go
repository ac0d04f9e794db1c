package e2e

// The shared PostgreSQL ledger with real idem processes (fleetIdem's
// build) on different hosts: where the test is about what one host can
// see of another, each host is an nsHost (PID and mount namespaces, boot
// id and state directory of its own); where a host's name is only a label,
// the test-only IDEM_TESTONLY_HOST / IDEM_TESTONLY_BOOT_ID alone. They
// need IDEM_TEST_POSTGRES, a DSN (see CONTRIBUTING.md; needPostgres); each test gets
// a database of its own, dropped afterwards.

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/internal/ledger/ledgertest"
)

func pgDatabase(t *testing.T) (string, *pgx.Conn) {
	t.Helper()
	dsn, db, err := ledgertest.NewPostgresDatabase(needPostgres(t), t.Cleanup)
	if err != nil {
		t.Fatal(err)
	}
	return dsn, db
}

// pgHostProc is one idem process that claims to run on host.
type pgHostProc struct {
	host string
	*process
}

// pgStartOnHost starts idem ARGS... as if on host (extra: more
// NAME=VALUE), in this machine's namespaces: for a test in which the host
// is a label (see nsHost for one in which hosts must not see each other).
func pgStartOnHost(t *testing.T, dsn, host, dir string, extra []string, args ...string) *pgHostProc {
	t.Helper()
	c := inherit(append([]string{"IDEM_LEDGER=" + dsn, "NO_COLOR=1",
		"IDEM_TESTONLY_HOST=" + host, "IDEM_TESTONLY_BOOT_ID=boot-" + host}, extra...), fleetIdem(t), args...)
	c.dir = dir
	return &pgHostProc{host: host, process: start(t, c)}
}

func pgLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}

type pgAttempt struct {
	n     int
	host  string
	class string
}

func pgHistory(t *testing.T, db *pgx.Conn, key string) []pgAttempt {
	t.Helper()
	rows, err := db.Query(context.Background(), `SELECT n, host, coalesce(class, '') FROM idem.attempts WHERE key = $1 ORDER BY id`, key)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []pgAttempt
	for rows.Next() {
		var a pgAttempt
		if err := rows.Scan(&a.n, &a.host, &a.class); err != nil {
			t.Fatal(err)
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// 32 idem processes on 32 hosts start at once on one key: the command
// runs exactly once; every other process replays it or reports it busy.
// The hosts share nothing but the ledger (no run lock, no /proc), so the
// ledger alone keeps the key to one execution.
func TestPostgresFleetOneExecution(t *testing.T) {
	timed(t)
	dsn, db := pgDatabase(t)
	pgFleetOneExecution(t, dsn, db)
}

// The same race through a PgBouncer in transaction mode.
func TestPgBouncerFleetOneExecution(t *testing.T) {
	timed(t)
	bouncer := needPgBouncer(t)
	dsn, db := pgDatabase(t)
	pgFleetOneExecution(t, pgBouncerDSN(t, bouncer, dsn), db)
}

func pgFleetOneExecution(t *testing.T, dsn string, db *pgx.Conn) {
	dir := t.TempDir()
	out := filepath.Join(dir, "executions")
	const n = 32
	const key = "deploy:fleet:42"
	fleetIdem(t) // built here, not in the racers' goroutines
	hosts := make([]*nsHost, n)
	for i := range n {
		hosts[i] = newNSHost(t, dir, fmt.Sprintf("host-%02d", i))
	}
	procs := make([]*pgHostProc, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, h := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			// The same command everywhere: the child learns its host from
			// the environment it inherits.
			procs[i] = &pgHostProc{host: h.name, process: h.start(t, dsn, nil,
				"run", "--key", key, "--", "sh", "-c", `appendto "$0" "$IDEM_KEY@$IDEM_TESTONLY_HOST" && sleeper 300ms`, out)}
		}()
	}
	close(start)
	wg.Wait()
	ran, replayed, busy := 0, 0, 0
	runner := ""
	for _, p := range procs {
		switch code := p.wait().code; {
		case code == 0 && strings.Contains(p.stderr, "idem: replayed "+key+": succeeded"):
			replayed++
		case code == 0 && p.stderr == "":
			ran++
			runner = p.host
		case code == 75 && strings.Contains(p.stderr, "is in progress on host-"):
			busy++
		default:
			t.Errorf("idem on %s: exit %d, stderr %q", p.host, code, p.stderr)
		}
	}
	got := pgLines(t, out)
	if len(got) != 1 || ran != 1 || got[0] != key+"@"+runner {
		t.Fatalf("executions %q, %d processes ran it (%s); want exactly one, by the one that ran", got, ran, runner)
	}
	if ran+replayed+busy != n {
		t.Errorf("ran %d + replayed %d + busy %d != %d", ran, replayed, busy, n)
	}
	h := pgHistory(t, db, key)
	if len(h) != 1 || h[0].host != runner || h[0].class != "success" {
		t.Errorf("history %+v, want one successful attempt on %s", h, runner)
	}
	t.Logf("%d processes: 1 ran (%s), %d replayed, %d busy", n, runner, replayed, busy)
}

// pgLeaseLive reports whether key's lease is still live by the server's clock.
func pgLeaseLive(t *testing.T, db *pgx.Conn, key string) bool {
	t.Helper()
	var live bool
	err := db.QueryRow(context.Background(),
		`SELECT coalesce(lease_expires > clock_timestamp(), false) FROM idem.records WHERE key = $1`, key).Scan(&live)
	if err != nil {
		t.Fatal(err)
	}
	return live
}

// pgJob is the command every run of the lease test's keys executes: it
// appends HOST/ATTEMPT to FILE and, when HOLD names a ready file, sleeps a
// minute (a holder, to be killed). Env is not part of the fingerprint, so
// holders and takers run the same command.
func pgJob(file string) []string {
	return []string{"sh", "-c", `appendto "$0" "$IDEM_TESTONLY_HOST/$IDEM_ATTEMPT" >/dev/null && if [ -n "$HOLD" ]; then sleeper 60s "$HOLD"; fi`, file}
}

// pgKillHolder runs key's job on host, waits until its child sleeps, and
// kills idem with SIGKILL (the shell it runs dies with it through
// Pdeathsig; the shell's sleeper is left to the host). The key is left in
// progress under a dead owner.
func pgKillHolder(t *testing.T, dsn string, host *nsHost, key, file string) {
	t.Helper()
	ready := filepath.Join(host.dir, key+".ready")
	p := host.start(t, dsn, []string{"HOLD=" + ready},
		append([]string{"run", "--key", key, "--lease", "3s", "--"}, pgJob(file)...)...)
	for range 1000 {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	idem := nsChild(t, p)
	if _, err := os.Stat(ready); err != nil {
		syscall.Kill(idem, syscall.SIGKILL)
		t.Fatalf("the holder's child never started: %v", p.wait())
	}
	syscall.Kill(idem, syscall.SIGKILL)
	p.wait()
}

// A dead owner on another host frees its key only when its lease expires:
// its pid means nothing there, and its processes cannot be seen from
// there. On the same host, the dead pid frees it at once. Hosts are
// nsHosts: a run on host-a shares host-a's namespaces with the holder it
// judges, one on host-b shares nothing with it.
func TestPostgresDeadHostLeaseExpiry(t *testing.T) {
	timed(t)
	dsn, db := pgDatabase(t)
	dir := t.TempDir()
	hostA, hostB := newNSHost(t, dir, "host-a"), newNSHost(t, dir, "host-b")
	const tooSlow = "the killed holder's lease already expired; the machine is too slow for this test's 3s lease"
	run := func(host *nsHost, key, file string) *process {
		return host.start(t, dsn, nil, append([]string{"run", "--key", key, "--"}, pgJob(file)...)...).wait()
	}

	// Same host: the pid is checked, the dead owner's key is taken over now.
	same := filepath.Join(dir, "same-host")
	pgKillHolder(t, dsn, hostA, "job:same-host", same)
	if !pgLeaseLive(t, db, "job:same-host") {
		t.Fatal(tooSlow)
	}
	if p := run(hostA, "job:same-host", same); p.code != 0 {
		t.Fatalf("same-host takeover: exit %d, stderr %q", p.code, p.stderr)
	}
	if got := pgLines(t, same); fmt.Sprint(got) != "[host-a/1 host-a/2]" {
		t.Errorf("same-host executions %q, want the killed holder's and the taker's", got)
	}

	// Another host: busy while the lease lives, although the pid is dead.
	other := filepath.Join(dir, "other-host")
	pgKillHolder(t, dsn, hostA, "job:other-host", other)
	if !pgLeaseLive(t, db, "job:other-host") {
		t.Fatal(tooSlow)
	}
	p := run(hostB, "job:other-host", other)
	if p.code != 75 || !strings.Contains(p.stderr, `key "job:other-host" is in progress on host-a`) {
		t.Fatalf("host-b while host-a's lease lives: exit %d, stderr %q; want 75, in progress on host-a", p.code, p.stderr)
	}
	if got := pgLines(t, other); fmt.Sprint(got) != "[host-a/1]" {
		t.Fatalf("executions %q while the dead holder's lease lives, want only the holder's", got)
	}
	// Once the lease has expired by the server's clock, host-b takes over.
	for range 200 {
		if !pgLeaseLive(t, db, "job:other-host") {
			break
		}
		time.Sleep(25 * time.Millisecond)
	}
	if p := run(hostB, "job:other-host", other); p.code != 0 {
		t.Fatalf("host-b after the lease expired: exit %d, stderr %q", p.code, p.stderr)
	}
	if got := pgLines(t, other); fmt.Sprint(got) != "[host-a/1 host-b/2]" {
		t.Errorf("executions %q, want the killed holder's, then host-b's after the expiry", got)
	}
	for key, want := range map[string][]pgAttempt{
		"job:same-host":  {{1, "host-a", "abandoned"}, {2, "host-a", "success"}},
		"job:other-host": {{1, "host-a", "abandoned"}, {2, "host-b", "success"}},
	} {
		if h := pgHistory(t, db, key); fmt.Sprint(h) != fmt.Sprint(want) {
			t.Errorf("%s history %+v, want %+v", key, h, want)
		}
	}
}

// A database that goes away while the command runs: idem retries its
// renewals, and when the lease would lapse it stops the command and exits
// 74 naming the server.
func TestPostgresConnectionLostMidRun(t *testing.T) {
	timed(t)
	dsn, db := pgDatabase(t)
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	p := pgStartOnHost(t, dsn, "host-a", dir, nil, "run", "--key", "job:lost", "--lease", "2s", "--", "sleeper", "60s", ready)
	// The sleeper creates the file, then writes its pid: wait for the pid.
	child := 0
	for range 1000 {
		if b, err := os.ReadFile(ready); err == nil {
			if child, _ = strconv.Atoi(string(b)); child > 0 {
				break
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	if child <= 0 {
		p.send(syscall.SIGKILL)
		t.Fatalf("the child never started: %v", p.wait())
	}
	// No new connections to the database, and idem's own is cut.
	ctx := context.Background()
	var name string
	if err := db.QueryRow(ctx, `SELECT current_database()`).Scan(&name); err != nil {
		t.Fatal(err)
	}
	admin, err := pgx.Connect(ctx, needPostgres(t)) // a database cannot close itself
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, `ALTER DATABASE `+pgx.Identifier{name}.Sanitize()+` WITH ALLOW_CONNECTIONS false`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND application_name = 'idem'`, name); err != nil {
		t.Fatal(err)
	}
	if code := p.wait().code; code != 74 {
		t.Fatalf("exit %d, stderr %q; want 74", code, p.stderr)
	}
	stderr := p.stderr
	if !strings.Contains(stderr, `idem: error: key "job:lost": could not renew the lease: `) ||
		!strings.Contains(stderr, "PostgreSQL at 127.0.0.1:") || !strings.Contains(stderr, "the command was stopped") ||
		strings.Contains(stderr, pgPassword(dsn)) {
		t.Errorf("stderr %q: want the lapsed lease, the server, no password", stderr)
	}
	if err := syscall.Kill(child, 0); err == nil {
		if st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", child)); !strings.Contains(string(st), ") Z ") {
			t.Errorf("the child (pid %d) still runs after idem gave up its lease", child)
		}
	}
}

// pgPassword is dsn's password, or a string no output contains.
func pgPassword(dsn string) string {
	if u, err := url.Parse(dsn); err == nil {
		if pw, ok := u.User.Password(); ok && pw != "" {
			return pw
		}
	}
	return "\x00no password\x00"
}
