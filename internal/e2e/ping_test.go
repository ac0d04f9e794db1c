package e2e

// Monitor pings (--ping, IDEM_PING_URL) against healthchecks.io's ping API
// on loopback (hcServer): what each outcome sends, that a ping never
// changes a run's outcome or exit code whatever the monitor does, and
// that the URL, a secret, shows nowhere.

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// pinged runs idem run ARGS with IDEM_PING_URL=url and the ledger in dir.
func pinged(t *testing.T, dir, url string, args ...string) command {
	t.Helper()
	env := []string{"IDEM_LEDGER=" + filepath.Join(dir, "ledger.db"), "NO_COLOR=1", "IDEM_PING_URL=" + url}
	return clean(env, idemBin(t), append([]string{"run"}, args...)...)
}

// pingActions is the actions of pings, in order.
func pingActions(pings []hcPing) []string {
	out := make([]string, len(pings))
	for i, p := range pings {
		out[i] = p.Action
	}
	return out
}

// wantPings fails the test unless pings are of the actions want, in
// order, every end carrying its start's run id, every start a new one.
func wantPings(t *testing.T, what string, pings []hcPing, want ...string) {
	t.Helper()
	if got := pingActions(pings); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("%s: pings %q, want %q:\n%v", what, got, want, pings)
	}
	seen := map[string]bool{}
	open := ""
	for _, p := range pings {
		if !uuidRE.MatchString(p.RID) {
			t.Fatalf("%s: ping %v has no run id", what, p)
		}
		if p.Action == "start" {
			if seen[p.RID] {
				t.Fatalf("%s: run id %s started twice", what, p.RID)
			}
			seen[p.RID], open = true, p.RID
			continue
		}
		if p.RID != open {
			t.Fatalf("%s: %v ends run %s, but the start before it was %s", what, p, p.RID, open)
		}
		open = ""
	}
}

// waitPings waits (at most 10s) until check has n pings.
func waitPings(t *testing.T, s *hcServer, check string, n int) {
	t.Helper()
	for range 1000 {
		if len(s.of(check)) >= n {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s: %d pings, want %d: %v", check, len(s.of(check)), n, s.of(check))
}

// TestPingScenarios: each outcome sends exactly the pings documented for
// it (docs/recipes.md, idem run --help): a start per attempt that runs,
// and one end per start with its run id: the exit status when the key's
// outcome is recorded, a log entry when the attempt is to be retried
// (which must page nobody); nothing for a replay, a busy duplicate or a
// wait that replays; and for a takeover after SIGKILL, the end of the
// abandoned attempt's open start.
func TestPingScenarios(t *testing.T) {
	s := newHCServer(t)
	dir := t.TempDir()
	url := s.URL + "/PINGKEY/{group}"
	const day = "2026-12-03"

	t.Run("success", func(t *testing.T) {
		p := run(t, pinged(t, dir, url, "--key", "success:"+day, "--", "exitwith", "0", "out", "err")).expect(0)
		pings := s.of("PINGKEY/success")
		wantPings(t, "success", pings, "start", "0")
		if want := "out\nerr\nidem: success:" + day + ": attempt 1/3 exited 0; succeeded\n"; pings[1].Body != want {
			t.Errorf("the end's body %q, want %q", pings[1].Body, want)
		}
		if pings[0].Body != "" {
			t.Errorf("the start has a body: %q", pings[0].Body)
		}
		// a replay is not a run: nothing
		r := run(t, pinged(t, dir, url, "--key", "success:"+day, "--", "exitwith", "0", "out", "err")).expect(0)
		if r.stdout != p.stdout || !strings.Contains(r.stderr, "idem: replayed") {
			t.Fatalf("no replay: %v", r)
		}
		wantPings(t, "success, replayed", s.of("PINGKEY/success"), "start", "0")
	})

	t.Run("transient then success", func(t *testing.T) {
		counter := filepath.Join(dir, "flaky")
		run(t, pinged(t, dir, url, "--key", "transient:"+day, "--initial-delay", "10ms", "--", "flaky", counter, "1", "75")).expect(0)
		pings := s.of("PINGKEY/transient")
		wantPings(t, "transient", pings, "start", "log", "start", "0")
		if b := pings[1].Body; !strings.Contains(b, "call 1 failing with 75\n") ||
			!regexp.MustCompile(`idem: transient:2026-12-03: attempt 1/3 exited 75; attempt 2 follows in \S+\n$`).MatchString(b) {
			t.Errorf("the retried attempt's log entry: %q", b)
		}
		if b := pings[3].Body; !strings.HasSuffix(b, "call 2\nidem: transient:"+day+": attempt 2/3 exited 0; succeeded\n") {
			t.Errorf("the end's body: %q", b)
		}
	})

	t.Run("final failure", func(t *testing.T) {
		run(t, pinged(t, dir, url, "--key", "permanent:"+day, "--", "exitwith", "3", "", "boom")).expect(3)
		pings := s.of("PINGKEY/permanent")
		wantPings(t, "permanent", pings, "start", "3")
		if b := pings[1].Body; !strings.HasSuffix(b, "boom\nidem: permanent:"+day+": attempt 1/3 exited 3; failed for good (a permanent exit code)\n") {
			t.Errorf("the end's body: %q", b)
		}
		// the budget spent on transient failures: each attempt but the
		// last is a log entry, the last the final failure
		run(t, pinged(t, dir, url, "--key", "budget:"+day, "--max-attempts", "2", "--initial-delay", "10ms", "--", "exitwith", "75")).expect(75)
		pings = s.of("PINGKEY/budget")
		wantPings(t, "budget", pings, "start", "log", "start", "75")
		if b := pings[3].Body; !strings.HasSuffix(b, "attempt 2/2 exited 75; failed for good (the last of --max-attempts 2)\n") {
			t.Errorf("the end's body: %q", b)
		}
		// a replayed failure does not page again
		run(t, pinged(t, dir, url, "--key", "permanent:"+day, "--", "exitwith", "3", "", "boom")).expect(3)
		run(t, pinged(t, dir, url, "--key", "budget:"+day, "--max-attempts", "2", "--initial-delay", "10ms", "--", "exitwith", "75")).expect(75)
		wantPings(t, "permanent, replayed", s.of("PINGKEY/permanent"), "start", "3")
		wantPings(t, "budget, replayed", s.of("PINGKEY/budget"), "start", "log", "start", "75")
	})

	t.Run("busy and wait", func(t *testing.T) {
		ready, gate := filepath.Join(dir, "busy-ready"), filepath.Join(dir, "busy-go")
		job := []string{"--key", "busy:" + day, "--", "sh", "-c", `echo ready > "$0"; while [ ! -e "$1" ]; do sleep 0.02; done; echo done`, ready, gate}
		holder := start(t, pinged(t, dir, url, job...))
		waitForFile(t, ready)
		waitPings(t, s, "PINGKEY/busy", 1)
		dup := run(t, pinged(t, dir, url, job...)).expect(75)
		if !strings.Contains(dup.stderr, "is in progress") {
			t.Fatalf("the duplicate was not busy: %v", dup)
		}
		waiter := start(t, pinged(t, dir, url, append([]string{"--wait"}, job...)...))
		time.Sleep(200 * time.Millisecond)
		if err := os.WriteFile(gate, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		holder.wait().expect(0)
		if w := waiter.wait().expect(0); w.stdout != "done\n" || !strings.Contains(w.stderr, "idem: replayed") {
			t.Fatalf("the waiter did not replay: %v", w)
		}
		wantPings(t, "busy", s.of("PINGKEY/busy"), "start", "0")
	})

	t.Run("takeover after SIGKILL", func(t *testing.T) {
		ready := filepath.Join(dir, "takeover-ready")
		job := []string{"--key", "takeover:" + day, "--", "sh", "-c", `[ "$IDEM_ATTEMPT" != 1 ] || exec sleeper 1m "$0"; echo second`, ready}
		first := start(t, pinged(t, dir, url, job...))
		waitForFile(t, ready)
		waitPings(t, s, "PINGKEY/takeover", 1)
		first.send(syscall.SIGKILL)
		first.wait()
		p := run(t, pinged(t, dir, url, job...)).expect(0)
		if p.stdout != "second\n" {
			t.Fatalf("the takeover did not run attempt 2: %v", p)
		}
		pings := s.of("PINGKEY/takeover")
		// the abandoned start ends with a log entry: the key is tried
		// again at once, by the run that took it over
		wantPings(t, "takeover", pings, "start", "log", "start", "0")
		if b := pings[1].Body; !regexp.MustCompile(`^idem: takeover:2026-12-03: attempt 1 was abandoned: its idem \(pid \d+ on \S+\) is gone; attempt 2 takes the key over\n$`).MatchString(b) {
			t.Errorf("the abandoned attempt's log entry: %q", b)
		}

		// abandoned on its budget's last attempt, the key is failed for
		// good: the run that finds it reports the final failure, once
		ready = filepath.Join(dir, "lastgasp-ready")
		job = []string{"--key", "lastgasp:" + day, "--max-attempts", "1", "--", "sleeper", "1m", ready}
		first = start(t, pinged(t, dir, url, job...))
		waitForFile(t, ready)
		waitPings(t, s, "PINGKEY/lastgasp", 1)
		first.send(syscall.SIGKILL)
		first.wait()
		run(t, pinged(t, dir, url, job...)).expect(75)
		run(t, pinged(t, dir, url, job...)).expect(75)
		pings = s.of("PINGKEY/lastgasp")
		wantPings(t, "lastgasp", pings, "start", "75")
		if b := pings[1].Body; !strings.Contains(b, "attempt 1 was abandoned") || !strings.HasSuffix(b, "it was the last of the budget: failed for good, exit 75\n") {
			t.Errorf("the final failure's body: %q", b)
		}
	})

	t.Run("no output", func(t *testing.T) {
		run(t, pinged(t, dir, url, "--key", "quiet:"+day, "--no-output", "--", "exitwith", "0", "topsecret")).expect(0)
		pings := s.of("PINGKEY/quiet")
		wantPings(t, "no output", pings, "start", "0")
		if b := pings[1].Body; strings.Contains(b, "topsecret") || b != "idem: quiet:"+day+": attempt 1/3 exited 0; succeeded\n" {
			t.Errorf("--no-output: the body %q", b)
		}
	})

	t.Run("body limit", func(t *testing.T) {
		noisy := []string{"--", "sh", "-c", `head -c 50000 /dev/zero | tr '\0' x; echo; echo tail-marker`}
		run(t, pinged(t, dir, url, append([]string{"--key", "noisy:" + day}, noisy...)...)).expect(0)
		pings := s.of("PINGKEY/noisy")
		wantPings(t, "noisy", pings, "start", "0")
		if e := pings[1]; e.Size > 10_000 || !strings.HasPrefix(e.Body, "[...]\n") || !strings.HasSuffix(e.Body, "tail-marker\nidem: noisy:"+day+": attempt 1/3 exited 0; succeeded\n") {
			t.Errorf("the end's body (%d bytes): %q...%q", e.Size, e.Body[:20], e.Body[len(e.Body)-80:])
		}
		// a server that keeps less says so (Ping-Body-Limit), and idem
		// sends no more than that, the end first
		s.set(1000, 0, false)
		defer s.set(100_000, 0, false)
		run(t, pinged(t, dir, url, append([]string{"--key", "noisier:" + day}, noisy...)...)).expect(0)
		pings = s.of("PINGKEY/noisier")
		wantPings(t, "noisier", pings, "start", "0")
		if e := pings[1]; e.Size > 1000 || !strings.HasSuffix(e.Body, "tail-marker\nidem: noisier:"+day+": attempt 1/3 exited 0; succeeded\n") {
			t.Errorf("the end's body under Ping-Body-Limit 1000 (%d bytes): %q", e.Size, e.Body)
		}
	})

	t.Run("proxy from the environment", func(t *testing.T) {
		// A loopback URL never goes through a proxy: name a host that
		// does not resolve, and the proxy (the stand-in) takes it.
		env := []string{"IDEM_LEDGER=" + filepath.Join(dir, "ledger.db"), "NO_COLOR=1",
			"IDEM_PING_URL=http://hc.example.invalid/ping/PINGKEY/{group}", "HTTP_PROXY=" + strings.TrimSuffix(s.URL, "/ping")}
		run(t, clean(env, idemBin(t), "run", "--key", "proxied:"+day, "--", "true")).expect(0)
		wantPings(t, "proxied", s.of("PINGKEY/proxied"), "start", "0")
	})
}

// TestPingEndpointFailures: a monitor that hangs, refuses connections, or
// answers 500 changes nothing of the run: its output, exit code and
// record are those of a run without pings, and idem says in one
// warning line (without the URL's secret) that the pings were not
// delivered. idem's exit waits for them at most monitor.ExitWait (10s);
// the test bounds that by the process's own timeout, not by a clock.
func TestPingEndpointFailures(t *testing.T) {
	refused := func(t *testing.T) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		return "http://" + addr + "/ping"
	}
	for _, tc := range []struct {
		name string
		url  func(t *testing.T, s *hcServer) string
		code int // the command's
	}{
		{"hangs", func(t *testing.T, s *hcServer) string { s.set(100_000, 0, true); return s.URL }, 0},
		{"refuses", func(t *testing.T, _ *hcServer) string { return refused(t) }, 3},
		{"answers 500", func(t *testing.T, s *hcServer) string { s.set(100_000, 500, false); return s.URL }, 0},
		{"answers 404", func(t *testing.T, s *hcServer) string { s.set(100_000, 404, false); return s.URL }, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newHCServer(t)
			dir := t.TempDir()
			url := tc.url(t, s) + "/s3cr3t-0b2c5f7e"
			p := run(t, pinged(t, dir, url, "--key", "broken:monitor", "--", "exitwith", strconv.Itoa(tc.code), "hi")).expect(tc.code)
			if p.stdout != "hi\n" {
				t.Errorf("stdout %q, want hi", p.stdout)
			}
			warn := regexp.MustCompile(`^idem: warning: 2 of 2 pings to http://127\.0\.0\.1:\d+/… were not delivered \([^()]+\); the run's outcome is as recorded\n$`)
			if !warn.MatchString(p.stderr) || strings.Contains(p.stderr, "s3cr3t") {
				t.Errorf("stderr, want one warning without the URL's path:\n%s", p.stderr)
			}
			status := map[int]string{0: "succeeded", 3: "failed"}[tc.code]
			out := run(t, clean([]string{"IDEM_LEDGER=" + filepath.Join(dir, "ledger.db")}, idemBin(t), "inspect")).expect(0).stdout
			if !regexp.MustCompile(`(?m)^broken:monitor +` + status + ` +1/3 +` + strconv.Itoa(tc.code) + ` `).MatchString(out) {
				t.Errorf("the record is not the run's outcome (%s, exit %d):\n%s", status, tc.code, out)
			}
			if _, n := s.all(); tc.name == "answers 500" && n <= 2 {
				t.Errorf("a 500 was not tried again: %d requests for 2 pings", n)
			}
		})
	}
}

func TestPingURLIsSecret(t *testing.T) {
	s := newHCServer(t)
	const secret = "s3cr3t-0b2c5f7e-1d3a"
	for _, via := range []string{"env", "flag"} {
		t.Run(via, func(t *testing.T) {
			url := s.URL + "/" + secret + "-" + via
			dir := t.TempDir()
			report := filepath.Join(dir, "report.json")
			key := "secret:" + via + "-run"
			env := []string{"IDEM_LEDGER=" + filepath.Join(dir, "ledger.db"), "NO_COLOR=1"}
			args := []string{"run", "--key", key, "--report", report}
			if via == "env" {
				env = append(env, "IDEM_PING_URL="+url)
			} else {
				args = append(args, "--ping", url)
			}
			args = append(args, "--", "sh", "-c", `env; printenv IDEM_PING_URL`)
			p := run(t, clean(env, idemBin(t), args...)).expect(0)
			wantPings(t, via, s.of(secret+"-"+via), "start", "0")
			seen := map[string]string{"stdout": p.stdout, "stderr": p.stderr}
			if b, err := os.ReadFile(report); err == nil {
				seen["--report"] = string(b)
			} else {
				t.Fatal(err)
			}
			base := []string{"IDEM_LEDGER=" + filepath.Join(dir, "ledger.db")}
			seen["inspect"] = run(t, clean(base, idemBin(t), "inspect")).expect(0).stdout
			seen["inspect KEY"] = run(t, clean(base, idemBin(t), "inspect", key)).expect(0).stdout
			seen["inspect --json"] = run(t, clean(base, idemBin(t), "inspect", "--json", key)).expect(0).stdout
			var rec map[string]any
			if err := json.Unmarshal([]byte(seen["inspect --json"]), &rec); err != nil {
				t.Fatal(err)
			}
			files, _ := filepath.Glob(filepath.Join(dir, "ledger.db*"))
			for _, f := range files {
				b, _ := os.ReadFile(f)
				seen[filepath.Base(f)] = string(b)
			}
			for where, text := range seen {
				if strings.Contains(text, secret) {
					t.Errorf("the URL's secret is in %s", where)
				}
			}
			if strings.Contains(p.stdout, "IDEM_PING_URL=") {
				t.Errorf("the command got IDEM_PING_URL:\n%s", p.stdout)
			}
			// --ping shows in ps: said once; IDEM_PING_URL does not
			if warned := strings.Count(p.stderr, "idem: warning: the ping URL on --ping is visible"); warned != map[string]int{"env": 0, "flag": 1}[via] {
				t.Errorf("%d warnings that --ping shows in ps: %v", warned, p)
			}
		})
	}
	// a bad URL is refused (64) without showing it
	p := run(t, clean([]string{"IDEM_LEDGER=" + filepath.Join(t.TempDir(), "l.db"), "NO_COLOR=1", "IDEM_PING_URL=https://hc-ping.com/" + secret + "/{slug}"},
		idemBin(t), "run", "--key", "secret:bad-url", "--", "true")).expect(64)
	if strings.Contains(p.stderr, secret) || !strings.Contains(p.stderr, "idem: error: IDEM_PING_URL https://hc-ping.com/…: invalid ping URL:") {
		t.Errorf("a bad ping URL: %v", p)
	}
}
