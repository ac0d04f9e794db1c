//go:build !windows

// Command idem makes a shell command safe to repeat: it runs the command once
// per key, records the result in a ledger and replays it for every repeat.
//
// It builds on Linux, macOS and FreeBSD; on Windows the build stops at
// unsupported_windows.go.
package main

import (
	"context"
	"os"

	"github.com/idemhq/idem/cmd"
	"github.com/idemhq/idem/internal/probe"
)

func main() {
	probe.At("main")
	code := cmd.Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr)
	probe.Exit()
	os.Exit(code)
}
