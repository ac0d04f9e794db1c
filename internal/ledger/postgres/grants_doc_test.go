package postgres_test

import (
	"os"
	"strings"
	"testing"

	"github.com/idemhq/idem/internal/ledger/postgres"
)

// TestDocsRuntimeGrants: the grants docs/postgres.md tells a DBA to run
// by hand are the ones 'idem schema --grant' prints and the runtime role
// tests pass with (a table left out of the page makes purge and metrics
// fail with "permission denied" for a role set up from it).
func TestDocsRuntimeGrants(t *testing.T) {
	b, err := os.ReadFile("../../../docs/postgres.md")
	if err != nil {
		t.Fatal(err)
	}
	var doc []string
	for _, line := range strings.Split(string(b), "\n") {
		if l := strings.TrimSpace(line); strings.HasPrefix(l, "GRANT ") && strings.HasSuffix(l, ";") {
			doc = append(doc, l)
		}
	}
	var want []string
	for _, g := range postgres.RuntimeGrants("idem", "idem_app") {
		want = append(want, strings.ReplaceAll(g, `"`, "")+";")
	}
	if strings.Join(doc, "\n") != strings.Join(want, "\n") {
		t.Errorf("docs/postgres.md grants:\n%s\nwant what idem schema --grant idem_app prints:\n%s", strings.Join(doc, "\n"), strings.Join(want, "\n"))
	}
}
