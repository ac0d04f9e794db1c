//go:build testhooks

package cmd

import "time"

// testOnlyNow lets tests run a day of cron firings in seconds, in a build
// with the testhooks tag only (internal/e2e's catch-up test): when set,
// IDEM_TESTONLY_NOW (RFC 3339) is the instant whose period --period
// names. Nothing else reads it: leases, ages and records keep the host's
// clock. (libfaketime does not reach Go, which reads the clock through
// the vDSO.)
func testOnlyNow(now func() time.Time, getenv func(string) string) func() time.Time {
	v := getenv("IDEM_TESTONLY_NOW")
	if v == "" {
		return now
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return now
	}
	return func() time.Time { return t }
}
