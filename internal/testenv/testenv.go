// Package testenv decides what a test does when something it needs from
// outside the module is missing (a program such as strace, a PostgreSQL
// server, a pseudo-terminal): it skips, saying what is missing, or, when
// IDEM_TEST_STRICT=1 (CI sets it), it fails. `go test` prints only "ok"
// for a package whose tests skipped, so a CI run that silently skipped its
// fault injection or its PostgreSQL tests would look green.
//
// A skip the test chooses (testing.Short) is not a missing requirement and
// does not go through Need.
package testenv

import (
	"os"
	"strconv"
)

// StrictVar is the environment variable that turns a missing requirement
// from a skip into a failure.
const StrictVar = "IDEM_TEST_STRICT"

// Strict reports whether IDEM_TEST_STRICT holds a true value (1, true).
func Strict() bool {
	v, err := strconv.ParseBool(os.Getenv(StrictVar))
	return err == nil && v
}

// TB is the part of testing.TB that Need uses; a testscript.T has it too.
type TB interface {
	Skip(args ...any)
	Fatal(args ...any)
}

// Need does nothing when ok. Otherwise it skips t, or fails it in strict
// mode, with one message: what is missing and why (how to provide it).
func Need(t TB, what string, ok bool, why string) {
	if h, isHelper := t.(interface{ Helper() }); isHelper {
		h.Helper()
	}
	if ok {
		return
	}
	if Strict() {
		t.Fatal("missing " + what + ": " + why + " (" + StrictVar + "=1: a missing requirement fails the test)")
		return
	}
	t.Skip("missing " + what + ": " + why + " (skipped; " + StrictVar + "=1 makes this a failure)")
}
