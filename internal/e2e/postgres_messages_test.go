package e2e

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemhq/idem/internal/testenv"
)

// A server that accepts connections and never answers (a hung pooler, a
// frozen server): idem gives up after the connect timeout with exit 74,
// one error line and one hint, not pgx's multi-line account (which the
// error line would show with literal \n\t) and not exit 70.
func TestPostgresHungConnect(t *testing.T) {
	addr := testenv.SilentListener(t)
	ran := filepath.Join(t.TempDir(), "ran")
	p := run(t, clean([]string{"IDEM_LEDGER=postgres://idem:S3cret@" + addr + "/ops", "PGCONNECT_TIMEOUT=1"},
		"idem", "run", "--key", "evt:pg:hung", "--", "appendto", ran, "x")).expect(74)
	want := "idem: error: ledger postgres://idem@" + addr + "/ops: connect: timed out connecting to PostgreSQL at " + addr + "\n" +
		"idem: hint: check the host and port, that a firewall lets this host through, and that the server (or pooler) answers; connect_timeout in the DSN or PGCONNECT_TIMEOUT sets the wait\n"
	if p.stderr != want {
		t.Fatalf("stderr:\n%s\nwant:\n%s", p.stderr, want)
	}
	if p.stdout != "" || strings.Contains(p.stderr, "S3cret") {
		t.Fatalf("stdout %q, stderr %q: want nothing on stdout, no password", p.stdout, p.stderr)
	}
	if lines := pgLines(t, ran); lines != nil {
		t.Fatalf("the command ran: %q", lines)
	}
}
