//go:build !linux

package e2e

import (
	"os"
	"testing"

	"github.com/idemhq/idem/internal/testenv"
)

// needPTY opens pseudo-terminals the Linux way (TIOCGPTN, TIOCSPTLCK)
// only: elsewhere the tests that need one do not run.
func needPTY(t testing.TB) (master, slave *os.File) {
	t.Helper()
	testenv.Need(t, "pseudo-terminals", false, "the pseudo-terminal helper is Linux-only")
	return nil, nil
}
