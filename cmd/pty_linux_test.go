package cmd

import (
	"fmt"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/idemhq/idem/internal/testenv"
)

// openPTY opens a pseudo-terminal's master and slave (Linux's
// TIOCSPTLCK and TIOCGPTN).
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err == nil {
		t.Cleanup(func() { master.Close() })
	}
	testenv.Need(t, "pseudo-terminals", err == nil, fmt.Sprintf("open /dev/ptmx: %v", err))
	if err := unix.IoctlSetPointerInt(int(master.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlockpt: %v", err)
	}
	n, err := unix.IoctlGetInt(int(master.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("ptsname: %v", err)
	}
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open pts: %v", err)
	}
	return master, slave
}
