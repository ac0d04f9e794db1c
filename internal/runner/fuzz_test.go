package runner

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// FuzzParseRetryAfter: the child writes IDEM_RETRY_AFTER, so its content is
// untrusted. It never panics, never yields a negative delay, and plain
// seconds mean the same with or without the "s" (to the millisecond).
func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"30s", "1m\n", " 45 ", "0.5", "1d", "0", "", "-5", "1e3", "NaN", "9223372036",
		"9223372036.854775", "9223372037", "99999999999999999999", "1.5h30m", "\x00", "1\n2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := parseRetryAfter(s)
		if err != nil {
			return
		}
		if d < 0 {
			t.Fatalf("parseRetryAfter(%q) = %v: negative", s, d)
		}
		trimmed := strings.TrimSpace(s)
		n, nerr := strconv.ParseUint(trimmed, 10, 64)
		if nerr != nil {
			return
		}
		if n <= 1<<31 && d != time.Duration(n)*time.Second {
			t.Fatalf("parseRetryAfter(%q) = %v, want %ds", s, d, n)
		}
		// The same to the millisecond (a parser may go through float64).
		if d2, err := parseRetryAfter(trimmed + "s"); err == nil && (d2-d > time.Millisecond || d-d2 > time.Millisecond) {
			t.Fatalf("parseRetryAfter(%q) = %v but %q gives %v", s, d, trimmed+"s", d2)
		}
	})
}
