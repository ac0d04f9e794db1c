package shquote

import (
	"os/exec"
	"testing"
)

func TestWord(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/var/lib/idem", "/var/lib/idem"},
		{"", "''"},
		{"/tmp/my dir", "'/tmp/my dir'"},
		{"/tmp/$(touch pwned)", "'/tmp/$(touch pwned)'"},
		{"it's", `'it'\''s'`},
		{"~/x", "'~/x'"},
	} {
		if got := Word(tc.in); got != tc.want {
			t.Errorf("Word(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestWordThroughShell: what the shell makes of a quoted word is the word,
// whatever it holds.
func TestWordThroughShell(t *testing.T) {
	for _, s := range []string{"plain", "a b", "$(echo no)", "`echo no`", "it's", "x\"y", "a\\b", "*", "~", "new\nline", "-n"} {
		out, err := exec.Command("/bin/sh", "-c", "printf '%s' "+Word(s)).Output()
		if err != nil {
			t.Fatal(err)
		}
		if string(out) != s {
			t.Errorf("sh made %q of Word(%q) = %s", out, s, Word(s))
		}
	}
}
