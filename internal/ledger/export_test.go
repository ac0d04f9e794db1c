package ledger

// OpenPostgresSchema opens a PostgreSQL ledger in a schema of the test's
// choosing, so that each test gets a fresh, empty ledger.
var OpenPostgresSchema = openPostgres

// RedactDSN is what Describe shows of a DSN.
var RedactDSN = redactDSN
