package cmd

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestChildEnviron: the command gets IDEM_LEDGER naming the ledger idem
// runs under, however it was named (also when only --ledger or the
// default location named it), without its password; a file as an
// absolute path, and every other variable, pass as they are.
func TestChildEnviron(t *testing.T) {
	a := newApp(nil, nil, nil, linkedAll())
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		ledger   string // the location idem runs under
		env, out []string
	}{
		{"file", "/var/lib/idem/ledger.db", []string{"IDEM_LEDGER=/var/lib/idem/ledger.db", "PGPASSWORD=x"}, []string{"IDEM_LEDGER=/var/lib/idem/ledger.db", "PGPASSWORD=x"}},
		{"url", "postgres://app:secret@db.internal/ops", []string{"A=1", "IDEM_LEDGER=postgres://app:secret@db.internal/ops"}, []string{"A=1", "IDEM_LEDGER=postgres://app@db.internal/ops"}},
		{"no password", "postgres://app@db.internal/ops", []string{"IDEM_LEDGER=postgres://app@db.internal/ops"}, []string{"IDEM_LEDGER=postgres://app@db.internal/ops"}},
		{"flag dsn", "postgres://app:secret@db.internal/ops", []string{"A=1"}, []string{"A=1", "IDEM_LEDGER=postgres://app@db.internal/ops"}},
		{"flag over env", "postgres://app@db.internal/ops", []string{"IDEM_LEDGER=/home/a/ledger.db", "A=1"}, []string{"IDEM_LEDGER=postgres://app@db.internal/ops", "A=1"}},
		{"relative file", "state/ledger.db", nil, []string{"IDEM_LEDGER=" + filepath.Join(wd, "state/ledger.db")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			loc, err := a.backends.Lookup(tc.ledger)
			if err != nil {
				t.Fatal(err)
			}
			in := slices.Clone(tc.env)
			if got := a.childEnviron(tc.env, loc); !slices.Equal(got, tc.out) {
				t.Errorf("childEnviron(%q) under %s = %q, want %q", in, tc.ledger, got, tc.out)
			}
			if !slices.Equal(tc.env, in) {
				t.Errorf("childEnviron changed its argument: %q", tc.env)
			}
		})
	}
}
