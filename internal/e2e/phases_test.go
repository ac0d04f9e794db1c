package e2e

// The benchmark's breakdown of where a run's time goes (bench/run.sh) rests
// on builds of idem and of bench/cmd/floor with -tags phases, which write
// the points they passed to IDEM_PHASE_FILE (internal/probe). These tests
// hold that contract: the points of a run and of a replay, in order; the
// points the floor shares with idem, which timeit compares; and no file
// from idem as built for use.

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// points runs bin with args and IDEM_PHASE_FILE set, and returns the names
// of the points it wrote, after checking that their times never go back.
func points(t *testing.T, bin string, args ...string) []string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "points")
	output(t, inherit([]string{"IDEM_PHASE_FILE=" + file}, bin, args...))
	b, err := os.ReadFile(file)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	var last, lastFaults int64
	for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			t.Fatalf("line %q of the points: want NAME UNIXNANO MINFLT", line)
		}
		at, err1 := strconv.ParseInt(f[1], 10, 64)
		faults, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("line %q of the points: %v %v", line, err1, err2)
		}
		if at < last || faults < lastFaults {
			t.Errorf("point %s at %d (%d faults), before the point before it (%d, %d faults)", f[0], at, faults, last, lastFaults)
		}
		names, last, lastFaults = append(names, f[0]), at, faults
	}
	return names
}

// TestPhasePoints: the points a phases build of idem and of the floor
// pass, in order, and none from idem as built for use.
func TestPhasePoints(t *testing.T) {
	busy(t)
	if testing.Short() {
		t.Skip("builds idem and the floor with -tags phases; skipped with -short")
	}
	idem := buildTagged(t, "phases", ".")
	floor := buildTagged(t, "phases", "./bench/cmd/floor")
	dir := t.TempDir()
	db := filepath.Join(dir, "ledger.db")
	// The open's three steps: the files beside the ledger checked, SQLite
	// connected, the head and pages checked.
	open := []string{"ledger-files", "ledger-connected", "ledger-checked", "opened"}
	run := slices.Concat([]string{"main", "parsed"}, open, []string{"before-reserve", "after-reserve",
		"after-claim", "after-child-start", "after-child-exit", "before-finish", "after-finish", "exit"})

	got := points(t, idem, "--ledger", db, "run", "--key", "phase-points", "--", "true")
	if !slices.Equal(got, run) {
		t.Errorf("points of a run:\n got %q\nwant %q", got, run)
	}
	replay := slices.Concat([]string{"main", "parsed"}, open, []string{"before-reserve", "after-reserve", "exit"})
	if got := points(t, idem, "--ledger", db, "run", "--key", "phase-points", "--", "true"); !slices.Equal(got, replay) {
		t.Errorf("points of a replay:\n got %q\nwant %q", got, replay)
	}
	if got, want := points(t, idem, "--version"), []string{"main", "exit"}; !slices.Equal(got, want) {
		t.Errorf("points of --version: got %q, want %q", got, want)
	}

	// timeit compares the steps between the points both pass
	shared := []string{"main", "opened", "after-reserve", "after-child-start", "after-child-exit", "after-finish", "exit"}
	got = points(t, floor, filepath.Join(dir, "floor.db"), "phase-points", "true")
	if !slices.Equal(got, shared) {
		t.Errorf("points of the floor:\n got %q\nwant %q", got, shared)
	}

	// idem as built for use has no points and ignores the variable
	if got := points(t, idemBin(t), "--ledger", db, "run", "--key", "phase-points-2", "--", "true"); got != nil {
		t.Errorf("idem without -tags phases wrote points: %q", got)
	}
}
