//go:build !linux || idem_noprocs

package e2e

import "testing"

// needProcs skips a test that checks what the Linux process finder and
// run lock guarantee: with the portable fallback (macOS, FreeBSD, or
// -tags idem_noprocs) only the lease protects a key from an earlier
// run's leftovers, as the README's Platforms section says; these tests
// would show exactly that overlap.
func needProcs(t *testing.T) {
	t.Helper()
	t.Skip("needs the Linux process finder and run lock; this build uses the portable fallback")
}

// procsBuiltIn is the testscript condition [procs].
const procsBuiltIn = false
