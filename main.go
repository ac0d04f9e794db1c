//go:build !windows

// Command idem makes a shell command safe to repeat: it runs the command once
// per key, records the result in a ledger and replays it for every repeat.
//
// It links only the SQLite ledger, so that a run on a ledger file pays for
// nothing else at start-up; an invocation on a PostgreSQL ledger, and a
// run with monitor pings, is handed to idem-net (cmd/idem-net), installed
// beside it: from package initialisation when the command line says so
// plainly (internal/handoff), else once cmd has read it.
//
// It builds on Linux, macOS and FreeBSD; on Windows the build stops at
// unsupported_windows.go.
package main

import (
	"context"
	"os"

	"github.com/idemhq/idem/cmd"
	"github.com/idemhq/idem/internal/handoff"
	"github.com/idemhq/idem/internal/ledger/pgdsn"
	"github.com/idemhq/idem/internal/location"
	"github.com/idemhq/idem/internal/location/filebackend"
	"github.com/idemhq/idem/internal/probe"
)

func main() {
	probe.At("main")
	backends := location.NewRegistry(filebackend.Backend{}).WithCompanion(location.Companion{
		Name: handoff.Name, Claims: pgdsn.Is, Kind: "a PostgreSQL ledger"})
	code := cmd.Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr, cmd.Linked{Backends: backends})
	probe.Exit()
	os.Exit(code)
}
