package cmd

import (
	"slices"
	"testing"
)

// TestChildEnviron: the command gets IDEM_LEDGER without its password;
// a file's path, and every other variable, pass as they are.
func TestChildEnviron(t *testing.T) {
	a := newApp(nil, nil)
	for _, tc := range []struct {
		name     string
		env, out []string
	}{
		{"file", []string{"IDEM_LEDGER=/var/lib/idem/ledger.db", "PGPASSWORD=x"}, []string{"IDEM_LEDGER=/var/lib/idem/ledger.db", "PGPASSWORD=x"}},
		{"url", []string{"A=1", "IDEM_LEDGER=postgres://app:secret@db.internal/ops"}, []string{"A=1", "IDEM_LEDGER=postgres://app@db.internal/ops"}},
		{"no password", []string{"IDEM_LEDGER=postgres://app@db.internal/ops"}, []string{"IDEM_LEDGER=postgres://app@db.internal/ops"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := slices.Clone(tc.env)
			if got := a.childEnviron(tc.env); !slices.Equal(got, tc.out) {
				t.Errorf("childEnviron(%q) = %q, want %q", in, got, tc.out)
			}
			if !slices.Equal(tc.env, in) {
				t.Errorf("childEnviron changed its argument: %q", tc.env)
			}
		})
	}
}
