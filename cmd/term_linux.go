package cmd

import "golang.org/x/sys/unix"

// ioctlGetTermios reads a terminal's settings: isTerminal's test.
const ioctlGetTermios = unix.TCGETS
