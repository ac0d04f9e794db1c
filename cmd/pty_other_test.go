//go:build !linux

package cmd

import (
	"os"
	"testing"

	"github.com/idemhq/idem/internal/testenv"
)

// openPTY is Linux-only: elsewhere the test that needs it does not run.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	testenv.Need(t, "pseudo-terminals", false, "the pseudo-terminal helper is Linux-only")
	return nil, nil
}
