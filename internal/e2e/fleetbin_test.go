package e2e

import "testing"

// fleetIdem is the idem that fleet tests run as several hosts (through
// IDEM_TESTONLY_HOST). A placeholder here: the test binary's idem.
func fleetIdem(t *testing.T) string { return idemBin(t) }
