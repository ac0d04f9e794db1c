package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/runner"
)

// docSecs writes a duration as the documentation does: 120s, 7.5s.
func docSecs(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "s"
}

// docOutage is the formula docs/internals.md gives for the outage a run
// rides out, however it falls, written out in Go.
func docOutage(lease, grace time.Duration) time.Duration {
	return lease - lease/10 - grace - lease/6 - min(lease/10, 5*time.Second) - min(lease/20, 2*time.Second)
}

// The outage figures the documentation states as text (the default
// leases, their kill grace, renewal period and the outage they ride out)
// are runner's: a change of the defaults or of the lease arithmetic that
// leaves a page behind fails here, as `idem run --help` derives its own.
func TestDocOutageFigures(t *testing.T) {
	root := moduleRoot(t)
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	internals, pg := read("docs/internals.md"), read("docs/postgres.md")
	const formula = "outage = lease − lease/10 − kill grace − lease/6 − min(lease/10, 5s) − min(lease/20, 2s)"
	if !strings.Contains(internals, formula) {
		t.Errorf("docs/internals.md does not give the outage formula %q", formula)
	}
	for _, lease := range []time.Duration{runner.SharedLease, runner.LocalLease, 10 * time.Second, 6 * time.Second, time.Minute} {
		grace := runner.DefaultGrace(lease)
		if got, want := docOutage(lease, grace), runner.Tolerance(lease, grace); got != want {
			t.Errorf("--lease %s: docs/internals.md's formula gives %s, runner.Tolerance %s: change the formula with the arithmetic", lease, got, want)
		}
	}
	for _, row := range []struct {
		ledger string
		lease  time.Duration
	}{
		{"PostgreSQL (default)", runner.SharedLease},
		{"a file (default)", runner.LocalLease},
	} {
		grace := runner.DefaultGrace(row.lease)
		want := "| " + row.ledger + " | " + docSecs(row.lease) + " | " + docSecs(grace) + " | " + docSecs(row.lease/6) + " | " +
			docSecs(runner.Tolerance(row.lease, grace)) + " |"
		if !strings.Contains(internals, want) {
			t.Errorf("docs/internals.md's lease table has no row %q", want)
		}
	}
	tol := runner.Tolerance(runner.SharedLease, runner.DefaultGrace(runner.SharedLease))
	shared := docSecs(runner.SharedLease)
	for _, c := range []struct{ page, text, want string }{
		{"docs/postgres.md", pg, "a run rides out a ledger outage of " + docSecs(tol) + " with the defaults"},
		{"docs/postgres.md", pg, "(`--lease`, " + shared + " on PostgreSQL)"},
		{"docs/internals.md", internals, "The default PostgreSQL lease is " + shared + ", renewed every " + docSecs(runner.SharedLease/6) + ","},
		{"docs/internals.md", internals, "its takeover (" + shared + " by default)"},
	} {
		if !strings.Contains(strings.Join(strings.Fields(c.text), " "), c.want) {
			t.Errorf("%s does not say %q", c.page, c.want)
		}
	}
}
