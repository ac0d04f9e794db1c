package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/internal/ledger"
)

// OpenSchema opens a PostgreSQL ledger in a schema of the test's choosing,
// so that each test gets a fresh, empty ledger, beside the other tests'.
func OpenSchema(ctx context.Context, dsn, schema string) (*Ledger, error) {
	return open(ctx, dsn, schema, Options{Beside: true}, migrations)
}

// OpenSchemaWith is OpenSchema with options and a list of migrations of
// the test's choosing.
func OpenSchemaWith(ctx context.Context, dsn, schema string, opts ledger.Options, ms []ledger.Migration) (*Ledger, error) {
	return open(ctx, dsn, schema, Options{Options: opts, Beside: true}, ms)
}

// Migrations returns a copy of this idem's migrations.
func Migrations() []ledger.Migration { return append([]ledger.Migration(nil), migrations...) }

// RedactDSN is what Describe shows of a DSN.
var RedactDSN = redactDSN

// PageQuery is the statement of one page of Each in schema.
func PageQuery(schema string, f ledger.ListFilter, after *ledger.Cursor, n int) (string, pgx.NamedArgs, error) {
	q, args, err := pageQuery(f, after, n)
	return newStatements(schema).r.Replace(q), args, err
}

// PurgePageSQL is the statement of one page of purge candidates in schema.
func PurgePageSQL(schema string) string { return newStatements(schema).r.Replace(purgePageSQL) }
