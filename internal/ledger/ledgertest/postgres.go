package ledgertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/internal/testenv"
)

// PostgresDSN returns IDEM_TEST_POSTGRES, the DSN of the test database, or
// skips the test saying how to run it (fails it when IDEM_TEST_STRICT=1).
// The role needs CREATE on that database (every test gets a schema of its
// own) and CREATEDB for the tests that make a database of their own.
func PostgresDSN(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv("IDEM_TEST_POSTGRES")
	testenv.Need(t, "PostgreSQL", dsn != "", "IDEM_TEST_POSTGRES is not set "+
		"(set it to postgres://USER:PASSWORD@HOST:PORT/DATABASE of a role with CREATE and CREATEDB; see CONTRIBUTING.md)")
	return dsn
}

// PgBouncerDSN returns IDEM_TEST_PGBOUNCER, the DSN of the test database
// through a PgBouncer in transaction mode (same role as IDEM_TEST_POSTGRES),
// or skips the test (fails it when IDEM_TEST_STRICT=1).
func PgBouncerDSN(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv("IDEM_TEST_PGBOUNCER")
	testenv.Need(t, "PgBouncer", dsn != "", "IDEM_TEST_PGBOUNCER is not set "+
		"(set it to the DSN of IDEM_TEST_POSTGRES's role and database through a PgBouncer in transaction mode; see CONTRIBUTING.md)")
	return dsn
}

// RuntimeDSN returns IDEM_TEST_POSTGRES_RUNTIME, the DSN of a login role
// with no rights of its own on the test database (tests grant it the
// runtime rights), or skips the test (fails it when IDEM_TEST_STRICT=1).
func RuntimeDSN(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv("IDEM_TEST_POSTGRES_RUNTIME")
	testenv.Need(t, "a least-privilege PostgreSQL role", dsn != "", "IDEM_TEST_POSTGRES_RUNTIME is not set "+
		"(set it to the DSN of a LOGIN role without CREATE on IDEM_TEST_POSTGRES's database; see CONTRIBUTING.md)")
	return dsn
}

// NewPostgresDatabase creates an empty database for one test on the
// server of base (IDEM_TEST_POSTGRES, whose role needs CREATEDB) and
// returns its DSN and a connection to it; deferFn registers the drop.
func NewPostgresDatabase(base string, deferFn func(func())) (string, *pgx.Conn, error) {
	ctx := context.Background()
	u, err := url.Parse(base)
	if err != nil {
		return "", nil, fmt.Errorf("IDEM_TEST_POSTGRES: %v", err)
	}
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		return "", nil, fmt.Errorf("connect to IDEM_TEST_POSTGRES: %v", err)
	}
	b := make([]byte, 6)
	rand.Read(b)
	name := "idem_test_" + hex.EncodeToString(b)
	if _, err := admin.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{name}.Sanitize()); err != nil {
		admin.Close(ctx)
		return "", nil, fmt.Errorf("create database %s (the role needs CREATEDB): %v", name, err)
	}
	u.Path = "/" + name
	dsn := u.String()
	db, err := pgx.Connect(ctx, dsn)
	if err != nil {
		admin.Close(ctx)
		return "", nil, err
	}
	deferFn(func() {
		db.Close(ctx)
		admin.Exec(ctx, `DROP DATABASE IF EXISTS `+pgx.Identifier{name}.Sanitize()+` WITH (FORCE)`)
		admin.Close(ctx)
	})
	return dsn, db, nil
}
