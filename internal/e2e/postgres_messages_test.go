package e2e

import (
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemhq/idem/internal/testenv"
)

// A server that accepts connections and never answers (a hung pooler, a
// frozen server): idem gives up after the connect timeout with exit 74,
// one error line that says the port took the connection and one hint, not pgx's multi-line account (which the
// error line would show with literal \n\t) and not exit 70.
func TestPostgresHungConnect(t *testing.T) {
	addr := testenv.SilentListener(t)
	ran := filepath.Join(t.TempDir(), "ran")
	p := run(t, clean([]string{"IDEM_LEDGER=postgres://idem:S3cret@" + addr + "/ops", "PGCONNECT_TIMEOUT=1"},
		"idem", "run", "--key", "evt:pg:hung", "--", "appendto", ran, "x")).expect(74)
	want := "idem: error: ledger postgres://idem@" + addr + "/ops: connect: timed out connecting to PostgreSQL at " + addr + ": the port accepts connections but nothing answers on it\n" +
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

// A listener that answers, but not as PostgreSQL (an HTTP server, a TLS
// server on the DSN's port): waiting does not change what listens there,
// so idem fails at once with exit 74, naming what answered, instead of
// retrying for its connect budget; the command does not run.
func TestPostgresNotPostgres(t *testing.T) {
	web := httptest.NewServer(http.NotFoundHandler())
	defer web.Close()
	tlsWeb := httptest.NewTLSServer(http.NotFoundHandler())
	defer tlsWeb.Close()
	for _, tc := range []struct {
		name, addr, sslmode, what string
	}{
		{"http", web.Listener.Addr().String(), "disable", "HTTP"},
		{"http-prefer", web.Listener.Addr().String(), "prefer", "HTTP"},
		{"tls", tlsWeb.Listener.Addr().String(), "disable", "TLS (a TLS server or proxy: PostgreSQL starts TLS only after its own request)"},
		{"tls-require", tlsWeb.Listener.Addr().String(), "require", "TLS (a TLS server or proxy: PostgreSQL starts TLS only after its own request)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ran := filepath.Join(t.TempDir(), "ran")
			dsn := "postgres://idem@" + tc.addr + "/ops?sslmode=" + tc.sslmode
			c := clean([]string{"IDEM_LEDGER=" + dsn}, "idem", "run", "--key", "evt:pg:notpg", "--", "appendto", ran, "x")
			p := run(t, c).expect(74)
			want := "idem: error: ledger postgres://idem@" + tc.addr + "/ops?sslmode=" + tc.sslmode + ": connect: the server at " + tc.addr +
				" answered " + tc.what + ", not PostgreSQL\n" +
				"idem: hint: point the DSN's host and port at PostgreSQL (port 5432 by default) or PgBouncer (6432): that port serves something else\n"
			if p.stderr != want {
				t.Fatalf("stderr:\n%s\nwant:\n%s", p.stderr, want)
			}
			if lines := pgLines(t, ran); lines != nil {
				t.Fatalf("the command ran: %q", lines)
			}
		})
	}
}
