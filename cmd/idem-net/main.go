//go:build !windows

// Command idem-net is idem with the PostgreSQL ledger linked in beside the
// SQLite one, and an HTTP client for monitor pings. idem hands it every
// invocation on a PostgreSQL ledger (location.Companion) and every run
// with a ping URL, in the same process, so that idem itself links no
// network client and starts as fast as a run on a ledger file allows.
// It takes the same arguments as idem, and is installed beside it.
package main

import (
	"context"
	"os"

	"github.com/idemhq/idem/cmd"
	"github.com/idemhq/idem/internal/location"
	"github.com/idemhq/idem/internal/location/filebackend"
	"github.com/idemhq/idem/internal/location/pgbackend"
	"github.com/idemhq/idem/internal/ping"
	"github.com/idemhq/idem/internal/probe"
)

func main() {
	probe.At("main")
	backends := location.NewRegistry(pgbackend.Backend{}, filebackend.Backend{})
	code := cmd.Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr, cmd.Linked{Backends: backends, Ping: ping.New})
	probe.Exit()
	os.Exit(code)
}
