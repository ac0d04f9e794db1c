package e2e

// The wrappers people put around idem, run for real: coreutils timeout
// (SIGTERM twice, to idem and to its group), GNU parallel's termination
// sequence (TERM, TERM, TERM, then KILL), and nohup (SIGHUP ignored). One
// signal policy holds for all: repeated signals are forwarded and never
// escalated, the kill grace is never cut short, and a signal that idem's
// parent ignores stays ignored.

import (
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/ledger"
)

// slowTrap is a command whose SIGTERM trap takes about d (ignoring
// further SIGTERMs meanwhile), writes "trapped" to file and exits 143; once
// file exists, it exits 0 at once.
func slowTrap(file, d string) []string {
	return []string{"/bin/sh", "-c", `[ -e "$1" ] && exit 0; trap 'trap "" TERM; sleep ` + d + `; echo trapped > "$1"; exit 143' TERM; echo ready; sleep 30 & wait`, "sh", file}
}

// TestWrapperTimeout: under `timeout 2 idem run ...` the child's TERM trap
// runs to its end, and its exit 143 is recorded (not 137: idem does not
// take timeout's second SIGTERM for "kill now").
func TestWrapperTimeout(t *testing.T) {
	timed(t)
	timeout := needTool(t, "timeout")
	g := newLeaseRig(t)
	trapped := g.path("trapped")
	argv := append([]string{timeout, "2", "idem", "run", "--key", "wrap:timeout", "--kill-grace", "5s", "--"}, slowTrap(trapped, "0.5")...)
	p := run(t, g.command(argv...))
	if p.code != 124 {
		t.Errorf("timeout: %v, want 124", p)
	}
	if got := strings.TrimSpace(readFile(trapped)); got != "trapped" {
		t.Errorf("the child's TERM trap did not run to its end (file: %q): %v", got, p)
	}
	rec, hist := g.record("wrap:timeout")
	if rec.Status != ledger.StatusRetryable || rec.ExitCode != 143 {
		t.Errorf("record: %s, exit %d; want retryable, exit 143 (history %s)", rec.Status, rec.ExitCode, classes(hist))
	}
}

// TestWrapperParallel: GNU parallel stops a job that passed --timeout with
// TERM,200ms,TERM,100ms,TERM,50ms,KILL. The child's TERM trap (250ms) runs
// through the repeated TERMs; the next run takes the key and succeeds.
func TestWrapperParallel(t *testing.T) {
	timed(t)
	parallel := needTool(t, "parallel")
	g := newLeaseRig(t)
	trapped := g.path("trapped")
	job := "idem run --key wrap:parallel --kill-grace 5s -- " + strings.Join(quoteAll(slowTrap(trapped, "0.25")), " ")
	c := g.command(parallel, "--will-cite", "--timeout", "1", "--termseq", "TERM,200,TERM,100,TERM,50,KILL,25", ":::", job)
	p := run(t, c)
	if p.code == 0 {
		t.Errorf("parallel: %v, want the job timed out", p)
	}
	if got := strings.TrimSpace(readFile(trapped)); got != "trapped" {
		t.Errorf("the child's TERM trap did not run to its end (file: %q): %v", got, p)
	}
	g.run(append([]string{"run", "--key", "wrap:parallel", "--kill-grace", "5s", "--"}, slowTrap(trapped, "0.25")...)...).expect(0)
	rec, hist := g.record("wrap:parallel")
	if got := classes(hist); !strings.HasPrefix(got, "1:interrupted:143") && !strings.HasPrefix(got, "1:abandoned:75") {
		t.Errorf("history %q: the first attempt should end interrupted by 143 (or abandoned)", got)
	}
	if rec.Attempts != 2 {
		t.Errorf("record %s after %d attempts; want the next run to take the key (history %s)", rec.Status, rec.Attempts, classes(hist))
	}
}

func quoteAll(argv []string) []string {
	out := make([]string, len(argv))
	for i, a := range argv {
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return out
}

// TestWrapperNohup: `nohup idem run ...` survives SIGHUP, and so does its
// command: the job runs to its end and is recorded as succeeded.
func TestWrapperNohup(t *testing.T) {
	timed(t)
	nohup := needTool(t, "nohup")
	g := newLeaseRig(t)
	ready, done := g.path("ready"), g.path("done")
	c := g.command(nohup, "idem", "run", "--key", "wrap:nohup", "--", "/bin/sh", "-c", `echo > "$1"; sleep 1; echo done > "$2"`, "sh", ready, done)
	p := start(t, c)
	waitForFile(t, ready)
	time.Sleep(100 * time.Millisecond)
	p.send(syscall.SIGHUP)
	p.wait()
	if p.code != 0 {
		t.Errorf("nohup idem run after SIGHUP: %v, want exit 0", p)
	}
	if strings.TrimSpace(readFile(done)) != "done" {
		t.Errorf("the command did not run to its end: %v", p)
	}
	rec, _ := g.record("wrap:nohup")
	if rec.Status != ledger.StatusSucceeded {
		t.Errorf("record: %s, want succeeded", rec.Status)
	}
}

// TestWrapperBackgroundJob: a script's background job (`idem run ... &`,
// which sh starts with SIGINT ignored) keeps SIGINT ignored, for idem and
// its command: a SIGINT to idem is not forwarded, and the command runs to
// its end.
func TestWrapperBackgroundJob(t *testing.T) {
	timed(t)
	g := newLeaseRig(t)
	ready, done, pid := g.path("ready"), g.path("done"), g.path("pid")
	script := `idem run --key wrap:background -- /bin/sh -c 'echo > "$1"; sleep 1; echo done > "$2"' sh "$1" "$2" &
echo $! > "$3"
wait $!`
	p := start(t, g.command("/bin/sh", "-c", script, "sh", ready, done, pid))
	waitForFile(t, ready)
	idem, err := strconv.Atoi(strings.TrimSpace(readFile(pid)))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if err := syscall.Kill(idem, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	p.wait()
	if p.code != 0 {
		t.Errorf("a background idem run after SIGINT: %v, want exit 0", p)
	}
	if strings.TrimSpace(readFile(done)) != "done" {
		t.Errorf("the command did not run to its end: %v", p)
	}
	if rec, _ := g.record("wrap:background"); rec.Status != ledger.StatusSucceeded {
		t.Errorf("record: %s, want succeeded", rec.Status)
	}
}
