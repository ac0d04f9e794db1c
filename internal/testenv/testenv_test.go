package testenv

import (
	"strings"
	"testing"
)

// recorder stands in for a test: it notes whether Need skipped or failed it.
type recorder struct {
	skipped, failed string
}

func (r *recorder) Skip(args ...any)  { r.skipped = args[0].(string) }
func (r *recorder) Fatal(args ...any) { r.failed = args[0].(string) }

func TestNeed(t *testing.T) {
	for _, tc := range []struct {
		name           string
		strict         string
		ok             bool
		skips, failing bool
	}{
		{"present", "", true, false, false},
		{"present_strict", "1", true, false, false},
		{"missing", "", false, true, false},
		{"missing_strict_off", "0", false, true, false},
		{"missing_strict", "1", false, false, true},
		{"missing_strict_true", "true", false, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(StrictVar, tc.strict)
			var r recorder
			Need(&r, "strace", tc.ok, "strace is not installed")
			if got, want := r.skipped != "", tc.skips; got != want {
				t.Errorf("skipped = %v (%q), want %v", got, r.skipped, want)
			}
			if got, want := r.failed != "", tc.failing; got != want {
				t.Errorf("failed = %v (%q), want %v", got, r.failed, want)
			}
			for _, msg := range []string{r.skipped, r.failed} {
				if msg != "" && !strings.HasPrefix(msg, "missing strace: strace is not installed (") {
					t.Errorf("message %q does not say what is missing and why", msg)
				}
			}
		})
	}
}
