package e2e

import (
	"os"
	"strconv"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/idemhq/idem/internal/testenv"
)

// needPTY returns a new pseudo-terminal's master and slave.
func needPTY(t testing.TB) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	testenv.Need(t, "pseudo-terminals", err == nil, "cannot open /dev/ptmx: "+errString(err))
	t.Cleanup(func() { m.Close() })
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return m, s
}
