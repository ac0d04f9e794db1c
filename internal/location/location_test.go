package location_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/idemhq/idem/internal/ledger"
	"github.com/idemhq/idem/internal/location"
)

// fake is a backend that claims the values with its prefix ("": all).
type fake struct{ prefix string }

func (f fake) Claims(v string) bool { return strings.HasPrefix(v, f.prefix) }
func (f fake) Check(v string) error {
	if strings.HasSuffix(v, "!") {
		return errors.New("bad " + f.prefix)
	}
	return nil
}
func (fake) Open(context.Context, string, location.Options) (ledger.Ledger, error) { return nil, nil }
func (f fake) Describe(v string) string                                            { return f.prefix + "|" + v }
func (fake) WithoutPassword(v string) (string, bool, bool)                         { return v, false, true }
func (fake) AuthFailed(error) bool                                                 { return false }
func (f fake) Shared() bool                                                        { return f.prefix != "" }
func (fake) RunLockPath(ledger.Ledger, func() string) string                       { return "" }
func (fake) CheckBackup() error                                                    { return nil }

// TestLookup: the first backend that claims a value keeps it, in the
// order registered; a value none claims is ErrUnclaimed.
func TestLookup(t *testing.T) {
	r := location.NewRegistry(fake{"db:"}, fake{""})
	for _, tc := range []struct {
		value, describe string
		shared          bool
		check           string
	}{
		{"db:x", "db:|db:x", true, ""},
		{"/tmp/l.db", "|/tmp/l.db", false, ""},
		{"db:x!", "db:|db:x!", true, "bad db:"},
	} {
		t.Run(tc.value, func(t *testing.T) {
			loc, err := r.Lookup(tc.value)
			if err != nil {
				t.Fatal(err)
			}
			if got := loc.Describe(); got != tc.describe || loc.Shared() != tc.shared || loc.Value() != tc.value {
				t.Errorf("Lookup(%q): describes %q, shared %v; want %q, %v", tc.value, got, loc.Shared(), tc.describe, tc.shared)
			}
			if err := loc.Check(); fmtErr(err) != tc.check {
				t.Errorf("Check: %v, want %q", err, tc.check)
			}
		})
	}
	if _, err := location.NewRegistry(fake{"db:"}).Lookup("/tmp/l.db"); !errors.Is(err, location.ErrUnclaimed) {
		t.Errorf("a value no backend claims: %v, want ErrUnclaimed", err)
	}
}

func fmtErr(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
