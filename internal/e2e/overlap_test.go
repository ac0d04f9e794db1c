package e2e

// Two executions of a key never overlap: the ways they did (an abandoned
// run's TERM-ignoring grandchild left running by a taker that died, by a
// crash before the group was recorded, by a purge, by an owner in another
// PID namespace, by a child that left its group, by a next attempt), each
// reproduced with real processes, and a chaos run that kills and stops
// idem and its children at random for a minute. The command holds an flock
// (overlapjob), inherited by its grandchild: an execution that starts while
// one of an earlier execution still runs finds it taken, and says so.

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/idemhq/idem/internal/ledger"
)

// overlapjob LOCK LOG: takes an exclusive flock on LOCK without
// waiting: taken by an earlier execution, it appends "overlap" to LOG and
// exits 3. Otherwise it appends "start PID", starts a grandchild that
// inherits the flock, ignores SIGTERM, appends "gc PID" and sleeps 30s, and
// then, by $OVERLAPJOB_MODE (comma-separated words; not in argv, so that
// runs of one key in different modes share its fingerprint):
//
//	hang        sleeps 60s
//	exit75      exits 75 at once when it is the first start in LOG, else 0
//	setsid      the grandchild leaves the group and the session first
//	short       sleeps a random 0-300ms and exits 75; its grandchild lives
//	            a random 0-1s, and half the time starts with an empty
//	            environment but keeps idem's fd 3 (as fd 4)
//	succeed     logs "okstart KEY UNIXNANO" (no grandchild), sleeps a
//	            random 0-300ms and exits 0
func overlapjob() {
	if os.Args[1] == "-gc" {
		signal.Ignore(syscall.SIGTERM)
		if os.Args[3] == "setsid" {
			syscall.Setsid()
		}
		appendLine(os.Args[2], fmt.Sprintf("gc %d", os.Getpid()))
		d, _ := time.ParseDuration(os.Args[4])
		time.Sleep(d)
		return
	}
	lock, logf, mode := os.Args[1], os.Args[2], ","+os.Getenv("OVERLAPJOB_MODE")+","
	has := func(w string) bool { return strings.Contains(mode, ","+w+",") }
	f, err := os.OpenFile(lock, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		appendLine(logf, fmt.Sprintf("overlap %d", os.Getpid()))
		fmt.Println("overlap")
		os.Exit(3)
	}
	if has("succeed") {
		appendLine(logf, fmt.Sprintf("okstart %s %d", os.Getenv("IDEM_KEY"), time.Now().UnixNano()))
		time.Sleep(time.Duration(rand.IntN(300)) * time.Millisecond)
		fmt.Println("done")
		return
	}
	b, _ := os.ReadFile(logf)
	first := !strings.Contains(string(b), "start ")
	appendLine(logf, fmt.Sprintf("start %d", os.Getpid()))
	gcMode, life := "group", "30s"
	if has("setsid") {
		gcMode = "setsid"
	}
	if has("short") {
		life = fmt.Sprintf("%dms", rand.IntN(1000))
	}
	if !has("exit75") || first {
		g := exec.Command("overlapjob", "-gc", logf, gcMode, life)
		g.ExtraFiles = []*os.File{f}
		if has("short") && rand.IntN(2) == 0 {
			// Invisible to a scan by IDEM_RUN; holds the run lock.
			g.Env = []string{"PATH=" + os.Getenv("PATH")}
			g.ExtraFiles = append(g.ExtraFiles, os.NewFile(3, "runlock"))
		}
		if err := g.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		for i := 0; i < 400 && !strings.Contains(readFile(logf), fmt.Sprintf("gc %d", g.Process.Pid)); i++ {
			time.Sleep(5 * time.Millisecond)
		}
	}
	switch {
	case has("hang"):
		time.Sleep(time.Minute)
	case has("exit75") && first:
		os.Exit(75)
	case has("short"):
		time.Sleep(time.Duration(rand.IntN(300)) * time.Millisecond)
		os.Exit(75)
	}
	fmt.Println("done")
}

func appendLine(path, line string) {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fmt.Fprintln(f, line)
	f.Close()
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// overlapRig is a leaseRig with overlapjob's lock and log.
type overlapRig struct {
	*leaseRig
	lock, log string
}

func newOverlapRig(t *testing.T) *overlapRig {
	g := &overlapRig{leaseRig: newLeaseRig(t)}
	g.lock, g.log = g.path("job.lock"), g.path("job.log")
	t.Cleanup(g.killLeft)
	return g
}

// job is `idem run --key KEY FLAGS... -- overlapjob LOCK LOG` in mode.
func (g *overlapRig) job(mode, key string, flags ...string) command {
	args := append([]string{"idem", "run", "--key", key}, flags...)
	c := g.command(append(args, "--", "overlapjob", g.lock, g.log)...)
	c.env = append(append([]string{}, g.env...), "OVERLAPJOB_MODE="+mode)
	return c
}

// waitLog waits until the log has n lines that start with prefix.
func (g *overlapRig) waitLog(prefix string, n int) {
	g.t.Helper()
	for range 2000 {
		if g.count(prefix) >= n {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	g.t.Fatalf("the job log never got %d %q lines:\n%s", n, prefix, readFile(g.log))
}

func (g *overlapRig) count(prefix string) int {
	n := 0
	for _, l := range strings.Split(readFile(g.log), "\n") {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}

// noOverlap fails the test if an execution found an earlier one running.
func (g *overlapRig) noOverlap() {
	g.t.Helper()
	if n := g.count("overlap"); n > 0 {
		g.t.Fatalf("%d executions overlapped an earlier one:\n%s", n, readFile(g.log))
	}
}

// killLeft kills the grandchildren the log names (a test that failed may
// leave them).
func (g *overlapRig) killLeft() {
	for _, l := range strings.Split(readFile(g.log), "\n") {
		if pid, ok := strings.CutPrefix(l, "gc "); ok {
			if n, err := strconv.Atoi(pid); err == nil {
				syscall.Kill(n, syscall.SIGKILL)
			}
		}
	}
}

// killed kills p with SIGKILL and waits for it.
func killed(t *testing.T, p *process) {
	t.Helper()
	p.send(syscall.SIGKILL)
	p.wait()
}

// TestOverlapTakerDies: the owner is SIGKILLed; the next run takes over and
// waits out the old grandchild's kill grace; it is SIGKILLed meanwhile. The
// run after it must still find and stop the grandchild before it starts.
func TestOverlapTakerDies(t *testing.T) {
	timed(t)
	needProcs(t)
	g := newOverlapRig(t)
	a := start(t, g.job("hang", "overlap:taker-dies"))
	g.waitLog("gc ", 1)
	killed(t, a)
	b := start(t, g.job("hang", "overlap:taker-dies", "--kill-grace", "20s", "--lease", "60s"))
	time.Sleep(500 * time.Millisecond) // b has taken over, and waits the grace
	killed(t, b)
	c := run(t, g.job("exit75", "overlap:taker-dies", "--kill-grace", "200ms"))
	g.noOverlap()
	if c.code != 0 || !strings.Contains(c.stdout, "done") {
		t.Fatalf("the third run did not execute cleanly: %v", c)
	}
}

// TestOverlapCrashBeforeGroupRecorded: idem dies after its child started
// but before the child's group reached the ledger (here the ledger is busy:
// ledgerhog takes its write lock right after the reservation committed).
// The grandchild started meanwhile is stopped before the next run starts.
func TestOverlapCrashBeforeGroupRecorded(t *testing.T) {
	timed(t)
	needProcs(t)
	g := newOverlapRig(t)
	g.run("run", "--key", "overlap:warm-ledger", "--", "/bin/true").expect(0)
	// The race with the child's start is lost now and then: three rounds.
	for round := range 3 {
		key := fmt.Sprintf("overlap:setchild-%d", round)
		hogged := g.path(fmt.Sprintf("hogged-%d", round))
		hog := start(t, g.command("ledgerhog", g.ledger, hogged, "2s"))
		gcs := g.count("gc ")
		a := start(t, g.job("hang", key))
		for i := 0; i < 400 && !fileExists(hogged); i++ {
			time.Sleep(5 * time.Millisecond)
		}
		for i := 0; i < 200 && g.count("gc ") == gcs; i++ {
			time.Sleep(5 * time.Millisecond) // the child starts (or idem waits before it)
		}
		killed(t, a)
		hog.wait()
		c := run(t, g.job("exit75", key, "--kill-grace", "200ms"))
		g.noOverlap()
		if c.code != 0 {
			t.Fatalf("the next run did not execute cleanly: %v", c)
		}
	}
}

// ledgerhog LEDGER READY HOLD: waits (polling, without sleeping) until the
// ledger's WAL changes, takes the ledger's write lock at once, writes
// READY, holds the lock for HOLD and lets go.
func ledgerhog() {
	path, ready := os.Args[1], os.Args[2]
	hold, _ := time.ParseDuration(os.Args[3])
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err == nil {
		db.SetMaxOpenConns(1)
		_, err = db.Exec("SELECT count(*) FROM records")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ledgerhog:", err)
		os.Exit(2)
	}
	stamp := func() string {
		fi, err := os.Stat(path + "-wal")
		if err != nil {
			return ""
		}
		return fmt.Sprint(fi.Size(), fi.ModTime().UnixNano())
	}
	first := stamp()
	for deadline := time.Now().Add(10 * time.Second); stamp() == first && time.Now().Before(deadline); {
	}
	conn, err := db.Conn(context.Background())
	if err == nil {
		_, err = conn.ExecContext(context.Background(), "BEGIN IMMEDIATE")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ledgerhog:", err)
		os.Exit(2)
	}
	os.WriteFile(ready, nil, 0o644)
	time.Sleep(hold)
	conn.ExecContext(context.Background(), "ROLLBACK")
}

// TestOverlapPurgeKeepsExpired: a purge without --force keeps an in_progress
// record whose lease expired (its processes may still run), and the next
// run stops them before it starts.
func TestOverlapPurgeKeepsExpired(t *testing.T) {
	timed(t)
	needProcs(t)
	g := newOverlapRig(t)
	a := start(t, g.job("hang", "overlap:purge", "--lease", "1s"))
	g.waitLog("gc ", 1)
	killed(t, a)
	time.Sleep(1200 * time.Millisecond) // past the lease
	p := g.run("purge", "overlap:purge")
	if p.code != 75 {
		t.Errorf("purge of an expired in_progress record: %v, want exit 75 (kept)", p)
	}
	c := run(t, g.job("exit75", "overlap:purge", "--kill-grace", "200ms"))
	g.noOverlap()
	if c.code != 0 {
		t.Fatalf("the next run did not execute cleanly: %v", c)
	}
}

// TestOverlapEscapedGroup: the grandchild leaves its process group and
// session (setsid, as daemonising scripts do); the next run still stops it.
func TestOverlapEscapedGroup(t *testing.T) {
	needProcs(t)
	g := newOverlapRig(t)
	a := start(t, g.job("setsid,hang", "overlap:setsid"))
	g.waitLog("gc ", 1)
	killed(t, a)
	c := run(t, g.job("exit75", "overlap:setsid", "--kill-grace", "200ms"))
	g.noOverlap()
	if c.code != 0 {
		t.Fatalf("the next run did not execute cleanly: %v", c)
	}
}

// TestOverlapNextAttempt: an attempt exits 75 and leaves a background job
// (TERM-ignoring); the next attempt starts only once it is gone.
func TestOverlapNextAttempt(t *testing.T) {
	needProcs(t)
	g := newOverlapRig(t)
	c := run(t, g.job("exit75", "overlap:next-attempt", "--kill-grace", "200ms", "--initial-delay", "10ms"))
	g.noOverlap()
	if c.code != 0 || g.count("start ") != 2 {
		t.Fatalf("want two attempts, the second clean: %v\n%s", c, readFile(g.log))
	}
}

// nsChild is the process that unshare --fork started (idem, in the new
// PID namespace), as this namespace numbers it.
func nsChild(t *testing.T, unshare *process) int {
	t.Helper()
	for range 400 {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", unshare.pid(), unshare.pid()))
		if f := strings.Fields(string(b)); len(f) > 0 {
			n, _ := strconv.Atoi(f[0])
			return n
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("unshare started no child")
	return 0
}

// TestOverlapPIDNamespace: an owner in its own PID namespace (a container
// sharing the ledger) is paused past its lease. A run in the parent
// namespace sees its processes: it stops the paused idem and its processes,
// then runs. A run in a sibling namespace cannot see them: it finds the
// key's run lock held and reports busy without running; once the owner
// resumes (and, fenced off, stops its run), the key runs. Nothing overlaps.
func TestOverlapPIDNamespace(t *testing.T) {
	timed(t)
	needProcs(t)
	unshare := needTool(t, "unshare")
	if os.Geteuid() != 0 {
		t.Skip("unshare --pid needs root")
	}
	g := newOverlapRig(t)
	ns := func(c command) command {
		c.argv = append([]string{unshare, "--pid", "--fork", "--mount-proc"}, c.argv...)
		return c
	}
	paused := func(key string) (*process, int) {
		t.Helper()
		n := g.count("gc ")
		a := start(t, ns(g.job("hang", key, "--lease", "1s", "--kill-grace", "300ms")))
		g.waitLog("gc ", n+1)
		idem := nsChild(t, a)
		syscall.Kill(idem, syscall.SIGSTOP)
		t.Cleanup(func() { syscall.Kill(idem, syscall.SIGCONT) })
		time.Sleep(1500 * time.Millisecond) // past the lease
		return a, idem
	}

	// the parent namespace sees the owner's processes and stops them
	a, _ := paused("overlap:pidns-parent")
	c := run(t, g.job("exit75", "overlap:pidns-parent", "--kill-grace", "200ms"))
	g.noOverlap()
	if c.code != 0 || !strings.Contains(c.stdout, "done") {
		t.Fatalf("the parent namespace's run did not execute cleanly: %v", c)
	}
	a.wait()

	// a sibling namespace cannot see them: busy, until they are gone
	a, idem := paused("overlap:pidns-sibling")
	sib := run(t, ns(g.job("exit75", "overlap:pidns-sibling", "--kill-grace", "200ms")))
	g.noOverlap()
	if sib.code != 75 || !strings.Contains(sib.stderr, "held by processes of an earlier run that idem cannot see") {
		t.Errorf("the sibling namespace's run: %v, want exit 75, held by processes it cannot see", sib)
	}
	syscall.Kill(idem, syscall.SIGCONT)
	a.wait()
	sib = run(t, ns(g.job("exit75", "overlap:pidns-sibling", "--kill-grace", "200ms")))
	g.noOverlap()
	if sib.code != 0 {
		t.Errorf("the sibling namespace's run once the owner ended: %v", sib)
	}
}

// TestOverlapChaos runs one key for a minute while a chaos loop SIGKILLs,
// SIGSTOPs and SIGCONTs idem processes and their children at random. The
// command exits 75 (so the key keeps running) and leaves a grandchild that
// ignores SIGTERM: half of them clear their environment and keep fd 3,
// the others keep IDEM_RUN and close fd 3. Meanwhile a cleaner deletes
// the run lock file now and then (as rm, not as an age-based cleaner,
// which the kept-fresh times hold off), and a loop of nobody's keeps
// respawning TERM-ignoring processes that carry a copy of a run's
// IDEM_RUN. Beside it, runs of a few keys whose command succeeds suffer
// the same chaos. No execution may start while one of an earlier one
// runs, nobody's processes are never signalled, the key keeps running,
// and no key whose success was recorded starts again.
func TestOverlapChaos(t *testing.T) {
	needProcs(t)
	if testing.Short() {
		t.Skip("a minute of chaos; skipped with -short")
	}
	g := newOverlapRig(t)
	dur := time.Minute
	if s := os.Getenv("IDEM_TEST_CHAOS"); s != "" {
		dur, _ = time.ParseDuration(s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	job := g.job("short", "overlap:chaos", "--lease", "1s", "--kill-grace", "200ms", "--max-attempts", "1000000", "--transient-codes", "1-255",
		"--initial-delay", "10ms", "--max-delay", "50ms", "--deadline", "3s")
	errs, err := os.Create(g.path("idem.stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer errs.Close()
	// The succeeding keys: each its own lock file (an overlap is of one
	// key's executions), the same log.
	okKey := func(i int) string { return fmt.Sprintf("overlap:chaos-ok-%d", i) }
	okJob := func(i int) command {
		c := g.job("succeed", okKey(i), "--lease", "1s", "--kill-grace", "200ms", "--max-attempts", "1000000", "--transient-codes", "1-255",
			"--initial-delay", "10ms", "--max-delay", "50ms", "--deadline", "3s")
		c.argv[len(c.argv)-2] = g.path(fmt.Sprintf("ok-%d.lock", i))
		return c
	}
	const okKeys = 4
	kills, stops, runs, cleans := 0, 0, 0, 0
	// spawn starts an idem of job, its stderr to errs, reaped when it ends.
	spawn := func(job command) *exec.Cmd {
		c := exec.Command(job.argv[0], job.argv[1:]...)
		c.Dir, c.Env = job.dir, job.env
		c.Stderr = errs
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		runs++
		go c.Wait()
		return c
	}
	var live, liveOK []*exec.Cmd
	var stopped []int
	stoppedAt := map[int]time.Time{}
	nextClean := time.Now().Add(time.Second)
	forgedPID := 0
	for ctx.Err() == nil {
		if forgedPID == 0 {
			if marker := runMarker(runProcs()); marker != "" {
				forgedPID = waitPID(t, forger(t, marker, true), 0)
			}
		}
		if time.Now().After(nextClean) {
			if os.Remove(g.ledger+".runlock") == nil {
				cleans++
			}
			nextClean = time.Now().Add(time.Duration(1000+rand.IntN(2000)) * time.Millisecond)
		}
		// Up to three idems at once.
		for len(live) < 3 {
			live = append(live, spawn(job))
		}
		// And a run of a succeeding key, most times round, two at most.
		if len(liveOK) < 2 && rand.IntN(3) > 0 {
			liveOK = append(liveOK, spawn(okJob(1+rand.IntN(okKeys))))
		}
		time.Sleep(time.Duration(50+rand.IntN(250)) * time.Millisecond)
		// Reap the idems that ended.
		running := func(cs []*exec.Cmd) []*exec.Cmd {
			kept := cs[:0]
			for _, c := range cs {
				if syscall.Kill(c.Process.Pid, 0) == nil && !zombie(c.Process.Pid) {
					kept = append(kept, c)
				}
			}
			return kept
		}
		live, liveOK = running(live), running(liveOK)
		// Pick a victim: an idem, or a process of a run (by its IDEM_RUN).
		victims := runProcs()
		for _, c := range append(slices.Clone(live), liveOK...) {
			victims = append(victims, c.Process.Pid)
		}
		if len(victims) == 0 {
			continue
		}
		v := victims[rand.IntN(len(victims))]
		switch rand.IntN(4) {
		case 0, 1:
			syscall.Kill(v, syscall.SIGKILL)
			kills++
		case 2:
			syscall.Kill(v, syscall.SIGSTOP)
			stopped = append(stopped, v)
			stoppedAt[v] = time.Now()
			stops++
		case 3:
			if len(stopped) > 0 {
				i := rand.IntN(len(stopped))
				syscall.Kill(stopped[i], syscall.SIGCONT)
				stopped = append(stopped[:i], stopped[i+1:]...)
			}
		}
		// A pause ends, if not sooner, a while past the 1s lease (an idem
		// stopped for ever holds its key's run lock for ever: busy).
		kept2 := stopped[:0]
		for _, pid := range stopped {
			if time.Since(stoppedAt[pid]) > 2*time.Second {
				syscall.Kill(pid, syscall.SIGCONT)
				continue
			}
			kept2 = append(kept2, pid)
		}
		stopped = kept2
	}
	for _, c := range append(live, liveOK...) {
		syscall.Kill(c.Process.Pid, syscall.SIGCONT)
		syscall.Kill(c.Process.Pid, syscall.SIGKILL)
	}
	for _, pid := range stopped {
		syscall.Kill(pid, syscall.SIGCONT)
	}
	g.noRunAfterSuccess(okKeys, okKey)
	t.Logf("%d idem runs, %d SIGKILLs, %d SIGSTOPs, %d run locks deleted, %d executions started", runs, kills, stops, cleans, g.count("start "))
	g.noOverlap()
	if forgedPID == 0 {
		t.Errorf("no run's IDEM_RUN to copy")
	} else if !alive(forgedPID) {
		t.Errorf("idem signalled nobody's process %d, which carried a copy of a run's IDEM_RUN", forgedPID)
	}
	if g.count("start ") < 20 {
		t.Errorf("only %d executions in %v: the chaos starved the key; idem said:\n%s", g.count("start "), dur, tail(readFile(g.path("idem.stderr")), 30))
	}
}

// noRunAfterSuccess fails the test if an execution of one of the n keys
// key(1..n) started after the ledger recorded the key's success, and if
// none was recorded (the check would prove nothing).
func (g *overlapRig) noRunAfterSuccess(n int, key func(int) string) {
	g.t.Helper()
	l := g.openLedger()
	succeeded := 0
	for i := 1; i <= n; i++ {
		rec, err := l.Get(context.Background(), key(i))
		if err != nil || rec.Status != ledger.StatusSucceeded {
			continue
		}
		succeeded++
		for _, line := range strings.Split(readFile(g.log), "\n") {
			f := strings.Fields(line)
			if len(f) != 3 || f[0] != "okstart" || f[1] != key(i) {
				continue
			}
			// finished_ms is taken before the outcome commits, and is
			// whole milliseconds: a start within that millisecond is
			// earlier.
			if at, err := strconv.ParseInt(f[2], 10, 64); err == nil && time.Unix(0, at).After(rec.Finished.Add(time.Millisecond)) {
				g.t.Errorf("%s started at %s, after its success was recorded at %s", key(i), time.Unix(0, at).Format(time.RFC3339Nano), rec.Finished.Format(time.RFC3339Nano))
			}
		}
	}
	if succeeded == 0 {
		g.t.Errorf("none of the %d succeeding keys recorded its success: the chaos left nothing to re-execute", n)
	}
	g.t.Logf("%d of %d succeeding keys recorded, %d of their executions started", succeeded, n, g.count("okstart "))
}

// runProcs lists the pids of overlapjob processes (those that carry a
// run's identity in their environment, IDEM_RUN, and whose comm says so).
func runProcs() []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil || !strings.Contains(string(env), "IDEM_KEY=overlap:chaos") {
			continue
		}
		out = append(out, pid)
	}
	return out
}

// runMarker is the IDEM_RUN of the first of pids that has one, or "".
func runMarker(pids []int) string {
	for _, pid := range pids {
		env, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "environ"))
		for _, kv := range strings.Split(string(env), "\x00") {
			if v, ok := strings.CutPrefix(kv, "IDEM_RUN="); ok {
				return v
			}
		}
	}
	return ""
}

func zombie(pid int) bool {
	_, state, err := statOf(pid)
	return err != nil || state == 'Z'
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
