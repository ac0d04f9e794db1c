package e2e

// The idem that simulates a fleet on one machine: built with the testhooks
// tag, it takes its host name and boot id from IDEM_TESTONLY_HOST and
// IDEM_TESTONLY_BOOT_ID (cmd/host_testhooks.go), which a release build
// ignores.

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// fleetBuild is the one testhooks build of idem per test process: a build
// takes seconds, and many tests start fleets (and the crash points use it
// too). main_test.go removes its directory when the tests end.
var fleetBuild struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

// fleetIdem returns the path of an idem built with -tags testhooks (built
// once per test process), for tests whose processes claim to run on
// different hosts through IDEM_TESTONLY_HOST / IDEM_TESTONLY_BOOT_ID.
func fleetIdem(t *testing.T) string {
	t.Helper()
	goTool := needTool(t, "go")
	root := moduleRoot(t)
	fleetBuild.once.Do(func() {
		dir, err := os.MkdirTemp("", "idem-fleet-")
		if err != nil {
			fleetBuild.err = err
			return
		}
		fleetBuild.dir = dir
		if err := buildIdems(goTool, root, dir, "testhooks"); err != nil {
			fleetBuild.err = err
			return
		}
		fleetBuild.bin = filepath.Join(dir, "idem")
	})
	if fleetBuild.err != nil {
		t.Fatal(fleetBuild.err)
	}
	return fleetBuild.bin
}

// removeFleetBuild removes fleetIdem's build, if a test made one.
func removeFleetBuild() {
	if fleetBuild.dir != "" {
		os.RemoveAll(fleetBuild.dir)
	}
}

// A release idem is itself whatever IDEM_TESTONLY_HOST and
// IDEM_TESTONLY_BOOT_ID say: a host's identity decides whose pids idem
// judges and whose keys it takes over. Only fleetIdem's build honours them.
func TestTestOnlyHostOnlyInTestBuild(t *testing.T) {
	busy(t)
	real, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	spoof := []string{"IDEM_TESTONLY_HOST=spoofed-host", "IDEM_TESTONLY_BOOT_ID=spoofed-boot"}
	for _, tc := range []struct {
		name, idem, host string
	}{
		{"release", idemBin(t), real},
		{"testhooks", fleetIdem(t), "spoofed-host"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := append([]string{"IDEM_LEDGER=" + filepath.Join(t.TempDir(), "ledger.db")}, spoof...)
			run(t, clean(env, tc.idem, "run", "--key", "hosts:testonly", "--", "true")).expect(0)
			out := run(t, clean(env, tc.idem, "inspect", "--json", "hosts:testonly")).expect(0).stdout
			var rec struct {
				History []struct {
					Host string `json:"host"`
				} `json:"history"`
			}
			if err := json.Unmarshal([]byte(out), &rec); err != nil {
				t.Fatalf("inspect --json: %v\n%s", err, out)
			}
			if len(rec.History) != 1 || rec.History[0].Host != tc.host {
				t.Fatalf("recorded hosts %+v, want one attempt on %q", rec.History, tc.host)
			}
		})
	}
}

// A release idem's periods are the host clock's whatever
// IDEM_TESTONLY_NOW says: a period decides which key a run records
// under. Only fleetIdem's build honours it (the catch-up test's days).
func TestTestOnlyNowOnlyInTestBuild(t *testing.T) {
	env := []string{"IDEM_TESTONLY_NOW=2001-02-03T04:05:06Z"}
	for _, tc := range []struct {
		name, idem string
		fake       bool
	}{
		{"release", idemBin(t), false},
		{"testhooks", fleetIdem(t), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := run(t, clean(env, tc.idem, "key", "--period", "day", "--tz", "UTC", "backup")).expect(0).stdout
			if fake := got == "backup:2001-02-03\n"; fake != tc.fake {
				t.Errorf("idem key --period day printed %q; the testhooks clock: %v, want %v", got, fake, tc.fake)
			}
		})
	}
}
