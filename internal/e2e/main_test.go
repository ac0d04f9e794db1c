package e2e

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
)

// TestMain registers idem and the helper programs (programs_test.go) that
// scripts and tests run as separate processes: testscript puts them on
// PATH, and re-executes this test binary to run one. Builds made once for
// the whole process (fleetIdem) are removed at the end. The lanes
// (lanes_test.go), not -parallel, bound how many tests run at once.
func TestMain(m *testing.M) {
	testscript.Main(cleanupM{m}, programs())
}

// cleanupM removes what tests built for the whole process once they end.
type cleanupM struct{ *testing.M }

func (m cleanupM) Run() int {
	defer removeFleetBuild()
	// The idem state directory of every process a test starts with this
	// process's environment (inherit): otherwise each PostgreSQL ledger
	// a test makes leaves its run lock (runs-ID.lock) in the home of
	// whoever runs the tests. A test that needs another sets its own.
	state, err := os.MkdirTemp("", "idem-e2e-state-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(state)
	os.Setenv("XDG_STATE_HOME", state)
	flag.Parse()
	raiseParallel()
	return m.M.Run()
}

// TestScripts runs the txtar scripts of the repository's testscripts
// directory, each in a fresh $WORK with its own ledger and HOME.
func TestScripts(t *testing.T) {
	t.Parallel() // each script takes its lane
	runScripts(t, "../../testscripts")
}

// runScripts runs the scripts in dir, or the script files named, with
// the scripts' setup and commands.
func runScripts(t *testing.T, dir string, files ...string) {
	testscript.Run(t, testscript.Params{
		Dir:                 dir,
		Files:               files,
		RequireExplicitExec: true,
		RequireUniqueNames:  true,
		Setup: func(env *testscript.Env) error {
			// A named ledger's directory must exist: idem creates only
			// the default location's.
			state := filepath.Join(env.WorkDir, "state")
			if err := os.Mkdir(state, 0o700); err != nil {
				return err
			}
			env.Setenv("IDEM_LEDGER", filepath.Join(state, "ledger.db"))
			// A home that exists, as a user's does (idem makes the default
			// ledger's directory under it, never the home itself); a
			// script's files may have made it already.
			home := filepath.Join(env.WorkDir, "home")
			if err := os.Mkdir(home, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
			env.Setenv("HOME", home)
			// The build under test, as the Go tests pass it (idemProgram).
			if bin := os.Getenv("IDEM_TEST_BINARY"); bin != "" {
				env.Setenv("IDEM_TEST_BINARY", bin)
			}
			env.Setenv("XDG_STATE_HOME", "")
			env.Setenv("NO_COLOR", "")
			env.Values[scriptT{}] = env.T()
			enterScriptLane(env, dir, files)
			return nil
		},
		Cmds: scriptCmds(),
		// [procs]: the Linux process finder and run lock are built in
		// (not -tags idem_noprocs).
		Condition: func(cond string) (bool, error) {
			if cond == "procs" {
				return procsBuiltIn, nil
			}
			return false, fmt.Errorf("unknown condition %q", cond)
		},
	})
}
