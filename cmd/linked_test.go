package cmd

import (
	"github.com/idemhq/idem/internal/location"
	"github.com/idemhq/idem/internal/location/filebackend"
	"github.com/idemhq/idem/internal/location/pgbackend"
)

// linkedAll is what idem-net links: both backends, so that a test runs any
// ledger in-process.
func linkedAll() Linked {
	return Linked{Backends: location.NewRegistry(pgbackend.Backend{}, filebackend.Backend{})}
}
