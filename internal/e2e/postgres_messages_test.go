package e2e

import (
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/testenv"
)

// A server that accepts connections and never answers (a hung pooler, a
// frozen server): idem gives up after one connect timeout with exit 74,
// one error line that says the port took the connection and one hint, not
// pgx's multi-line account (which the error line would show with literal
// \n\t) and not exit 70. It does not try again for the rest of its connect
// budget: the listener sees one try and one probe.
func TestPostgresHungConnect(t *testing.T) {
	quiet(t)
	addr, accepted := testenv.CountingSilentListener(t)
	ran := filepath.Join(t.TempDir(), "ran")
	p := run(t, clean([]string{"IDEM_LEDGER=postgres://idem:S3cret@" + addr + "/ops?sslmode=disable", "PGCONNECT_TIMEOUT=1"},
		"idem", "run", "--key", "evt:pg:hung", "--", "appendto", ran, "x")).expect(74)
	want := "idem: error: ledger postgres://idem@" + addr + "/ops?sslmode=disable: connect: timed out connecting to PostgreSQL at " + addr + ": the port accepts connections but nothing answers on it\n" +
		"idem: hint: " + silentHint + "\n"
	if p.stderr != want {
		t.Fatalf("stderr:\n%s\nwant:\n%s", p.stderr, want)
	}
	if p.stdout != "" || strings.Contains(p.stderr, "S3cret") {
		t.Fatalf("stdout %q, stderr %q: want nothing on stdout, no password", p.stdout, p.stderr)
	}
	if lines := pgLines(t, ran); lines != nil {
		t.Fatalf("the command ran: %q", lines)
	}
	if n := accepted(); n != 2 {
		t.Fatalf("the silent port took %d connections: want 2 (one try, one probe), not a try for every retry in the connect budget", n)
	}
}

// silentHint is the hint for a port that takes connections and answers
// nothing.
const silentHint = "the server (or pooler) at that port hangs, or something there waits for a protocol other than PostgreSQL's: check the host and port; connect_timeout in the DSN or PGCONNECT_TIMEOUT sets the wait"

// pythonHTTPServer starts python3 -m http.server on a loopback port and
// returns its address once it takes connections. It answers a request it
// cannot parse with a page and no status line, and waits for a request
// line before it answers anything.
func pythonHTTPServer(t *testing.T) string {
	t.Helper()
	python := needTool(t, "python3")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, port, _ := net.SplitHostPort(addr)
	p := start(t, inherit(nil, python, "-m", "http.server", port, "--bind", "127.0.0.1", "--directory", t.TempDir()))
	for range 1000 {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return addr
		}
		time.Sleep(10 * time.Millisecond)
	}
	p.send(syscall.SIGKILL)
	t.Fatalf("python3 -m http.server never took connections: %v", p.wait())
	return ""
}

// sshListener answers every connection as an SSH server does: with its
// version line, before the client says anything; then it waits.
func sshListener(t *testing.T) string {
	t.Helper()
	addr, _ := testenv.GreetingListener(t, "SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3\r\n")
	return addr
}

// A listener that answers, but not as PostgreSQL (an HTTP server, a TLS
// server, an SSH server on the DSN's port): waiting does not change what
// listens there, so idem fails at once with exit 74, naming what
// answered, instead of retrying for its connect budget or waiting for its
// connect timeout; the command does not run. HTTP servers that wait for a
// request line before they answer (Go's, Python's) are asked by a probe
// beside the connection: with a connect timeout past --deadline, a probe
// that waited for the connection to fail first would never run.
func TestPostgresNotPostgres(t *testing.T) {
	quiet(t)
	web := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(web.Close) // after the parallel subtests
	tlsWeb := httptest.NewTLSServer(http.NotFoundHandler())
	t.Cleanup(tlsWeb.Close)
	python, ssh := pythonHTTPServer(t), sshListener(t)
	const tlsWhat = "TLS (a TLS server or proxy: PostgreSQL starts TLS only after its own request)"
	for _, tc := range []struct {
		name, addr, sslmode, what string
	}{
		{"http", web.Listener.Addr().String(), "disable", "HTTP"},
		{"http-prefer", web.Listener.Addr().String(), "prefer", "HTTP"},
		{"python-http", python, "disable", "HTTP"},
		{"python-http-prefer", python, "prefer", "HTTP"},
		{"tls", tlsWeb.Listener.Addr().String(), "disable", tlsWhat},
		{"tls-require", tlsWeb.Listener.Addr().String(), "require", tlsWhat},
		{"ssh", ssh, "disable", "SSH"},
		{"ssh-prefer", ssh, "prefer", "SSH"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each waits for its listener's answer
			ran := filepath.Join(t.TempDir(), "ran")
			dsn := "postgres://idem@" + tc.addr + "/ops?sslmode=" + tc.sslmode
			c := clean([]string{"IDEM_LEDGER=" + dsn, "PGCONNECT_TIMEOUT=600"}, "idem", "run", "--key", "evt:pg:notpg", "--deadline", "20s", "--", "appendto", ran, "x")
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
