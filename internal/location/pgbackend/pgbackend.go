// Package pgbackend is the location.Backend of PostgreSQL ledgers: a
// database shared by a fleet of hosts, named by a DSN (postgres://... or
// libpq's keyword/value form).
package pgbackend

import (
	"context"
	"path/filepath"

	"github.com/idemhq/idem/internal/ledger"
	"github.com/idemhq/idem/internal/ledger/postgres"
	"github.com/idemhq/idem/internal/location"
)

// Backend is a PostgreSQL database.
type Backend struct{}

var (
	_ location.Backend = Backend{}
	_ location.Schemer = Backend{}
)

func (Backend) Claims(s string) bool { return postgres.IsDSN(s) }

// Check refuses a connection string idem cannot use: libpq would take it
// for one, so it never names a file.
func (Backend) Check(dsn string) error {
	if err := postgres.CheckDSN(dsn); err != nil {
		return location.Usagef("write the ledger as host=HOST port=PORT dbname=DATABASE user=USER (libpq's keywords) or postgres://USER@HOST:PORT/DATABASE; a file whose name starts with WORD= as ./WORD=...", "%v", err)
	}
	return nil
}

// Open opens the ledger in the schema IDEM_LEDGER_SCHEMA names.
func (Backend) Open(ctx context.Context, dsn string, o location.Options) (ledger.Ledger, error) {
	schema, err := Backend{}.SchemaName(o.Getenv)
	if err != nil {
		return nil, err
	}
	l, err := postgres.OpenWith(ctx, dsn, postgres.Options{Options: o.Options, Schema: schema})
	if err != nil {
		return nil, err
	}
	for _, w := range l.Warnings() {
		o.Warn(w)
	}
	return l, nil
}

func (Backend) Describe(dsn string) string { return postgres.Redact(dsn) }

func (Backend) WithoutPassword(dsn string) (string, bool, bool) {
	return postgres.WithoutPassword(dsn)
}

func (Backend) AuthFailed(err error) bool { return postgres.AuthFailed(err) }

func (Backend) Shared() bool { return true }

// RunLockPath is in this host's state directory, named by the ledger's
// identity: the lock covers this host only.
func (Backend) RunLockPath(l ledger.Ledger, stateDir func() string) string {
	id := ledger.Identity(l)
	if id == "" {
		return ""
	}
	dir := stateDir()
	if dir == "" {
		return ""
	}
	return filepath.Join(dir, "runs-"+id+".lock")
}

// CheckBackup refuses: the database's own tools back it up.
func (Backend) CheckBackup() error {
	return location.Usagef("back up a PostgreSQL ledger with the database's own tools: pg_dump --schema of its schema (idem, or what IDEM_LEDGER_SCHEMA names), or the server's backups",
		"idem backup copies a SQLite ledger; this ledger is a PostgreSQL database")
}

// SchemaSQL is the DDL of the ledger's schema, with the grants of roles
// ('idem schema').
func (Backend) SchemaSQL(schema string, roles []string) string {
	return postgres.SchemaSQL(schema, roles)
}

// ApplySchema creates or migrates the ledger's schema at dsn and grants
// roles the runtime rights ('idem schema --apply').
func (Backend) ApplySchema(ctx context.Context, dsn, schema string, roles []string) (*location.Applied, error) {
	res, err := postgres.Apply(ctx, dsn, schema, roles)
	if err != nil {
		return nil, err
	}
	return &location.Applied{Schema: res.Schema, Before: res.Before, After: res.After, Rehomed: res.Rehomed}, nil
}

// schemaVar names the PostgreSQL schema of the ledger, for a DBA who
// keeps more than one ledger in a database (a staging fleet beside
// production) or has a naming rule. It is not a DSN parameter: pgx sends
// those it does not know to the server as start-up parameters, which
// poolers refuse.
const schemaVar = "IDEM_LEDGER_SCHEMA"

// SchemaName is the PostgreSQL schema the ledger is in: IDEM_LEDGER_SCHEMA,
// else postgres.Schema.
func (Backend) SchemaName(getenv func(string) string) (string, error) {
	s := getenv(schemaVar)
	if s == "" {
		return postgres.Schema, nil
	}
	if err := postgres.CheckSchemaName(s); err != nil {
		return "", location.Usagef("name a schema with lower-case letters, digits and _, not starting with a digit or pg_",
			"%s: %w", schemaVar, err)
	}
	return s, nil
}
