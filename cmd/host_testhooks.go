//go:build testhooks

package cmd

import "github.com/idemhq/idem/internal/runner"

// testOnlyHostOverride lets tests simulate a fleet on one machine, in a
// build with the testhooks tag only (internal/e2e's fleetIdem): when set,
// IDEM_TESTONLY_HOST replaces the host name and IDEM_TESTONLY_BOOT_ID the
// boot id, so that processes here claim to run on different hosts and race
// for one key in a shared (PostgreSQL) ledger. A different boot id makes an
// owner "elsewhere": only its lease's expiry frees its key, never a check
// of its pid.
func testOnlyHostOverride(h runner.Host, getenv func(string) string) runner.Host {
	if v := getenv("IDEM_TESTONLY_HOST"); v != "" {
		h.Name = v
	}
	if v := getenv("IDEM_TESTONLY_BOOT_ID"); v != "" {
		h.BootID = v
	}
	return h
}
