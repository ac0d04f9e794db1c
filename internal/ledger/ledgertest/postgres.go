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
		"(set it to postgres://USER:PASSWORD@HOST:PORT/DATABASE of a role with CREATE and CREATEDB; see README)")
	return dsn
}
