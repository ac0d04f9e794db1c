package model

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/testenv"
)

// variant is one configuration of idem.pml, chosen by preprocessor defines.
type variant struct {
	name    string
	defines []string
	// property is the name in the assertion that must fail ("" when the
	// model must verify with no error).
	property string
}

var variants = []variant{
	// The fixed protocol: it must verify.
	{name: "fixed/one-host", defines: nil},
	{name: "fixed/fleet", defines: []string{"FLEET"}},
	// A first attempt's grandchild may clear its environment and keep fd
	// 3: the relock before the next attempt finds it by its lock.
	{name: "fixed/env-clearing", defines: []string{"ENV_CLEARING"}},
	// Today's process-group bookkeeping with its three overlap windows
	// closed: verifies too, so each TODAY_ variant below fails only
	// through the bug it puts back.
	{name: "groups/all-fixed", defines: []string{"GROUPS"}},
	// Against a vacuous model: the fixed protocol must reach the
	// scenarios these assertions name (a takeover that SIGKILLs an older
	// run's TERM-ignoring grandchild, then runs; a stale downstream write
	// refused).
	{name: "fixed/reaches-takeover-kill", defines: []string{"REACH"}, property: "reachable"},
	{name: "fixed/fleet-reaches-refused-write", defines: []string{"FLEET", "REACH"}, property: "reachable"},
	// Counterexamples: each must find an error. One that verifies means
	// the model no longer sees the bug.
	{name: "today/taker-forgets", defines: []string{"TODAY_TAKER_FORGETS"}, property: "no_overlap"},
	{name: "today/setchild-window", defines: []string{"TODAY_SETCHILD_WINDOW"}, property: "no_overlap"},
	{name: "today/purge-expired", defines: []string{"TODAY_PURGE_EXPIRED"}, property: "no_overlap"},
	{name: "today/startattempt-forgets", defines: []string{"TODAY_STARTATTEMPT_FORGETS"}, property: "no_overlap"},
	{name: "today/one-description-per-invocation", defines: []string{"ENV_CLEARING", "TODAY_ONE_DESCRIPTION"}, property: "no_overlap"},
	{name: "fixed-without/run-lock", defines: []string{"NO_RUN_LOCK"}, property: "no_overlap"},
	{name: "fixed-without/lock-of-every-run", defines: []string{"LOCK_ABANDONED_ONLY"}, property: "no_overlap"},
	{name: "fixed-without/claim", defines: []string{"NO_CLAIM"}, property: "no_run_after_success"},
	{name: "fixed-with/fold-on-record", defines: []string{"FOLD_ON_RECORD"}, property: "no_run_after_success"},
	{name: "fleet-without/watchdog", defines: []string{"FLEET", "NO_WATCHDOG"}, property: "no_overlap"},
	{name: "fleet-without/durable-token", defines: []string{"FLEET", "TODAY_TOKEN_NOT_DURABLE"}, property: "fencing"},
}

// Bounds of one search: exhaustive (no bitstate), under 2 GiB and 2 minutes.
const (
	panDepth   = "-m10000" // the deepest path is about 140 steps
	panHash    = "-w24"    // 2^24 slots: 128 MiB
	panMemMiB  = "2048"    // -DMEMLIM: pan stops rather than pass it
	runTimeout = 2 * time.Minute
)

var errorsLine = regexp.MustCompile(`errors: (\d+)`)

// needTool skips the test when a tool is missing, unless IDEM_TEST_STRICT=1
// (CI), where a missing tool fails it.
func needTool(t *testing.T, name string) {
	t.Helper()
	_, err := exec.LookPath(name)
	testenv.Need(t, name, err == nil, fmt.Sprintf("%v (Debian package %s)", err, name))
}

func TestModel(t *testing.T) {
	if testing.Short() {
		t.Skip("spin runs of the protocol model take about a minute")
	}
	needTool(t, "spin")
	needTool(t, "gcc")
	src, err := os.ReadFile("idem.pml")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			out, trail := check(t, src, v)
			m := errorsLine.FindStringSubmatch(out)
			if m == nil {
				t.Fatalf("no \"errors: N\" line in pan's output:\n%s", out)
			}
			t.Logf("%s", summary(out))
			switch {
			case v.property == "" && m[1] != "0":
				t.Fatalf("the model must verify with no error; pan found %s:\n%s\ncounterexample:\n%s", m[1], out, trail)
			case v.property == "" && incomplete(out) != "":
				t.Fatalf("the search is not exhaustive (%s):\n%s", incomplete(out), out)
			case v.property == "":
			case m[1] == "0":
				t.Fatalf("the model verifies, but it must find a violation of %s: it no longer sees this bug:\n%s", v.property, out)
			case !strings.Contains(out, "assertion violated") || !strings.Contains(out, v.property):
				t.Fatalf("pan found an error, but not a violation of %s:\n%s\ncounterexample:\n%s", v.property, out, trail)
			default:
				t.Logf("counterexample:\n%s", trail)
			}
		})
	}
}

// check runs spin -a, gcc and pan for v in a fresh directory and returns
// pan's output and, when pan wrote a trail, the counterexample's steps.
func check(t *testing.T, src []byte, v variant) (out, trail string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "idem.pml"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	var defs []string
	for _, d := range v.defines {
		defs = append(defs, "-D"+d)
	}
	run(t, dir, "spin", append(append([]string{"-a"}, defs...), "idem.pml")...)
	run(t, dir, "gcc", "-w", "-O2", "-DSAFETY", "-DCOLLAPSE", "-DVECTORSZ=1024", "-DMEMLIM="+panMemMiB, "-o", "pan", "pan.c")
	out = run(t, dir, "./pan", panDepth, panHash)
	if _, err := os.Stat(filepath.Join(dir, "idem.pml.trail")); err == nil {
		if v.property == "" {
			// The model broke: search again for the shortest
			// counterexample (-i), which tells its story best.
			run(t, dir, "./pan", panDepth, panHash, "-i")
		}
		full := run(t, dir, "spin", append(append([]string{"-t"}, defs...), "idem.pml")...)
		var steps []string
		for _, l := range strings.Split(full, "\n") {
			l = strings.TrimSpace(l)
			if strings.HasPrefix(l, "MSC: ") || strings.HasPrefix(l, "spin: ") {
				steps = append(steps, "\t"+l)
			}
		}
		trail = strings.Join(steps, "\n")
	}
	return out, trail
}

// run runs a command in dir and returns its combined output; a command
// that cannot run, or that fails, fails the test with that output (pan
// exits 0 whether or not it found an error).
func run(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, buf.String())
	}
	return buf.String()
}

// incomplete says why pan's search did not cover the whole state space,
// or "" if it did.
func incomplete(out string) string {
	for _, why := range []string{"Search not completed", "max search depth too small", "MEMLIM", "out of memory", "bitstate"} {
		if strings.Contains(out, why) {
			return why
		}
	}
	if !strings.Contains(out, "Full statespace search") {
		return "no \"Full statespace search\" line"
	}
	return ""
}

// summary is pan's result in a few lines: errors, states, memory, time.
func summary(out string) string {
	var keep []string
	for _, l := range strings.Split(out, "\n") {
		for _, k := range []string{"errors:", "states, stored", "total actual memory", "elapsed time", "assertion violated"} {
			if strings.Contains(l, k) {
				keep = append(keep, strings.TrimSpace(l))
				break
			}
		}
	}
	return strings.Join(keep, "\n")
}
