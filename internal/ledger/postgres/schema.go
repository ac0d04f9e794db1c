package postgres

import (
	"context"
	_ "embed" // schema.sql
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemhq/idem/internal/ledger"
)

//go:embed schema.sql
var schemaV1 string

//go:embed schema_v2.sql
var schemaV2 string

//go:embed schema_v3.sql
var schemaV3 string

// SchemaVersion is the schema version this idem writes: the number of its
// migrations.
const SchemaVersion = 3

// migrations are the schema's changes in merge order (see the ledger
// package doc). Table meta holds where a ledger stands: version, and
// compat once a migration makes the two differ (a ledger without the
// column has compat = version).
var migrations = []ledger.Migration{
	{Version: 1, Compat: 1, SQL: schemaV1},
	{Version: 2, Compat: 1, SQL: schemaV2},
	{Version: 3, Compat: 1, SQL: schemaV3},
}

// versionsSQL reads a ledger's schema versions from table meta, whose
// compat column exists only once a migration parted the two.
const versionsSQL = `SELECT version, coalesce((to_jsonb(m)->>'compat')::integer, 0) FROM {schema}.meta m`

// checkSchema reads the schema versions; a missing schema is created and
// an older one migrated (unless opts.ReadOnly; a missing one is not
// created with opts.Existing), and one that needs a newer idem refused
// before anything is written. A ledger at this idem's version takes one
// SELECT on meta: a runtime role needs no right to change the schema.
func (p *Ledger) checkSchema(ctx context.Context, migrations []ledger.Migration, opts ledger.Options) error {
	var stored ledger.SchemaVersions
	var created int64
	var recorded, found home
	var clock serverClock
	readIdentity := func() error {
		return clock.read(func() pgx.Row { return p.db.QueryRow(ctx, p.q(identitySQL)) }, &stored.Write, &stored.Compat, &created,
			&recorded.place, &recorded.tokens, &found.place, &found.tokens)
	}
	err := readIdentity()
	switch {
	case sqlState(err) == "42P01", sqlState(err) == "3F000": // undefined table or schema
		stored = ledger.SchemaVersions{}
	case err != nil:
		return p.wrap("open", err)
	}
	p.before = stored.Write
	pending, err := ledger.PlanSchema(stored, migrations, opts.ReadOnly)
	if err == nil && stored.Write == 0 && opts.Existing {
		err = ledger.ErrNoLedger
	}
	if errors.Is(err, ledger.ErrNoLedger) {
		// Not "no ledger yet" where the database holds one in another
		// schema: the host forgot the fleet's IDEM_LEDGER_SCHEMA, and an
		// empty listing, or metrics of zeros, would hide the fleet's.
		if others, oerr := otherLedgers(ctx, p.db, p.schema); oerr == nil && len(others) > 0 {
			return p.besideErr(others, "")
		}
	}
	if err != nil {
		return p.schemaErr(err)
	}
	if len(pending) > 0 {
		if err := p.migrate(ctx, migrations); err != nil {
			if sqlState(err) == "42501" {
				return p.privilegeErr(ctx, stored.Write, len(migrations), err)
			}
			return err
		}
		if err := readIdentity(); err != nil {
			return p.wrap("open", err)
		}
	}
	p.id, p.clockOffset = ledger.MakeIdentity("postgres", uint64(created)), clock.offset
	return p.checkHome(recorded, found)
}

// identitySQL is versionsSQL with the ledger's creation time, from which
// its identity is derived, its home as recorded and as found, and the
// server's clock (one round trip at open, as before).
const identitySQL = `SELECT version, coalesce((to_jsonb(m)->>'compat')::integer, 0),
	(extract(epoch FROM created) * 1000000)::bigint, ` + homeColumnsSQL + `, ` + homeSQL + `, ` + homeTokensSQL + `,
	(extract(epoch FROM pg_catalog.clock_timestamp()) * 1000000)::bigint FROM {schema}.meta m`

// schemaErr puts ledger.PlanSchema's errors in a *StoreError.
func (p *Ledger) schemaErr(err error) error {
	return ledger.PlanError(err, p.desc,
		fmt.Sprintf("check --ledger, IDEM_LEDGER and IDEM_LEDGER_SCHEMA; the ledger's owner creates schema %q with 'idem schema --apply' (a run does, as a role that may)", p.schema),
		"upgrade idem on this host, or point --ledger at another database")
}

// privilegeErr says that the ledger's schema needs creating or migrating
// and this role may not: a runtime role with the documented grants, whose
// schema its owner applies.
func (p *Ledger) privilegeErr(ctx context.Context, stored, known int, err error) error {
	var pe *pgconn.PgError
	why := ""
	if errors.As(err, &pe) {
		why = ": " + pe.Message
	}
	se := &ledger.StoreError{Op: "open", Path: p.desc,
		Hint: "have the ledger's owner run 'idem schema --apply --grant ROLE' with this idem's version (or print the SQL with 'idem schema')"}
	if stored == 0 {
		se.Err = fmt.Errorf("schema %q has no ledger, and this role may not create one%s", p.schema, why)
		if others, err := otherLedgers(ctx, p.db, p.schema); err == nil && len(others) > 0 {
			se.Hint = besideHint(others)
		}
	} else {
		se.Err = fmt.Errorf("the ledger in schema %q is at v%d, this idem needs v%d, and this role may not migrate it%s", p.schema, stored, known, why)
	}
	return se
}

// otherLedgers names the schemas of the database, other than schema,
// that hold an idem ledger (from the catalog, which every role may read):
// a schema idem may use (not pg_temp_N, which any role can fill with
// tables of those names) whose meta, records and attempts tables are
// there, meta with idem's version column (an application's own tables of
// those names are no ledger).
func otherLedgers(ctx context.Context, q queryer, schema string) ([]string, error) {
	rows, err := q.Query(ctx, `SELECT n.nspname FROM pg_catalog.pg_namespace n WHERE n.nspname <> $1
		AND n.nspname !~ '^pg_' AND n.nspname <> 'information_schema'
		AND (SELECT count(*) FROM pg_catalog.pg_class c WHERE c.relnamespace = n.oid AND c.relkind IN ('r', 'p')
			AND c.relname IN ('meta', 'records', 'attempts')) = 3
		AND EXISTS (SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid
			WHERE c.relnamespace = n.oid AND c.relname = 'meta' AND a.attname = 'version' AND NOT a.attisdropped)
		ORDER BY 1`, schema)
	if err != nil {
		return nil, err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(names, func(n string) bool { return CheckSchemaName(n) != nil }), nil
}

// queryer is a pool or a transaction.
type queryer interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// besideHint points a host at the ledger that is there already, or the
// ones.
func besideHint(others []string) string {
	if len(others) > 1 {
		return fmt.Sprintf("this database's ledgers are in schemas %s: set IDEM_LEDGER_SCHEMA to the one its other hosts use (a new ledger is made only on purpose, with 'idem schema --apply')",
			strings.Join(others, ", "))
	}
	return fmt.Sprintf("this database's ledger is in schema %q: set IDEM_LEDGER_SCHEMA=%s as its other hosts do (a second ledger is made only on purpose, with 'idem schema --apply')",
		others[0], others[0])
}

// refuseBeside refuses to create a ledger in a database that holds one in
// another schema unless asked to (ledger.Options.Beside).
func (p *Ledger) refuseBeside(ctx context.Context, tx pgx.Tx) error {
	others, err := otherLedgers(ctx, tx, p.schema)
	if err != nil || len(others) == 0 {
		return err
	}
	return p.besideErr(others, ": idem creates no second ledger beside it unasked")
}

// besideErr says that p's schema has no ledger while the database holds
// others (see otherLedgers), and why that is refused.
func (p *Ledger) besideErr(others []string, why string) error {
	return &ledger.StoreError{Op: "open", Path: p.desc,
		Err:  fmt.Errorf("schema %q has no ledger, and this database holds one in schema %q%s", p.schema, others[0], why),
		Hint: besideHint(others)}
}

// migrate creates or upgrades the schema in one transaction under an
// advisory lock: hosts that start at once wait for the first, then find the
// schema in place. The migrations name their tables without the schema:
// search_path is set for this transaction only (SET LOCAL), which a
// pooler in transaction mode keeps.
func (p *Ledger) migrate(ctx context.Context, migrations []ledger.Migration) error {
	ident := pgx.Identifier{p.schema}.Sanitize()
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if err := pin(ctx, tx); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT pg_catalog.pg_advisory_xact_lock($1)`, migrateLock); err != nil {
			return err
		}
		var hasSchema, hasMeta bool
		if err := tx.QueryRow(ctx, `SELECT to_regnamespace($1) IS NOT NULL, to_regclass($2) IS NOT NULL`,
			ident, pgx.Identifier{p.schema, "meta"}.Sanitize()).Scan(&hasSchema, &hasMeta); err != nil {
			return err
		}
		var stored ledger.SchemaVersions
		if hasMeta {
			if err := tx.QueryRow(ctx, p.q(versionsSQL)).Scan(&stored.Write, &stored.Compat); err != nil {
				return err
			}
		}
		pending, err := ledger.PlanSchema(stored, migrations, false)
		if err != nil {
			return p.schemaErr(err)
		}
		if len(pending) == 0 {
			return nil // another host got here first
		}
		if stored.Write == 0 && !p.beside {
			if err := p.refuseBeside(ctx, tx); err != nil {
				return err
			}
		}
		if stored.Write == 0 {
			if err := p.createSchema(ctx, tx, hasSchema); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `SELECT pg_catalog.set_config('search_path', $1, true)`, ident); err != nil {
			return err
		}
		for _, m := range pending {
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return fmt.Errorf("schema v%d: %w", m.Version, err)
			}
		}
		return p.writeVersions(ctx, tx, stored.After(pending), stored.Write == 0)
	})
	var se *ledger.StoreError
	if errors.As(err, &se) || sqlState(err) == "42501" {
		return err
	}
	return p.wrap("create schema", err)
}

// createSchema makes the ledger's schema, or checks that the schema of
// that name is empty.
func (p *Ledger) createSchema(ctx context.Context, tx pgx.Tx, exists bool) error {
	if !exists {
		_, err := tx.Exec(ctx, `CREATE SCHEMA `+pgx.Identifier{p.schema}.Sanitize())
		return err
	}
	var objects int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relnamespace = to_regnamespace($1)`,
		pgx.Identifier{p.schema}.Sanitize()).Scan(&objects); err != nil {
		return err
	}
	if objects > 0 {
		return &ledger.StoreError{Op: "open", Path: p.desc,
			Err:  fmt.Errorf("schema %q holds tables that are not an idem ledger", p.schema),
			Hint: "point --ledger at another database, or drop that schema"}
	}
	return nil
}

// writeVersions records v in table meta: its row is new for a new ledger.
// The compat column is added when the versions first part, and kept
// up to date once it exists.
func (p *Ledger) writeVersions(ctx context.Context, tx pgx.Tx, v ledger.SchemaVersions, fresh bool) error {
	meta := p.q(`{schema}.meta`)
	if fresh {
		if _, err := tx.Exec(ctx, `INSERT INTO `+meta+` (version) VALUES ($1)`, v.Write); err != nil {
			return err
		}
		if err := p.setHome(ctx, tx); err != nil {
			return err
		}
	} else if _, err := tx.Exec(ctx, `UPDATE `+meta+` SET version = $1`, v.Write); err != nil {
		return err
	}
	var hasCompat bool
	if err := tx.QueryRow(ctx, `SELECT to_jsonb(m) ? 'compat' FROM `+meta+` m`).Scan(&hasCompat); err != nil {
		return err
	}
	if !hasCompat && v.Compat == v.Write {
		return nil
	}
	if _, err := tx.Exec(ctx, `ALTER TABLE `+meta+` ADD COLUMN IF NOT EXISTS compat integer`); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `UPDATE `+meta+` SET compat = $1`, v.Compat)
	return err
}
