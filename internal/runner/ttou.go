package runner

import (
	"os/signal"
	"syscall"
)

// signalIgnoreTTOU runs fn with SIGTTOU ignored, then restores the default.
func signalIgnoreTTOU(fn func()) {
	signal.Ignore(syscall.SIGTTOU)
	defer signal.Reset(syscall.SIGTTOU)
	fn()
}
