package postgres_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/internal/ledger"
	"github.com/idemhq/idem/internal/ledger/ledgertest"
	"github.com/idemhq/idem/internal/ledger/postgres"
	"github.com/idemhq/idem/internal/testenv"
)

// adminConn connects to the test database outside any ledger.
func adminConn(t testing.TB) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, ledgertest.PostgresDSN(t))
	if err != nil {
		t.Fatalf("connect to IDEM_TEST_POSTGRES: %v", err)
	}
	t.Cleanup(func() { c.Close(ctx) })
	return c
}

// freshSchema returns the name of a schema no test has used; it is dropped
// when t ends.
func freshSchema(t testing.TB) string {
	t.Helper()
	b := make([]byte, 6)
	rand.Read(b)
	name := "idem_test_" + hex.EncodeToString(b)
	admin := adminConn(t)
	t.Cleanup(func() {
		if _, err := admin.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+pgx.Identifier{name}.Sanitize()+` CASCADE`); err != nil {
			t.Errorf("drop schema %s: %v", name, err)
		}
	})
	return name
}

func openLedger(t testing.TB, dsn, schema string) *postgres.Ledger {
	t.Helper()
	l, err := postgres.OpenSchema(context.Background(), dsn, schema)
	if err != nil {
		t.Fatalf("open PostgreSQL ledger in schema %s: %v", schema, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func opener(t *testing.T, now func() time.Time) ledger.Ledger {
	l := openLedger(t, ledgertest.PostgresDSN(t), freshSchema(t))
	l.Now = now
	return l
}

func TestPostgresConformance(t *testing.T) {
	ledgertest.PostgresDSN(t)
	ledgertest.Run(t, opener)
}

func TestPostgresQueryConformance(t *testing.T) {
	ledgertest.PostgresDSN(t)
	ledgertest.RunQuery(t, opener)
}

// Hosts that start at once create the schema exactly once.
func TestPostgresSchemaCreatedOnceConcurrently(t *testing.T) {
	dsn, schema := ledgertest.PostgresDSN(t), freshSchema(t)
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := postgres.OpenSchema(context.Background(), dsn, schema)
			if err == nil {
				_, err = l.Reserve(context.Background(), ledger.ReserveRequest{Key: fmt.Sprintf("evt:open:%d", i),
					Fingerprint: "fp", Command: []string{"true"}, MaxAttempts: 1, Lease: time.Minute})
				l.Close()
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("opener %d: %v", i, err)
		}
	}
	var versions, records int
	admin := adminConn(t)
	q := `SELECT (SELECT count(*) FROM %[1]s.meta), (SELECT count(*) FROM %[1]s.records)`
	if err := admin.QueryRow(context.Background(), fmt.Sprintf(q, pgx.Identifier{schema}.Sanitize())).Scan(&versions, &records); err != nil {
		t.Fatal(err)
	}
	if versions != 1 || records != n {
		t.Errorf("meta rows %d, records %d; want 1 and %d", versions, records, n)
	}
}

func TestPostgresRefusesNewerSchema(t *testing.T) {
	dsn, schema := ledgertest.PostgresDSN(t), freshSchema(t)
	openLedger(t, dsn, schema).Close()
	admin := adminConn(t)
	meta := pgx.Identifier{schema, "meta"}.Sanitize()
	if _, err := admin.Exec(context.Background(), `ALTER TABLE `+meta+` ADD COLUMN IF NOT EXISTS compat integer;
		UPDATE `+meta+` SET version = 99, compat = 99`); err != nil {
		t.Fatal(err)
	}
	_, err := postgres.OpenSchema(context.Background(), dsn, schema)
	var se *ledger.StoreError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), fmt.Sprintf("newer idem (schema v99; this idem knows v%d)", postgres.SchemaVersion)) ||
		!strings.Contains(se.Hint, "upgrade idem") {
		t.Fatalf("open of a v99 ledger: %v (hint %q); want a StoreError naming the newer version", err, hintOf(err))
	}
	var version int
	if err := admin.QueryRow(context.Background(), `SELECT version FROM `+pgx.Identifier{schema, "meta"}.Sanitize()).Scan(&version); err != nil || version != 99 {
		t.Errorf("after the refusal: version %d, %v; want 99 untouched", version, err)
	}
}

func TestPostgresRefusesForeignSchema(t *testing.T) {
	dsn, schema := ledgertest.PostgresDSN(t), freshSchema(t)
	admin := adminConn(t)
	s := pgx.Identifier{schema}.Sanitize()
	if _, err := admin.Exec(context.Background(), `CREATE SCHEMA `+s+`; CREATE TABLE `+s+`.invoices (id int)`); err != nil {
		t.Fatal(err)
	}
	_, err := postgres.OpenSchema(context.Background(), dsn, schema)
	if err == nil || !strings.Contains(err.Error(), "not an idem ledger") {
		t.Fatalf("open of a schema holding other tables: %v; want a refusal", err)
	}
	var tables int
	if err := admin.QueryRow(context.Background(), `SELECT count(*) FROM pg_tables WHERE schemaname = $1`, schema).Scan(&tables); err != nil || tables != 1 {
		t.Errorf("the foreign schema now has %d tables (%v); want it untouched", tables, err)
	}
}

func hintOf(err error) string {
	var se *ledger.StoreError
	if errors.As(err, &se) {
		return se.Hint
	}
	return ""
}

// A server that cannot be reached is a StoreError naming the host, and
// never the password, whichever way the password came. Runs without a
// server: nothing listens on the port it picks.
func TestPostgresUnreachable(t *testing.T) {
	t.Parallel() // each DSN waits out the connect budget (30s)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // now nothing listens there
	const secret = "s3cret-Pa55"
	for _, dsn := range []string{
		"postgres://idem:" + secret + "@" + addr + "/ledger?sslmode=disable",
		"postgresql://idem@" + addr + "/ledger?sslmode=disable&password=" + secret,
	} {
		t.Run(strings.SplitN(dsn, ":", 2)[0], func(t *testing.T) {
			t.Parallel()
			l, err := postgres.Open(context.Background(), dsn)
			if err == nil {
				l.Close()
				t.Fatalf("open %s succeeded with nothing listening", addr)
			}
			var se *ledger.StoreError
			if !errors.As(err, &se) {
				t.Fatalf("error %T %v, want *StoreError", err, err)
			}
			msg := err.Error() + " " + se.Hint
			if !strings.Contains(msg, addr) || strings.Contains(msg, secret) || !strings.Contains(msg, "connection refused") {
				t.Errorf("message %q: want the address %s and the cause, without the password", msg, addr)
			}
		})
	}
}

func TestPostgresBadDSN(t *testing.T) {
	const secret = "s3cret-Pa55"
	_, err := postgres.Open(context.Background(), "postgres://idem:"+secret+"@db.invalid:port/ledger")
	var se *ledger.StoreError
	if !errors.As(err, &se) || strings.Contains(err.Error(), secret) || !strings.Contains(err.Error(), "invalid PostgreSQL DSN") {
		t.Fatalf("open with a bad port: %v; want an invalid-DSN StoreError without the password", err)
	}
}

func TestPostgresWrongPassword(t *testing.T) {
	u, err := url.Parse(ledgertest.PostgresDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	const secret = "wrong-Pa55word"
	u.User = url.UserPassword(u.User.Username(), secret)
	_, err = postgres.Open(context.Background(), u.String())
	var se *ledger.StoreError
	if !errors.As(err, &se) || strings.Contains(err.Error()+se.Hint, secret) ||
		!strings.Contains(err.Error(), u.Host) || !strings.Contains(se.Hint, "password") {
		t.Fatalf("open with a wrong password: %v (hint %q); want the host, a password hint, and no password", err, hintOf(err))
	}
}

// The password may come from PGPASSWORD or a password file, as with libpq;
// Describe never shows it.
func TestPostgresPasswordSources(t *testing.T) {
	u, err := url.Parse(ledgertest.PostgresDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	password, ok := u.User.Password()
	testenv.Need(t, "a password in IDEM_TEST_POSTGRES", ok, "the test moves it to PGPASSWORD and a password file")
	schema := freshSchema(t)
	bare := *u
	bare.User = url.User(u.User.Username())
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = "5432"
	}
	passfile := filepath.Join(t.TempDir(), "pgpass")
	line := fmt.Sprintf("%s:%s:%s:%s:%s\n", host, port, strings.TrimPrefix(u.Path, "/"), u.User.Username(), password)
	if err := os.WriteFile(passfile, []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, src := range []struct {
		name string
		env  map[string]string
	}{
		{"PGPASSWORD", map[string]string{"PGPASSWORD": password, "PGPASSFILE": filepath.Join(t.TempDir(), "none")}},
		{"PGPASSFILE", map[string]string{"PGPASSWORD": "", "PGPASSFILE": passfile}},
	} {
		t.Run(src.name, func(t *testing.T) {
			for k, v := range src.env {
				t.Setenv(k, v)
			}
			if src.env["PGPASSWORD"] == "" {
				os.Unsetenv("PGPASSWORD")
			}
			l := openLedger(t, bare.String(), schema)
			if d := l.Describe(); strings.Contains(d, ":"+password+"@") || !strings.Contains(d, host) {
				t.Errorf("Describe() = %q", d)
			}
		})
	}
	// And from the DSN itself, never shown.
	l := openLedger(t, u.String(), schema)
	if d := l.Describe(); strings.Contains(d, ":"+password+"@") || !strings.Contains(d, "//"+u.User.Username()+"@"+u.Host) {
		t.Errorf("Describe() = %q, want the DSN without its password", d)
	}
}

// Without an injected clock, leases, outcomes and TTLs come from the
// server's clock, not this host's.
func TestPostgresServerClock(t *testing.T) {
	l := openLedger(t, ledgertest.PostgresDSN(t), freshSchema(t))
	admin := adminConn(t)
	serverNow := func() time.Time {
		var now time.Time
		if err := admin.QueryRow(context.Background(), `SELECT clock_timestamp()`).Scan(&now); err != nil {
			t.Fatal(err)
		}
		return now
	}
	ctx := context.Background()
	before := serverNow()
	res, err := l.Reserve(ctx, ledger.ReserveRequest{Key: "evt:server-clock", Fingerprint: "fp", Command: []string{"true"},
		MaxAttempts: 1, Owner: ledger.Owner{Host: "h", PID: 1}, Lease: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Finish(ctx, ledger.FinishRequest{Key: "evt:server-clock", Token: res.Token, AttemptID: res.AttemptID,
		Status: ledger.StatusSucceeded, ExitSource: "child", Class: ledger.ClassSuccess, TTL: 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	after := serverNow()
	rec, err := l.Get(ctx, "evt:server-clock")
	if err != nil {
		t.Fatal(err)
	}
	within := func(what string, got, lo, hi time.Time) {
		if got.Before(lo) || got.After(hi) {
			t.Errorf("%s = %v, want within the server's [%v, %v]", what, got, lo, hi)
		}
	}
	within("Created", rec.Created, before, after)
	within("Finished", rec.Finished, rec.Created, after)
	within("Expires", rec.Expires, rec.Finished.Add(24*time.Hour), rec.Finished.Add(24*time.Hour))
}

// Separate connections (as separate hosts have) race for one key:
// exactly one wins, the rest see it busy. (32 processes race in the root
// package's fleet test; 16 here keep both within max_connections when
// go test runs the packages at once.)
func TestPostgresConcurrentLedgersOneWinner(t *testing.T) {
	dsn, schema := ledgertest.PostgresDSN(t), freshSchema(t)
	openLedger(t, dsn, schema)
	const n = 16
	ledgers := make([]*postgres.Ledger, n)
	for i := range ledgers {
		ledgers[i] = openLedger(t, dsn, schema)
	}
	var (
		wg       sync.WaitGroup
		start    = make(chan struct{})
		outcomes = make([]ledger.Outcome, n)
		errs     = make([]error, n)
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			res, err := ledgers[i].Reserve(context.Background(), ledger.ReserveRequest{Key: "evt:race", Fingerprint: "fp",
				Command: []string{"deploy"}, MaxAttempts: 3, Lease: time.Minute,
				Owner: ledger.Owner{Host: fmt.Sprintf("host-%02d", i), BootID: fmt.Sprintf("boot-%02d", i), PID: 100 + i}})
			errs[i] = err
			if err == nil {
				outcomes[i] = res.Outcome
			}
		}()
	}
	close(start)
	wg.Wait()
	won := 0
	for i := range n {
		switch {
		case errs[i] != nil:
			t.Errorf("ledger %d: %v", i, errs[i])
		case outcomes[i] == ledger.Reserved:
			won++
		case outcomes[i] != ledger.Busy:
			t.Errorf("ledger %d: outcome %d, want Reserved or Busy", i, outcomes[i])
		}
	}
	if won != 1 {
		t.Errorf("%d of %d reservations won, want exactly 1", won, n)
	}
}

// A role or DSN with other output formats (DateStyle, bytea_output, a time
// zone) reads and writes the ledger the same: idem pins the formats its
// text results depend on.
func TestPostgresSessionFormats(t *testing.T) {
	u, err := url.Parse(ledgertest.PostgresDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("options", "-c DateStyle=SQL,DMY -c bytea_output=escape -c TimeZone=Asia/Kolkata")
	q.Set("DateStyle", "German") // and a run-time parameter in another case
	q.Set("TimeZone", "America/St_Johns")
	u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20") // pgx reads + as itself
	schema := freshSchema(t)
	l := openLedger(t, u.String(), schema)
	ctx := context.Background()
	out := []byte{0, 1, 2, '\\', 'x', 0xfe, 0xff, '\n'}
	req := ledger.ReserveRequest{Key: "evt:formats", Fingerprint: "fp", Command: []string{"x"}, MaxAttempts: 1,
		Owner: ledger.Owner{Host: "h", PID: 1}, Lease: time.Minute}
	res, err := l.Reserve(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Finish(ctx, ledger.FinishRequest{Key: "evt:formats", Token: res.Token, AttemptID: res.AttemptID,
		Status: ledger.StatusSucceeded, ExitSource: "child", Class: ledger.ClassSuccess, OutputStored: true,
		Stdout: out, TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	rep, err := l.Reserve(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Outcome != ledger.Replay || !bytes.Equal(rep.Record.Stdout, out) ||
		!rep.Record.Expires.Equal(rep.Record.Finished.Add(time.Hour)) || rep.Record.Finished.Before(rep.Record.Created) {
		t.Fatalf("replay under other session formats: %+v", rep.Record)
	}
	// The same record through a connection with the server's formats.
	plain := openLedger(t, ledgertest.PostgresDSN(t), schema)
	rec, err := plain.Get(ctx, "evt:formats")
	if err != nil || !rec.Finished.Equal(rep.Record.Finished) || !bytes.Equal(rec.Stdout, out) {
		t.Fatalf("Get: %+v, %v", rec, err)
	}
}

func TestRedactDSN(t *testing.T) {
	for _, tc := range []struct{ dsn, want string }{
		{"postgres://idem:S3cret@db.example:5432/ops", "postgres://idem@db.example:5432/ops"},
		{"postgresql://idem:S3cret@db.example/ops?sslmode=verify-full", "postgresql://idem@db.example/ops?sslmode=verify-full"},
		{"postgres://idem@db.example/ops?password=S3cret&sslpassword=S3cret&application_name=x",
			"postgres://idem@db.example/ops?application_name=x"},
		{"postgres://idem:S3cret@h1:5432,h2:5433/ops", "postgres://idem@h1:5432,h2:5433/ops"},
		{"postgres:///ops", "postgres:///ops"},
		// The rest of a URL is kept as written, even where pgx will refuse it.
		{"postgres://idem:S3cret@[::1/ops", "postgres://idem@[::1/ops"},
		{"postgres://idem:S3c@ret@db.example/ops", "postgres://(unparsable)"},
		{"host=db.example dbname=ops password='S3cret x'", "host=db.example dbname=ops"},
	} {
		if got := postgres.RedactDSN(tc.dsn); got != tc.want || strings.Contains(got, "S3cret") {
			t.Errorf("RedactDSN(%q) = %q, want %q", tc.dsn, got, tc.want)
		}
	}
}
