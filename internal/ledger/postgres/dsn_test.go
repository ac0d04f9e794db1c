package postgres

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemhq/idem/internal/ledger"
	"github.com/idemhq/idem/internal/ledger/ledgertest"
	"github.com/idemhq/idem/internal/testenv"
)

func TestIsDSN(t *testing.T) {
	for _, tc := range []struct {
		s    string
		want bool
	}{
		{"postgres://idem@db/ops", true},
		{"postgresql://idem@db/ops", true},
		{"host=db dbname=ops", true},
		{"  dbname = ops", true},
		{"hots=db", true}, // refused by CheckDSN, never a file
		{"a=b.db", true},
		{"   ", true},
		{"ledger.db", false},
		{"./a=b.db", false},
		{"/srv/run=1/ledger.db", false},
		{"ledger.db host=db", false},
		{"=x", false},
		{"1a=b", false},
		{"mysql://db/ops", false},
	} {
		if got := IsDSN(tc.s); got != tc.want {
			t.Errorf("IsDSN(%q) = %v, want %v", tc.s, got, tc.want)
		}
	}
}

// The keyword/value parser reads what pgx (and libpq) read: quotes,
// backslashes, spaces around '='; and what it writes back reads the same.
func TestKeywordValueAsPgx(t *testing.T) {
	for _, s := range []string{
		`host=db1 port=5433 dbname=ops user=idem password=secret`,
		`host = db1 dbname='my ops' user=idem password='it\'s'`,
		`host=db1 dbname=ops user=idem password='a \'quoted\' \\ value'`,
		`host=db1 dbname=ops user=idem password=back\ slash\\`,
		"\thost=db1\n dbname=ops  user=idem password= ",
		`host=db1 dbname=ops user=idem password=''`,
	} {
		t.Run(s, func(t *testing.T) {
			pairs, err := parseKeywordValue(s)
			if err != nil {
				t.Fatal(err)
			}
			want, err := pgconn.ParseConfig(s)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, p := range pairs {
				got[p.key] = p.val
			}
			if got["host"] != want.Host || got["dbname"] != want.Database || got["user"] != want.User || got["password"] != want.Password {
				t.Fatalf("parsed %q, pgx reads host %q dbname %q user %q password %q", got, want.Host, want.Database, want.User, want.Password)
			}
			again, err := pgconn.ParseConfig(formatKeywordValue(pairs))
			if err != nil {
				t.Fatalf("written back as %q: %v", formatKeywordValue(pairs), err)
			}
			if again.Host != want.Host || again.Database != want.Database || again.User != want.User || again.Password != want.Password {
				t.Fatalf("written back as %q, read differently", formatKeywordValue(pairs))
			}
		})
	}
}

func TestCheckDSN(t *testing.T) {
	for _, tc := range []struct {
		s, want string // want: "" for no error, else a part of it
	}{
		{"host=db1 dbname=ops user=idem password='x y' sslmode=verify-full", ""},
		{"postgres://whatever", ""},
		{"dbname=ops pool_max_conns=2", `an unknown keyword: "pool_max_conns"`},
		{"hots=db1", `an unknown keyword: "hots"`},
		{"Host=db1", `an unknown keyword: "Host"`},
		{"host=db1 hostaddr=10.0.0.1", `a keyword idem does not support: "hostaddr"`},
		{"host=db1 password=S3cret Pw=x", "an unknown keyword after its password"},
		{"host=db1 password=S3cret pw", `a word without "=" after it`},
		{"host=db1 password='S3cret", "an unterminated quoted value (after password=)"},
		{"host=db1 password='S3cret\\'", "an unterminated quoted value"},
		{"  ", "is empty"},
		{"host=db1 \x00", "a NUL byte"},
	} {
		err := CheckDSN(tc.s)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("CheckDSN(%q) = %v, want nil", tc.s, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("CheckDSN(%q) = %v, want an error with %q", tc.s, err, tc.want)
		case err != nil && (strings.Contains(err.Error(), "S3cret") || strings.Contains(err.Error(), "Pw")):
			t.Errorf("CheckDSN(%q) = %v: shows the password", tc.s, err)
		}
	}
}

func TestWithoutPassword(t *testing.T) {
	for _, tc := range []struct {
		dsn, clean string
		had, ok    bool
	}{
		{"postgres://idem:S3cret@db:5432/ops?sslmode=require", "postgres://idem@db:5432/ops?sslmode=require", true, true},
		{"postgresql://idem@db/ops?password=S3cret&application_name=x", "postgresql://idem@db/ops?application_name=x", true, true},
		{"postgres://db/ops?sslpassword=S3cret", "postgres://db/ops", true, true},
		{"postgres://idem:S3cret@db/ops?pass%77ord=S3cret", "postgres://idem@db/ops", true, true},
		{"postgres://:S3cret@db/ops", "postgres://db/ops", true, true},
		{"postgres://idem:S3c?ret@db/ops", "postgres://idem@db/ops", true, true},
		{"postgres://idem@db/ops?sslmode=disable", "postgres://idem@db/ops?sslmode=disable", false, true},
		{"postgres://idem@db/ops?options=a@b", "postgres://idem@db/ops?options=a@b", false, true},
		{"postgres://idem:S3c@ret@db/ops", "", false, false},
		{"postgres://idem:S3c/ret@db/ops", "", false, false},
		{"host=db dbname=ops password='S3cret Pw' sslpassword=S3cret", "host=db dbname=ops", true, true},
		{"host=db dbname='my ops'", "host=db dbname='my ops'", false, true},
		{"host=db password='S3cret", "", false, false},
	} {
		clean, had, ok := WithoutPassword(tc.dsn)
		if clean != tc.clean || had != tc.had || ok != tc.ok {
			t.Errorf("WithoutPassword(%q) = %q, %v, %v; want %q, %v, %v", tc.dsn, clean, had, ok, tc.clean, tc.had, tc.ok)
		}
		if r := redactDSN(tc.dsn); strings.Contains(r, "S3c") || strings.Contains(r, "Pw") {
			t.Errorf("redactDSN(%q) = %q: shows the password", tc.dsn, r)
		}
	}
}

// openErr opens dsn and returns its error, which must be a *StoreError on
// one line with a hint, never showing secret.
func openErr(t *testing.T, dsn, secret string) *ledger.StoreError {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := open(ctx, dsn, Schema, Options{}, migrations)
	if err == nil {
		l.Close()
		t.Fatalf("open %s: no error", dsn)
	}
	var se *ledger.StoreError
	if !errors.As(err, &se) {
		t.Fatalf("open: %T %v, want a *ledger.StoreError (exit 74)", err, err)
	}
	msg := se.Error() + "\n" + se.Hint
	if strings.Count(msg, "\n") != 1 || strings.ContainsAny(msg, "\t") || strings.Contains(msg, `\n`) || se.Hint == "" {
		t.Fatalf("error %q, hint %q: want one line each, and a hint", se.Error(), se.Hint)
	}
	if secret != "" && strings.Contains(msg, secret) {
		t.Fatalf("error %q, hint %q: shows the password", se.Error(), se.Hint)
	}
	return se
}

// A server that accepts the connection and never answers: the connect
// timeout is idem's error, in one line that says the port took the
// connection, with a hint.
// It gives up after that one connect timeout: the listener sees one try
// (sslmode=disable: one connection a try) and one probe, not a try for
// each retry in the connect budget.
func TestConnectHung(t *testing.T) {
	addr, accepted := testenv.CountingSilentListener(t)
	se := openErr(t, "postgres://idem:S3cret@"+addr+"/ops?sslmode=disable&connect_timeout=1", "S3cret")
	if want := "timed out connecting to PostgreSQL at " + addr + ": the port accepts connections but nothing answers on it"; se.Err.Error() != want {
		t.Errorf("error %q, want %q", se.Err, want)
	}
	if !strings.Contains(se.Hint, "connect_timeout") || !strings.Contains(se.Hint, "hangs") {
		t.Errorf("hint %q: want a hung server named, and how to set the wait", se.Hint)
	}
	if n := accepted(); n != 2 {
		t.Errorf("the silent port took %d connections, want 2: one try, one probe", n)
	}
}

// The probe takes PostgreSQL and PgBouncer for what they are, so that a
// slow server, probed while a connection to it is under way, is waited
// for and not refused.
func TestProbeKnowsPostgres(t *testing.T) {
	for _, dsn := range []string{ledgertest.PostgresDSN(t), ledgertest.PgBouncerDSN(t)} {
		u, err := url.Parse(dsn)
		if err != nil {
			t.Fatal(err)
		}
		if err := probe(context.Background(), u.Host); err != nil {
			t.Errorf("probe of %s: %v, want nil (PostgreSQL)", u.Host, err)
		}
	}
}

// selfSigned returns a certificate for name (and its key) that is its own
// CA, and the path of its PEM file.
func selfSigned(t *testing.T, name string) (tls.Certificate, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), name+".crt")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, path
}

// tlsServer answers PostgreSQL's SSLRequest and shakes hands with cert,
// then hangs up: enough for a client to judge the certificate.
func tlsServer(t *testing.T, cert tls.Certificate) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(30 * time.Second))
				if _, err := io.ReadFull(c, make([]byte, 8)); err != nil { // SSLRequest
					return
				}
				if _, err := c.Write([]byte{'S'}); err != nil {
					return
				}
				tls.Server(c, &tls.Config{Certificates: []tls.Certificate{cert}}).Handshake()
			}()
		}
	}()
	return ln.Addr().String()
}

// verify-full to an IP address the certificate does not list: the hint is
// about the certificate's names, not about whether PostgreSQL runs.
func TestConnectCertificateName(t *testing.T) {
	cert, ca := selfSigned(t, "localhost")
	addr := tlsServer(t, cert)
	se := openErr(t, "postgres://idem@"+addr+"/ops?sslmode=verify-full&connect_timeout=10&sslrootcert="+ca, "")
	if !strings.Contains(se.Err.Error(), "the certificate of PostgreSQL at "+addr+" is not valid for 127.0.0.1") {
		t.Errorf("error %q: want the certificate's name named", se.Err)
	}
	if !strings.Contains(se.Hint, "host name its certificate holds") || strings.Contains(se.Hint, "running") {
		t.Errorf("hint %q: want one about the certificate's names", se.Hint)
	}

	// Signed by a CA that sslrootcert does not hold.
	_, other := selfSigned(t, "other")
	se = openErr(t, "postgres://idem@"+addr+"/ops?sslmode=verify-ca&connect_timeout=10&sslrootcert="+other, "")
	if !strings.Contains(se.Err.Error(), "cannot verify the certificate of PostgreSQL at "+addr) || !strings.Contains(se.Hint, "sslrootcert") {
		t.Errorf("error %q, hint %q: want the certificate unverified and sslrootcert named", se.Err, se.Hint)
	}
}

// TLS settings that cannot work name the setting, and the hint the TLS
// settings, not the DSN's shape.
func TestParseTLSSettings(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-ca.crt")
	for dsn, want := range map[string]string{
		"postgres://idem@127.0.0.1:1/ops?sslmode=verify-full&sslrootcert=" + missing: "failed to configure TLS: unable to read CA file: open " + missing,
		"host=127.0.0.1 port=1 dbname=ops sslmode=verify-everything":                 "failed to configure TLS: sslmode is invalid",
		"postgres://idem@127.0.0.1:1/ops?sslcert=" + missing:                         `failed to configure TLS: both "sslcert" and "sslkey" are required`,
	} {
		se := openErr(t, dsn, "")
		if !strings.Contains(se.Err.Error(), want) || !strings.Contains(se.Hint, "sslrootcert") {
			t.Errorf("%s: error %q, hint %q; want %q and the TLS settings named", dsn, se.Err, se.Hint, want)
		}
	}
}

// A special character left unencoded in a URL's password gets a hint
// about percent-encoding, and the password is never shown.
func TestURLPasswordEncoding(t *testing.T) {
	for _, dsn := range []string{
		"postgres://idem:S3c@ret@127.0.0.1:1/ops",
		"postgres://idem:S3c/ret@127.0.0.1:1/ops",
		"postgres://idem:S3c%ret@127.0.0.1:1/ops",
		"postgres://idem:S3c#ret@127.0.0.1:port/ops",
	} {
		se := openErr(t, dsn, "S3c")
		if se.Hint != encodeHint {
			t.Errorf("%s: error %q, hint %q; want the percent-encoding hint", dsn, se.Err, se.Hint)
		}
	}
}

// A password file that group or others may use is ignored, as libpq
// ignores it, unless a password comes from elsewhere.
func TestInsecurePassfile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "pgpass")
	if err := os.WriteFile(file, []byte("*:*:*:*:S3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PGPASSWORD", "")
	t.Setenv("PGSERVICE", "")
	t.Setenv("PGPASSFILE", file)
	t.Setenv("HOME", dir)
	const dsn = "postgres://idem@127.0.0.1:1/ops"
	for _, tc := range []struct {
		mode os.FileMode
		dsn  string
		want string
	}{
		{0o600, dsn, ""},
		{0o400, dsn, ""},
		{0o640, dsn, file},
		{0o604, dsn, file},
		{0o644, "host=127.0.0.1 port=1 dbname=ops", file},
		{0o644, "postgres://idem:pw@127.0.0.1:1/ops", ""}, // a password in the DSN: no file is read
		{0o644, "postgres://idem@127.0.0.1:1/ops?passfile=" + filepath.Join(dir, "none"), ""},
	} {
		if err := os.Chmod(file, tc.mode); err != nil {
			t.Fatal(err)
		}
		if got := insecurePassfile(tc.dsn); got != tc.want {
			t.Errorf("mode %o, %s: insecurePassfile = %q, want %q", tc.mode, tc.dsn, got, tc.want)
		}
		cfg, ignored, err := parseConfig(tc.dsn, "")
		if err != nil {
			t.Fatal(err)
		}
		if pw := cfg.ConnConfig.Password; ignored != "" && pw != "" {
			t.Errorf("mode %o, %s: the ignored file's password %q is used", tc.mode, tc.dsn, pw)
		}
	}
	t.Setenv("PGPASSWORD", "pw")
	if got := insecurePassfile(dsn); got != "" {
		t.Errorf("with PGPASSWORD: insecurePassfile = %q, want none read", got)
	}
	t.Setenv("PGPASSWORD", "")
	t.Setenv("PGPASSFILE", "")
	if err := os.Rename(file, filepath.Join(dir, ".pgpass")); err != nil {
		t.Fatal(err)
	}
	if got, want := insecurePassfile(dsn), filepath.Join(dir, ".pgpass"); got != want {
		t.Errorf("~/.pgpass at %o: insecurePassfile = %q, want %q", 0o644, got, want)
	}
}

// Through PgBouncer a refused login, a missing database and a start-up
// parameter come as protocol violations (08P01) with the reason in words:
// the hints are those of a direct connection.
func TestPoolerRefusals(t *testing.T) {
	base, err := url.Parse(ledgertest.PgBouncerDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	user := base.User.Username()
	for _, tc := range []struct {
		name, hint string
		edit       func(u *url.URL)
	}{
		{"wrong password", "check the user and password", func(u *url.URL) { u.User = url.UserPassword(user, "Wr0ngPw") }},
		// A fresh name each time: PgBouncer answers a database it failed to
		// log in to moments ago by waiting (server_login_retry).
		{"no such database", "create the database", func(u *url.URL) { u.Path = "/idem_no_such_db_" + strconv.FormatInt(time.Now().UnixNano(), 36) }},
		{"start-up parameter", "remove that parameter", func(u *url.URL) {
			q := u.Query()
			q.Set("search_path", "x")
			u.RawQuery = q.Encode()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := *base
			tc.edit(&u)
			se := openErr(t, u.String(), "Wr0ngPw")
			if !strings.HasPrefix(se.Hint, tc.hint) {
				t.Errorf("error %q, hint %q: want a hint starting %q", se.Err, se.Hint, tc.hint)
			}
		})
	}
}
