package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/txtar"

	"github.com/idemhq/idem/internal/testenv"
)

// TestBusyBoxCrond runs docs/recipes.md's BusyBox crontab under the real
// BusyBox crond (Alpine's cron), in the foreground with a private crontab
// directory, as OpenRC starts it (a PATH without /usr/local/bin). The
// recipe's job line runs with its schedule made every minute: crond runs
// it at the next minute's start, so the test waits for up to a minute,
// once (BusyBox 1.35's crond dies of SIGSEGV on an @reboot line, and
// being static it cannot be given another clock). The job goes through
// crond itself: the user's login shell, crond's environment, HOME from
// the password database. Fired twice at once, it runs once and both
// firings print the backup's output; a job that names idem without its
// path, after a PATH= line, is "command not found", as BusyBox ignores
// that line.
func TestBusyBoxCrond(t *testing.T) {
	quiet(t)
	busybox := needTool(t, "busybox")
	out, _ := exec.Command(busybox, "crond", "--help").CombinedOutput()
	testenv.Need(t, "busybox-static", strings.Contains(string(out), "crond [-fbS]"),
		"this busybox has no crond applet (Debian: apt-get install busybox-static)")
	ar, err := txtar.ParseFile(filepath.Join(moduleRoot(t), "testscripts", "readme_busybox_cron.txtar"))
	if err != nil {
		t.Fatal(err)
	}
	var recipe []crontab
	for _, f := range ar.Files {
		if f.Name == "crontab" {
			recipe = crontabs("docs/recipes.md", string(f.Data))
		}
	}
	if len(recipe) != 1 || len(recipe[0].jobs) != 1 || len(recipe[0].env) != 0 {
		t.Fatalf("the BusyBox crontab is not one job line without assignments: %+v", recipe)
	}
	job := recipe[0].jobs[0]

	g := newCronRig(t)
	if err := os.WriteFile(filepath.Join(g.home, "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	spool := mkdir(t, filepath.Join(g.dir, "crontabs"), 0o755)
	tab := "* * * * * " + job + "\n" + "* * * * * " + job + "\n" +
		"PATH=/usr/local/bin:/usr/bin:/bin\n" +
		"* * * * * idem run --key busybox:bare-name -- /bin/true || echo \"bare name: exit $?\"\n"
	if err := os.WriteFile(filepath.Join(spool, "root"), []byte(tab), 0o600); err != nil {
		t.Fatal(err)
	}
	errFile := filepath.Join(g.dir, "crond.err")
	outFile := filepath.Join(g.dir, "crond.out")
	crond := start(t, g.command(errFile, "/bin/sh", "-c", `f=$1; shift; exec "$@" >>"$f"`, "sh", outFile, "/usr/bin/env", "-i", "PATH=/bin:/sbin:/usr/bin:/usr/sbin",
		busybox, "crond", "-f", "-c", spool, "-L", filepath.Join(g.dir, "crond.log"), "-l", "8"))
	t.Cleanup(func() {
		crond.cmd.Process.Kill()
		crond.wait()
	})
	// crond passes its jobs' stdout on to its own, their stderr to its log
	jobs := func() string { return g.read("crond.out") + g.read("crond.log") }
	deadline := time.Now().Add(75 * time.Second) // the next minute, and the jobs' run
	for strings.Count(jobs(), "backup done") < 2 || !strings.Contains(jobs(), "bare name: exit") {
		select {
		case <-crond.done:
			t.Fatalf("crond ended: %v\n%s%s", crond.wait(), jobs(), g.read("crond.err"))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("crond's jobs did not finish in 75s:\n%s%s", jobs(), g.read("crond.err"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	all := jobs()
	if got := g.read("home/backup.log"); got != "run 1\n" {
		t.Errorf("the job ran other than once: backup.log:\n%s", got)
	}
	if strings.Count(all, "idem: replayed backup:") != 1 || strings.Contains(all, "idem: error") {
		t.Errorf("the second firing did not replay the first:\n%s", all)
	}
	if !strings.Contains(all, "idem: command not found") || !strings.Contains(all, "bare name: exit 127") {
		t.Errorf("idem without its path was found: BusyBox crond used the crontab's PATH=:\n%s", all)
	}
	if _, err := os.Stat(filepath.Join(g.home, ".local", "state", "idem", "ledger.db")); err != nil {
		t.Errorf("the ledger is not the home directory's default one: %v", err)
	}
}
