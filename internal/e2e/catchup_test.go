package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/txtar"
)

// TestCatchUpUnderCron runs docs/recipes.md's catch-up crontab (fire
// every 15 minutes, run once a day, ping healthchecks.io) verbatim under
// cron's environment (env -i, PATH=/usr/bin:/bin, HOME from the password
// database; idem and idem-net in /usr/local/bin) through three simulated
// days, with the ping URL pointed at a loopback stand-in. The days come
// from a testhooks build's clock seam, IDEM_TESTONLY_NOW, which only the
// period's label reads. Day 1 the backup succeeds at the first firing;
// day 2 the machine is off until 09:00 and the backup fails twice for a
// transient reason; day 3 it fails at every attempt. The monitor must see
// exactly: one success on each of the first two days, each after its own
// start; a start and a log entry (no alert) for each transient attempt;
// one final failure on day 3; nothing from the firings that replay.
func TestCatchUpUnderCron(t *testing.T) {
	ar, err := txtar.ParseFile(filepath.Join(moduleRoot(t), "testscripts", "recipes_catchup.txtar"))
	if err != nil {
		t.Fatal(err)
	}
	var tabs []crontab
	for _, f := range ar.Files {
		if f.Name == "crontab" {
			tabs = crontabs("docs/recipes.md", string(f.Data))
		}
	}
	if len(tabs) != 1 || len(tabs[0].jobs) != 1 {
		t.Fatalf("the catch-up crontab is not one job: %+v", tabs)
	}
	tab := tabs[0]
	cmd := cronCommand(t, tab, tab.jobs[0])

	s := newHCServer(t)
	var env []string
	check := ""
	for _, a := range tab.env {
		if v, ok := strings.CutPrefix(a, "IDEM_PING_URL="); ok {
			// the recipe's check, at the stand-in
			check = filepath.Base(v)
			a = "IDEM_PING_URL=" + s.URL + "/" + check
		}
		env = append(env, a)
	}
	if check == "" {
		t.Fatalf("the catch-up crontab sets no IDEM_PING_URL: %q", tab.env)
	}

	g := newCronRig(t)
	idem := fleetIdem(t)
	for _, name := range []string{"idem", "idem-net"} {
		copyExe(t, filepath.Join(filepath.Dir(idem), name), g.bin)
	}
	backup := "#!/bin/sh\n" +
		"# day 1 succeeds; day 2 fails twice for a transient reason; day 3 always\n" +
		"echo \"$IDEM_KEY $IDEM_ATTEMPT\" >> \"$HOME/backup.log\"\n" +
		"case $IDEM_KEY:$IDEM_ATTEMPT in\n" +
		"*-02:1|*-02:2|*-03:*) echo \"backup: disk busy ($IDEM_ATTEMPT)\" >&2; exit 75 ;;\n" +
		"esac\n" +
		"echo \"backup done ($IDEM_KEY)\"\n"
	if err := os.WriteFile(filepath.Join(g.home, "bin", "backup"), []byte(backup), 0o755); err != nil {
		t.Fatal(err)
	}

	firings := 0
	for day := 1; day <= 3; day++ {
		for minute := 0; minute < 24*60; minute += 15 {
			if day == 2 && minute < 9*60 {
				continue // the machine is off
			}
			now := time.Date(2026, 12, day, minute/60, minute%60, 0, 0, time.Local)
			argv := append(g.cronEnv(append(env, "IDEM_TESTONLY_NOW="+now.Format(time.RFC3339))), "/bin/sh", "-c", cmd)
			errFile := filepath.Join(g.dir, "err")
			p := run(t, g.command(errFile, argv...))
			firings++
			if got := g.read("err"); p.stdout != "" || got != "" {
				t.Fatalf("%s: the firing printed (cron would mail it): %v\n%s", now.Format(time.RFC3339), p, got)
			}
		}
	}

	wantRuns := "backup:2026-12-01 1\n" +
		"backup:2026-12-02 1\nbackup:2026-12-02 2\nbackup:2026-12-02 3\n" +
		"backup:2026-12-03 1\nbackup:2026-12-03 2\nbackup:2026-12-03 3\nbackup:2026-12-03 4\nbackup:2026-12-03 5\n"
	if got := g.read("home/backup.log"); got != wantRuns {
		t.Errorf("after %d firings the backup ran:\n%s\nwant:\n%s", firings, got, wantRuns)
	}
	pings := s.of(check)
	wantPings(t, "three days", pings,
		"start", "0",
		"start", "log", "start", "log", "start", "0",
		"start", "log", "start", "log", "start", "log", "start", "log", "start", "75")
	for i, want := range map[int]string{
		1:  "backup done (backup:2026-12-01)\nidem: backup:2026-12-01: attempt 1/5 exited 0; succeeded\n",
		3:  "backup: disk busy (1)\nidem: backup:2026-12-02: attempt 1/5 exited 75; recorded as retryable: the next run of the key tries again\n",
		7:  "backup done (backup:2026-12-02)\nidem: backup:2026-12-02: attempt 3/5 exited 0; succeeded\n",
		17: "backup: disk busy (5)\nidem: backup:2026-12-03: attempt 5/5 exited 75; failed for good (the last of --max-attempts 5)\n",
	} {
		if pings[i].Body != want {
			t.Errorf("ping %d (%s): body %q, want %q", i, pings[i].Action, pings[i].Body, want)
		}
	}
	if t.Failed() {
		t.Log(fmt.Sprint(pings))
	}
}
