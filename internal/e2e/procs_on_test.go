//go:build linux && !idem_noprocs

package e2e

import "testing"

// needProcs lets a test that checks what the Linux process finder and
// run lock guarantee run: they are built in.
func needProcs(t *testing.T) { t.Helper() }

// procsBuiltIn is the testscript condition [procs].
const procsBuiltIn = true
