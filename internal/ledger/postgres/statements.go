package postgres

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
)

// statements holds a ledger's SQL with its schema's name in place. The SQL
// in this package names every table, sequence and regclass as
// {schema}.name and never relies on search_path: a pooler in transaction
// mode keeps no session state, and a role's or database's search_path
// must not split a fleet into hosts that see the ledger and hosts that
// see public. Each statement is rewritten once per Ledger, on first use.
type statements struct {
	r    *strings.Replacer
	done sync.Map // template -> statement
}

func newStatements(schema string) *statements {
	return &statements{r: strings.NewReplacer("{schema}", pgx.Identifier{schema}.Sanitize())}
}

// q returns the statement of template sql for this ledger's schema.
func (p *Ledger) q(sql string) string {
	if s, ok := p.sql.done.Load(sql); ok {
		return s.(string)
	}
	s := p.sql.r.Replace(sql)
	p.sql.done.Store(sql, s)
	return s
}

// RuntimeGrants is what a runtime role needs on a ledger whose schema
// another role (its owner) made: everything idem does but create or
// migrate the schema and purge --vacuum (which needs the owner). records
// and attempts take every write; totals and last_success are only added
// to; meta is only read; the token sequence needs USAGE for nextval. The
// identity columns' own sequences need nothing: PostgreSQL checks no right
// on them.
func RuntimeGrants(schema, role string) []string {
	s, r := pgx.Identifier{schema}.Sanitize(), pgx.Identifier{role}.Sanitize()
	return []string{
		`GRANT USAGE ON SCHEMA ` + s + ` TO ` + r,
		`GRANT SELECT ON ` + s + `.meta TO ` + r,
		`GRANT SELECT, INSERT, UPDATE, DELETE ON ` + s + `.records, ` + s + `.attempts TO ` + r,
		`GRANT SELECT, INSERT, UPDATE ON ` + s + `.totals, ` + s + `.last_success TO ` + r,
		`GRANT USAGE ON SEQUENCE ` + s + `.tokens TO ` + r,
	}
}

// SchemaSQL is the SQL that creates the ledger's schema at this idem's
// version, as idem run creates it (the same migrations, versions and
// lock), then grants each of roles RuntimeGrants: for a DBA who reviews
// the DDL or applies it with psql as the role that is to own the ledger.
func SchemaSQL(schema string, roles []string) string {
	var b strings.Builder
	s := pgx.Identifier{schema}.Sanitize()
	last := migrations[len(migrations)-1]
	fmt.Fprintf(&b, "-- The idem ledger in schema %s: schema v%d (compatible from v%d), for PostgreSQL.\n", s, last.Version, last.Compat)
	b.WriteString("-- Apply it once, as the role that is to own the ledger: psql -v ON_ERROR_STOP=1 -f FILE\n")
	b.WriteString("-- (an existing ledger is migrated by 'idem schema --apply' instead).\n")
	b.WriteString("BEGIN;\n")
	fmt.Fprintf(&b, "DO $$ BEGIN PERFORM pg_catalog.pg_advisory_xact_lock(%d); END $$;\n", migrateLock)
	fmt.Fprintf(&b, "CREATE SCHEMA %s;\n", s)
	fmt.Fprintf(&b, "SET LOCAL search_path TO %s;\n", s)
	for _, m := range migrations {
		fmt.Fprintf(&b, "\n-- Migration %d\n%s\n", m.Version, strings.TrimSpace(m.SQL))
	}
	fmt.Fprintf(&b, "\nINSERT INTO %s.meta (version) VALUES (%d);\n", s, last.Version)
	fmt.Fprintf(&b, "ALTER TABLE %s.meta ADD COLUMN home text, ADD COLUMN home_tokens text;\n", s)
	fmt.Fprintf(&b, "UPDATE %s.meta SET home = %s, home_tokens = %s;\n", s, strings.Join(strings.Fields(homeSQL), " "),
		strings.ReplaceAll(homeTokensSQL, "{schema}", s))
	if last.Compat != last.Version {
		fmt.Fprintf(&b, "ALTER TABLE %s.meta ADD COLUMN compat integer;\n", s)
		fmt.Fprintf(&b, "UPDATE %s.meta SET compat = %d;\n", s, last.Compat)
	}
	for _, r := range roles {
		fmt.Fprintf(&b, "\n-- What the runtime role %s needs.\n", pgx.Identifier{r}.Sanitize())
		for _, g := range RuntimeGrants(schema, r) {
			b.WriteString(g + ";\n")
		}
	}
	b.WriteString("COMMIT;\n")
	return b.String()
}

// Applied says what Apply did.
type Applied struct {
	Schema        string
	Before, After int // schema versions; Before 0: created
	// Rehomed: the ledger had been restored from a backup (into another
	// database, or over itself), and its fencing tokens were moved past
	// any handed out since.
	Rehomed bool
}

// Apply creates or migrates the ledger's schema in schema (Schema when
// empty) as the connecting role, as a run does, records this database as
// the ledger's home (moving its tokens past a restored backup's), then
// grants each of roles RuntimeGrants. Errors are *ledger.StoreError.
func Apply(ctx context.Context, dsn, schema string, roles []string) (*Applied, error) {
	l, err := OpenWith(ctx, dsn, Options{Schema: schema, Beside: true, Rehome: true})
	if err != nil {
		return nil, err
	}
	defer l.Close()
	moved, err := l.moveHome(ctx)
	if err != nil {
		return nil, err
	}
	a := &Applied{Schema: l.schema, Before: l.before, After: len(migrations), Rehomed: moved}
	if len(roles) == 0 {
		return a, nil
	}
	err = pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
		if err := pin(ctx, tx); err != nil {
			return err
		}
		for _, r := range roles {
			for _, g := range RuntimeGrants(l.schema, r) {
				if _, err := tx.Exec(ctx, g); err != nil {
					return fmt.Errorf("grant to %s: %w", r, err)
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, l.wrap("grant", err)
	}
	return a, nil
}
