package cmd

import (
	"github.com/idemhq/idem/internal/location"
	"github.com/idemhq/idem/internal/location/filebackend"
	"github.com/idemhq/idem/internal/location/pgbackend"
	"github.com/idemhq/idem/internal/ping"
)

// linkedAll is what idem-net links: both backends and the pinger, so
// that a test runs any ledger, and pings, in-process.
func linkedAll() Linked {
	return Linked{Backends: location.NewRegistry(pgbackend.Backend{}, filebackend.Backend{}), Ping: ping.New}
}
