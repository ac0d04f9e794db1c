package ledgertest

import (
	"os"
	"testing"

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
